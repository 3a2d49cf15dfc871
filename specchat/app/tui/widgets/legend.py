"""What the run colours mean, in the active theme's palette."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from specchat.themes.palette import RunPalette


def legend_text(palette: RunPalette, colour: bool, key: str = "ctrl+t", by: str = "length") -> Text:
    """What the colours mean: tokens per step, or (`by` "source") where the drafts came from."""
    text = Text(no_wrap=True, overflow="ellipsis", end="")
    if not colour:
        shows = "where drafts came from" if by == "source" else "tokens per step"
        text.append(f"run colours off ({key} shows {shows})", style="dim")
        return text
    if by == "source":
        text.append("from: ", style="dim")
        for label, colour_hex in palette.source_legend():  # seven sources: one space apart
            text.append("██", style=colour_hex)
            text.append(f" {label} ", style=colour_hex)
        return text
    text.append("tokens per step: ", style="dim")
    text.append("1 plain  ", style="dim")
    for label, colour_hex in palette.legend():
        text.append("██", style=colour_hex)
        text.append(f" {label.replace(' tokens', '')}  ", style=colour_hex)
    return text


class Legend(Static):
    def show(self, palette: RunPalette, colour: bool, by: str = "length") -> None:
        self.update(legend_text(palette, colour, by=by))
