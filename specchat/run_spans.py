"""An answer as text plus run spans, and how it looks coloured.

A step that landed n > 1 tokens becomes a span (char_start, char_end, n, source). The spans are
what the history stores, so colouring — by length or by draft source — survives the end of the
answer and a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text

from specchat.history import RunSpan
from specchat.themes.palette import RunPalette


@dataclass
class RunText:
    """The text of an answer so far and the spans of its multi-token steps."""

    text: str = ""
    runs: list[RunSpan] = field(default_factory=list)

    def add_step(self, text: str, n_tokens: int, source: str = "") -> None:
        start = len(self.text)
        self.text += text
        if n_tokens > 1 and text:
            self.runs.append((start, len(self.text), n_tokens, source))

    def finish(self, final_text: str) -> None:
        """Adopt the engine's final text (the same, bar a flushed tail) and clip spans to it."""
        if final_text.startswith(self.text) or not self.text:
            self.text = final_text
        end = len(self.text)
        self.runs = [(s, min(e, end), n, src) for s, e, n, src in self.runs if s < end]


def coloured(
    text: str, runs: list[RunSpan], palette: RunPalette | None, by: str = "length"
) -> Text:
    """Rich Text with each run in its palette colour — by tokens per step or by draft source
    (`by`); single-token steps keep the default style."""
    rendered = Text(text, end="")
    if palette is None:
        return rendered
    for start, end, n_tokens, source in runs:
        colour = palette.colour(n_tokens, source, by)
        if colour:
            rendered.stylize(colour, start, end)
    return rendered
