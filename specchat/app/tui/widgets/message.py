"""One turn of the transcript. An answer is always Markdown with its speculative runs laid over it
(`answer_body.py`: finished blocks are drawn once, only the last one repaints); Ctrl+T shows or
hides the runs, never the Markdown. The chat screen hands over batches of steps at a bounded rate
(`streaming.py`), never a step at a time, and each batch is one repaint.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, Static

from specchat.app.tui.keys import ANSWER_KEYS, MESSAGE_KEYS, QUESTION_KEYS, bindings
from specchat.app.tui.widgets.answer_body import AnswerBody
from specchat.engine.events import StepEvent
from specchat.history import StoredMessage, decoders_label
from specchat.run_spans import RunText
from specchat.themes.palette import RunPalette
from specchat.wording import counted


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


def attachment_line(name: str, block: str, shown: bool) -> Text:
    """A folded attached file: its name and size; shown, its text fenced as the prompt holds
    it (the name line above the fence is the heading)."""
    lines = max(block.count("\n") - 2, 0)  # the breaks after its name and its opening fence
    mark, key = ("▾", "o: fold") if shown else ("▸", "o: show")
    head = Text.assemble(
        f"{mark} ", (name, "bold"), f" · {counted(lines, 'line')}", (f"  ({key})", "dim")
    )
    return Text.assemble(head, "\n", block.partition("\n")[2]) if shown else head


class UserMessage(Turn):
    """A question as the user typed it; the files it attached above it, folded to their names
    (`o` on the question shows their text, again folds it)."""

    BINDINGS = bindings(QUESTION_KEYS)

    def __init__(self, stored: StoredMessage) -> None:
        super().__init__(classes="turn user")
        self.stored = stored
        self.text = stored.question
        self.attachments_shown = False

    def _role_line(self) -> str:
        return " ".join(part for part in ("you", branch_label(self.stored)) if part)

    def compose(self) -> ComposeResult:
        yield Label(self._role_line(), classes="role")
        for name, block in self.stored.attachment_blocks():
            yield Static(attachment_line(name, block, False), classes="attachment")
        yield Static(Text(self.text, end=""), classes="body")

    def toggle_attachments(self) -> bool:
        """Show the attached files' text, or fold it again; False when there are none."""
        blocks = self.stored.attachment_blocks()
        if not blocks:
            return False
        self.attachments_shown = not self.attachments_shown
        for widget, (name, block) in zip(self.query(".attachment"), blocks, strict=True):
            widget.update(attachment_line(name, block, self.attachments_shown))
        return True


class AssistantMessage(Turn):
    """An answer, streaming or finished: Markdown with coloured runs (or without, Ctrl+T)."""

    BINDINGS = bindings(ANSWER_KEYS)

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
        self.decoders: tuple[str, ...] = stored.written_by if stored else ()
        self.finish_reason = stored.finish_reason if stored else None
        self.streaming = stored is None
        if stored is not None:
            self.runs = RunText(stored.content, list(stored.runs))

    def compose(self) -> ComposeResult:
        yield Label(self._header(), classes="role")
        yield AnswerBody(self._shown_palette(), self.colour_by)

    def _shown_palette(self) -> RunPalette | None:
        return self.palette if self.colour else None

    def _header(self) -> str:
        parts = ["assistant"]
        if self.decoders:
            parts.append(decoders_label(self.decoders))
        if self.finish_reason == "cancelled":
            parts.append("■ stopped")
        elif self.streaming:
            parts.append("…")
        marker = branch_label(self.stored)
        return " · ".join(parts) + (f" {marker}" if marker else "")

    def _role_line(self) -> str:
        return self._header()

    @property
    def body(self) -> AnswerBody:
        return self.query_one(AnswerBody)

    async def on_mount(self) -> None:
        if self.runs.text:
            await self.body.show(self.runs.text, self.runs.runs)

    @property
    def text(self) -> str:
        return self.runs.text

    async def add_steps(self, events: Sequence[StepEvent]) -> None:
        """A batch of steps: their text added, one repaint of the answer's last block (what
        the chat keeps of the answer is the worker's `AnswerRecord`, not this)."""
        if not self.runs.text:  # the decoder chosen at the start may have written nothing
            self.decoders = ()
        for event in events:
            self.runs.add_step(event.text, len(event.tokens), event.source)
        new = [e.decoder for e in events if e.decoder and e.decoder not in self.decoders]
        if new:
            self.decoders += tuple(dict.fromkeys(new))
            self.query_one(".role", Label).update(self._header())
        await self.body.show(self.runs.text, self.runs.runs)

    async def finish(self, final_text: str, finish_reason: str | None) -> None:
        """Stop streaming and draw the answer's last block as final. The header keeps its "…"
        until `show_branch`: the chat calls that once the answer is stored and the chat is
        free, so an answer that looks ended takes the next key."""
        self.runs.finish(final_text)
        self.finish_reason = finish_reason
        self.streaming = False
        await self.body.show(self.runs.text, self.runs.runs)

    async def set_colour(self, colour: bool, palette: RunPalette, by: str = "length") -> None:
        """Show the runs or not (also mid-answer), in the theme's palette, coloured `by` tokens
        per step ("length") or draft source ("source")."""
        self.colour = colour
        self.palette = palette
        self.colour_by = by
        await self.body.recolour(self._shown_palette(), by)
