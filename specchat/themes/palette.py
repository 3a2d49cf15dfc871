"""Colours for speculative runs: which colour a step's text gets from how many tokens it landed.

The default palette is Okabe–Ito (readable with every common colour-vision deficiency).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunPalette:
    """Colours for steps of 2–3, 4–7 and 8+ tokens; single-token steps stay plain."""

    short: str
    medium: str
    long: str

    def colour_for(self, tokens: int) -> str | None:
        if tokens < 2:
            return None
        if tokens < 4:
            return self.short
        if tokens < 8:
            return self.medium
        return self.long

    def legend(self) -> list[tuple[str, str]]:
        return [("2–3 tokens", self.short), ("4–7 tokens", self.medium), ("8+ tokens", self.long)]


COLOUR_BLIND_SAFE = RunPalette(short="#56B4E9", medium="#E69F00", long="#CC79A7")
DARK = RunPalette(short="#7aa2f7", medium="#e0af68", long="#f7768e")
LIGHT = RunPalette(short="#005f87", medium="#875f00", long="#af005f")


def ansi(colour: str, text: str) -> str:
    """Text in a 24-bit foreground colour for terminals (`specchat ask`)."""
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"\x1b[38;2;{r};{g};{b}m{text}\x1b[0m"
