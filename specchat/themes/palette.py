"""Colours for speculative runs: which colour a step's text gets from how many tokens it landed, or
from where its draft came from.

The default palette is Okabe–Ito (readable with every common colour-vision deficiency).
"""

from __future__ import annotations

from dataclasses import dataclass

from specchat.decoding.sources import SOURCE_LABELS


@dataclass(frozen=True)
class RunPalette:
    """Colours for steps of 2–3, 4–7 and 8+ tokens (single-token steps stay plain), and one per
    draft source, in `SOURCE_LABELS` order."""

    short: str
    medium: str
    long: str
    sources: tuple[str, ...] = ()

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

    def colour_for_source(self, source: str) -> str | None:
        """The colour of a step whose accepted draft came from `source` ("" or unknown: plain)."""
        for name, colour in zip(SOURCE_LABELS, self.sources):
            if name == source:
                return colour
        return None

    def source_legend(self) -> list[tuple[str, str]]:
        return [(SOURCE_LABELS[name], colour) for name, colour in zip(SOURCE_LABELS, self.sources)]

    def colour(self, tokens: int, source: str, by: str) -> str | None:
        """A step's colour when runs are coloured `by` "length" or "source"; steps of one token
        (nothing drafted was accepted) stay plain either way."""
        if tokens < 2:
            return None
        return self.colour_for_source(source) if by == "source" else self.colour_for(tokens)


# Sources: this turn, earlier in chat, saved chats, previous answer, lookahead, draft model.
COLOUR_BLIND_SAFE = RunPalette(
    short="#56B4E9",
    medium="#E69F00",
    long="#CC79A7",
    sources=("#56B4E9", "#009E73", "#E69F00", "#CC79A7", "#F0E442", "#D55E00", "#0072B2"),
)
DARK = RunPalette(
    short="#7aa2f7",
    medium="#e0af68",
    long="#f7768e",
    sources=("#7dcfff", "#9ece6a", "#e0af68", "#bb9af7", "#f7768e", "#ff9e64", "#2ac3de"),
)
LIGHT = RunPalette(
    short="#005f87",
    medium="#875f00",
    long="#af005f",
    sources=("#005f87", "#005f00", "#875f00", "#af005f", "#5f00af", "#af0000", "#0000af"),
)


def ansi(colour: str, text: str) -> str:
    """Text in a 24-bit foreground colour for terminals (`specchat ask`)."""
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"\x1b[38;2;{r};{g};{b}m{text}\x1b[0m"


def blend(under: str, over: str, share: float) -> str:
    """`over` laid on `under` at `share` opacity, both "#rrggbb": a run's tint on a code
    block's background, dim enough that the code's own colours stay readable."""
    low = [int(under[i : i + 2], 16) for i in (1, 3, 5)]
    high = [int(over[i : i + 2], 16) for i in (1, 3, 5)]
    mixed = [round(a + (b - a) * share) for a, b in zip(low, high)]
    return "#" + "".join(f"{c:02x}" for c in mixed)
