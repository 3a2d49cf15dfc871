"""The message box: Enter sends, Ctrl+J (or Shift+Enter where the terminal reports it) breaks
the line, Up while it is empty asks to edit the last question. A TextArea, because questions with code need several lines."""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea


class PromptInput(TextArea):
    BINDINGS = [
        Binding("ctrl+j,shift+enter", "newline", "newline", show=False),
    ]

    @dataclass
    class Submitted(Message):
        text: str

    class EditLast(Message):
        """Up in an empty prompt: the user wants to edit the last question."""

    def __init__(self, **kwargs) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, compact=True, **kwargs)
        # Function keys belong to the app (one per decoder): drop TextArea's F6/F7 selections.
        keys = self._bindings.key_to_bindings
        for key in [k for k in keys if k[:1] == "f" and k[1:].isdigit()]:
            del keys[key]

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.prevent_default()
            event.stop()
            text = self.text
            if text.strip():
                self.post_message(self.Submitted(text))
            return
        if event.key == "up" and not self.text:
            event.prevent_default()
            event.stop()
            self.post_message(self.EditLast())
            return
        await super()._on_key(event)

    def action_newline(self) -> None:
        self.insert("\n")
