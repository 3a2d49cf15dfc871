"""Editing a system prompt (this chat's, or the default of new chats): a text box, Ctrl+S keeps
it, Esc leaves it as it was. Dismisses with the text (blank: no system prompt) or None."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, TextArea


class SystemPromptScreen(ModalScreen[str | None]):
    BINDINGS = [
        Binding("ctrl+s", "keep", "keep", priority=True),
        Binding("escape", "cancel", "cancel", priority=True),
    ]

    def __init__(self, title: str, text: str | None, note: str = "") -> None:
        super().__init__()
        self.heading = title
        self.text = text or ""
        self.note = note

    def compose(self) -> ComposeResult:
        with Vertical(id="system-prompt"):
            yield Label(self.heading, id="system-prompt-title")
            yield TextArea(self.text, id="system-prompt-text", soft_wrap=True, compact=True)
            if self.note:
                yield Label(self.note, id="system-prompt-note")
            yield Label(
                "Ctrl+S: keep (empty: no system prompt)    Esc: cancel", id="system-prompt-keys"
            )

    def on_mount(self) -> None:
        area = self.query_one(TextArea)
        area.move_cursor(area.document.end)
        area.focus()

    def action_keep(self) -> None:
        self.dismiss(self.query_one(TextArea).text.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)
