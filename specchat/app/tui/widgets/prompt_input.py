"""The message box: Enter sends, Ctrl+J (or Shift+Enter where the terminal reports it) breaks
the line, Up while it is empty asks to edit the last question. A TextArea, because questions with code need several lines."""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import TextArea

from specchat.app.tui.keys import PROMPT_KEYS, bindings

SEND, NEWLINE, EDIT_LAST = PROMPT_KEYS


class PromptInput(TextArea):
    BINDINGS = bindings(PROMPT_KEYS)

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
        if SEND.matches(event.key):
            event.prevent_default()
            event.stop()
            text = self.text
            if text.strip():
                self.post_message(self.Submitted(text))
            return
        if NEWLINE.matches(event.key):
            # at once, not as a binding's action (run later): in a burst of keys — a paste, a
            # laggy link — the line break lands between the characters typed around it
            event.prevent_default()
            event.stop()
            self.insert("\n")
            return
        if EDIT_LAST.matches(event.key) and not self.text:
            event.prevent_default()
            event.stop()
            self.post_message(self.EditLast())
            return
        await super()._on_key(event)
