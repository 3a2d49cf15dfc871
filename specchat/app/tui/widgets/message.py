"""One turn of the transcript. Assistant turns stream in two ways:

- colouring on: Rich Text with each multi-token run styled (Markdown cannot carry per-span colour),
  repainted once per batch of steps;
- colouring off: Textual's Markdown fed through `Markdown.get_stream`, one fragment per batch.
The chat screen hands over batches at a bounded rate (`streaming.py`), so a repaint never happens
per step. When the answer ends the full text is rendered once in the active mode.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, Markdown, Static

from specchat.app.tui.runs import RunText, coloured
from specchat.decoding.events import StepEvent
from specchat.history import StoredMessage
from specchat.themes.palette import RunPalette


class UserMessage(Vertical):
    def __init__(self, text: str) -> None:
        super().__init__(classes="turn user")
        self.text = text

    def compose(self) -> ComposeResult:
        yield Label("you", classes="role")
        yield Static(Text(self.text, end=""), classes="body")


class AssistantMessage(Vertical):
    """An answer, streaming or finished, that can switch between coloured runs and Markdown."""

    def __init__(
        self,
        *,
        palette: RunPalette,
        colour: bool,
        stored: StoredMessage | None = None,
    ) -> None:
        super().__init__(classes="turn assistant")
        self.palette = palette
        self.colour = colour
        self.runs = RunText()
        self.stored = stored
        self.decoder = stored.decoder if stored else None
        self.finish_reason = stored.finish_reason if stored else None
        self.streaming = stored is None
        if stored is not None:
            self.runs = RunText(stored.content, list(stored.runs))
        self._stream = None

    def compose(self) -> ComposeResult:
        yield Label(self._header(), classes="role")
        yield Static("", classes="body runs")
        yield Markdown("", classes="body markdown")

    def _header(self) -> str:
        parts = ["assistant"]
        if self.decoder:
            parts.append(self.decoder)
        if self.finish_reason == "cancelled":
            parts.append("■ stopped")
        elif self.streaming:
            parts.append("…")
        return " · ".join(parts)

    async def on_mount(self) -> None:
        self._apply_mode()
        if self.streaming:
            if not self.colour:
                self._stream = Markdown.get_stream(self.query_one(".markdown", Markdown))
        else:
            await self._render_full()

    def _apply_mode(self) -> None:
        self.query_one(".runs").display = self.colour
        self.query_one(".markdown").display = not self.colour

    @property
    def text(self) -> str:
        return self.runs.text

    async def add_steps(self, events: Sequence[StepEvent]) -> None:
        """A batch of steps: their text added, one repaint (or one Markdown fragment)."""
        for event in events:
            self.runs.add_step(event.text, len(event.tokens))
        decoder = events[-1].decoder if events else self.decoder
        if decoder != self.decoder:
            self.decoder = decoder
            self.query_one(".role", Label).update(self._header())
        if self.colour:
            self.query_one(".runs", Static).update(
                coloured(self.runs.text, self.runs.runs, self.palette)
            )
        elif self._stream is not None:
            await self._stream.write("".join(event.text for event in events))

    async def finish(self, final_text: str, finish_reason: str | None) -> None:
        """Stop streaming and render the whole answer once."""
        self.runs.finish(final_text)
        self.finish_reason = finish_reason
        self.streaming = False
        await self._stop_stream()
        self.query_one(".role", Label).update(self._header())
        await self._render_full()

    async def _stop_stream(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.stop()

    async def _render_full(self) -> None:
        if self.colour:
            self.query_one(".runs", Static).update(
                coloured(self.runs.text, self.runs.runs, self.palette)
            )
        else:
            await self.query_one(".markdown", Markdown).update(self.runs.text)

    async def set_colour(self, colour: bool, palette: RunPalette) -> None:
        """Switch modes (also mid-answer) and repaint with the theme's palette."""
        changed = colour != self.colour
        self.colour = colour
        self.palette = palette
        self._apply_mode()
        if self.streaming and changed:
            await self._stop_stream()
            if not colour:
                markdown = self.query_one(".markdown", Markdown)
                await markdown.update(self.runs.text)
                self._stream = Markdown.get_stream(markdown)
                return
        await self._render_full()
