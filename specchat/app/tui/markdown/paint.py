"""Laying run colours over drawn text: each drawn character takes the style of the run that covers
its source offset — a foreground colour in prose, a background tint in a code block."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.style import Style
from rich.text import Text

from specchat.history import RunSpan
from specchat.themes.palette import RunPalette, blend


class RunIndex:
    """The runs of an answer, found by source offset. Runs are sorted and never overlap (each is
    one step's text, and steps follow each other)."""

    def __init__(self, runs: Sequence[RunSpan]) -> None:
        self.runs = sorted(runs)
        self._starts = [run[0] for run in self.runs]

    def at(self, offset: int) -> int:
        """The index of the run covering `offset`, or -1."""
        if offset < 0:
            return -1
        i = bisect_right(self._starts, offset) - 1
        if i >= 0 and offset < self.runs[i][1]:
            return i
        return -1


@dataclass(frozen=True)
class RunPaint:
    """How runs look: the palette (None: runs not shown), coloured by "length" or "source", and
    the background a code block's tint is mixed over."""

    palette: RunPalette | None
    by: str = "length"
    code_background: str = "#000000"
    tint_strength: float = 0.4  # the run colour's share of a tinted code cell's background

    def colour(self, run: RunSpan) -> str | None:
        if self.palette is None:
            return None
        _, _, n_tokens, source = run
        return self.palette.colour(n_tokens, source, self.by)

    def prose_style(self, run: RunSpan) -> Style | None:
        colour = self.colour(run)
        return Style(color=colour) if colour else None

    def code_style(self, run: RunSpan) -> Style | None:
        colour = self.colour(run)
        if not colour:
            return None
        return Style(bgcolor=blend(self.code_background, colour, self.tint_strength))


def paint(
    text: Text,
    offsets: Sequence[int],
    index: RunIndex,
    style_of: Callable[[RunSpan], Style | None],
    start: int = 0,
) -> None:
    """Style `text[start:start + len(offsets)]`, whose characters came from source `offsets`,
    with `style_of` the run each character belongs to (one span per stretch of one run)."""
    if not index.runs:
        return
    stretch_run, stretch_start = -1, 0
    for i, offset in enumerate([*offsets, -1]):
        run = index.at(offset) if i < len(offsets) else -1
        if run == stretch_run:
            continue
        if stretch_run >= 0:
            style = style_of(index.runs[stretch_run])
            if style is not None:
                text.stylize(style, start + stretch_start, start + i)
        stretch_run, stretch_start = run, i
