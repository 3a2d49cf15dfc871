"""One turn of the transcript. Assistant turns stream in two ways:

- colouring on: Rich Text with each multi-token run styled (Markdown cannot carry per-span colour).
  Only the answer's tail is live: once it holds SETTLE_CHARS, the lines before its last line break
  move into a static piece that is never rendered again. A batch of steps repaints the tail alone,
  and lays the transcript out only when the tail's line count changed — so the work per batch does
  not grow with the answer, nor with the transcript;
- colouring off: Textual's Markdown fed through `Markdown.get_stream`, one fragment per batch
  (it re-parses from the last block only).
The chat screen hands over batches at a bounded rate (`streaming.py`), never a step at a time.
When the answer ends the full text is rendered once, as one piece, in the active mode.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Size
from textual.widgets import Label, Markdown, Static

from specchat.app.tui.keys import MESSAGE_KEYS, QUESTION_KEYS, bindings
from specchat.app.tui.runs import RunText, clip_runs, coloured
from specchat.engine.events import StepEvent
from specchat.history import StoredMessage
from specchat.themes.palette import RunPalette

SETTLE_CHARS = 400  # a live tail longer than this gives its finished lines to a static piece


def branch_label(message: StoredMessage | None) -> str:
    """The marker "‹2/3›" on a message with siblings (other versions of a question or answer)."""
    if message is None:
        return ""
    index, count = message.branch
    return f"‹{index}/{count}›" if count > 1 else ""


class Turn(Vertical):
    """A message of the transcript. It takes focus (Ctrl+Up, Shift+Tab, or Up/Down from another
    message) so keys can act on it; the chat screen does what they ask (edit, switch branch,
    copy), the turn only knows its stored message."""

    can_focus = True
    BINDINGS = bindings(MESSAGE_KEYS)

    stored: StoredMessage | None

    def _role_line(self) -> str:
        raise NotImplementedError

    def show_branch(self, stored: StoredMessage) -> None:
        """The message was saved (or another branch chosen): its marker follows."""
        self.stored = stored
        self.query_one(".role", Label).update(self._role_line())


class UserMessage(Turn):
    BINDINGS = bindings(QUESTION_KEYS)

    def __init__(self, text: str, stored: StoredMessage | None = None) -> None:
        super().__init__(classes="turn user")
        self.text = text
        self.stored = stored

    def _role_line(self) -> str:
        return " ".join(part for part in ("you", branch_label(self.stored)) if part)

    def compose(self) -> ComposeResult:
        yield Label(self._role_line(), classes="role")
        yield Static(Text(self.text, end=""), classes="body")


class AssistantMessage(Turn):
    """An answer, streaming or finished, that can switch between coloured runs and Markdown."""

    def __init__(
        self,
        *,
        palette: RunPalette,
        colour: bool,
        stored: StoredMessage | None = None,
        colour_by: str = "length",
    ) -> None:
        super().__init__(classes="turn assistant")
        self.palette = palette
        self.colour = colour
        self.colour_by = colour_by
        self.runs = RunText()
        self.stored = stored
        self.decoder = stored.decoder if stored else None
        self.finish_reason = stored.finish_reason if stored else None
        self.streaming = stored is None
        if stored is not None:
            self.runs = RunText(stored.content, list(stored.runs))
        self._stream = None
        self._settled = 0  # characters already in static pieces (coloured streaming)

    def compose(self) -> ComposeResult:
        yield Label(self._header(), classes="role")
        yield Vertical(classes="body settled")
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
        marker = branch_label(self.stored)
        return " · ".join(parts) + (f" {marker}" if marker else "")

    def _role_line(self) -> str:
        return self._header()

    async def on_mount(self) -> None:
        self._apply_mode()
        if self.streaming:
            if not self.colour:
                self._stream = Markdown.get_stream(self.query_one(".markdown", Markdown))
        else:
            await self._render_full()

    def _apply_mode(self) -> None:
        self.query_one(".settled").display = self.colour
        self.query_one(".runs").display = self.colour
        self.query_one(".markdown").display = not self.colour

    @property
    def text(self) -> str:
        return self.runs.text

    async def add_steps(self, events: Sequence[StepEvent]) -> None:
        """A batch of steps: their text added, one repaint of the live tail (or one Markdown
        fragment)."""
        for event in events:
            self.runs.add_step(event.text, len(event.tokens), event.source)
        decoder = events[-1].decoder if events else self.decoder
        if decoder != self.decoder:
            self.decoder = decoder
            self.query_one(".role", Label).update(self._header())
        if self.colour:
            await self._settle()
            self._repaint_tail()
        elif self._stream is not None:
            await self._stream.write("".join(event.text for event in events))

    def _piece(self, start: int, end: int) -> Text:
        text = self.runs.text
        runs = clip_runs(self.runs.runs, start, end)
        return coloured(text[start:end], runs, self.palette, self.colour_by)

    async def _settle(self) -> None:
        """Move the tail's finished lines into a static piece once the tail is long."""
        text = self.runs.text
        if len(text) - self._settled < SETTLE_CHARS:
            return
        cut = text.rfind("\n", self._settled)
        if cut < 0:
            return
        # text[a:cut] then text[cut+1:] stacked render the lines text[a:] renders
        piece = Static(self._piece(self._settled, cut), classes="body")
        self._settled = cut + 1
        await self.query_one(".settled", Vertical).mount(piece)

    def _repaint_tail(self) -> None:
        """Repaint the live tail; lay out only when its height changed."""
        tail = self.query_one(".runs", Static)
        width, before = tail.content_size
        tail.update(self._piece(self._settled, len(self.runs.text)), layout=False)
        if not width or tail.get_content_height(Size(width, 0), Size(width, 0), width) != before:
            tail.refresh(layout=True)

    async def finish(self, final_text: str, finish_reason: str | None) -> None:
        """Stop streaming and render the whole answer once. The header keeps its "…" until
        `show_branch`: the chat calls that once the answer is stored and the chat is free, so
        an answer that looks ended takes the next key."""
        self.runs.finish(final_text)
        self.finish_reason = finish_reason
        self.streaming = False
        await self._stop_stream()
        await self._render_full()

    async def _stop_stream(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.stop()

    async def _render_full(self) -> None:
        """The whole answer as one piece."""
        with self.app.batch_update():  # never a frame with the pieces gone or doubled
            if self.colour:
                self.query_one(".runs", Static).update(
                    coloured(self.runs.text, self.runs.runs, self.palette, self.colour_by)
                )
            else:
                await self.query_one(".markdown", Markdown).update(self.runs.text)
            if self._settled:
                self._settled = 0
                await self.query_one(".settled", Vertical).remove_children()

    async def set_colour(self, colour: bool, palette: RunPalette, by: str = "length") -> None:
        """Switch modes (also mid-answer) and repaint with the theme's palette, runs coloured
        `by` tokens per step ("length") or draft source ("source")."""
        changed = colour != self.colour
        self.colour = colour
        self.palette = palette
        self.colour_by = by
        self._apply_mode()
        if self.streaming and changed:
            await self._stop_stream()
            if not colour:
                markdown = self.query_one(".markdown", Markdown)
                await markdown.update(self.runs.text)
                self._stream = Markdown.get_stream(markdown)
                return
        await self._render_full()
