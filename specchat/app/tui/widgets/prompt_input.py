"""The message box: Enter sends, Ctrl+J (or Shift+Enter where the terminal reports it) breaks
the line, Up while it is empty asks to edit the last question, Tab after `@` completes a file's
path as a shell does (a bare `@`: asks for the file picker). A TextArea, because questions with
code need several lines."""

from __future__ import annotations

import re
from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import TextArea

from specchat.app.tui.keys import PROMPT_KEYS, bindings
from specchat.attachments import complete_path, mention_of

SEND, NEWLINE, EDIT_LAST, COMPLETE = PROMPT_KEYS
_MENTION_AT_CURSOR = re.compile(r"(?<!\S)@(\S*)$")
_SHOWN_NAMES = 12  # completions listed when Tab cannot choose


class PromptInput(TextArea):
    BINDINGS = bindings(PROMPT_KEYS)

    @dataclass
    class Submitted(Message):
        text: str

    class EditLast(Message):
        """Up in an empty prompt: the user wants to edit the last question."""

    class PickFile(Message):
        """Tab after a bare `@`: the user wants to choose the file."""

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
        mention = self._mention_at_cursor() if COMPLETE.matches(event.key) else None
        if mention is not None:
            event.prevent_default()
            event.stop()
            self._complete(mention)
            return
        await super()._on_key(event)

    def _mention_at_cursor(self) -> str | None:
        """The `@path` being typed where the cursor is (without its @); None when the cursor is
        not at the end of one."""
        row, column = self.cursor_location
        found = _MENTION_AT_CURSOR.search(self.document.get_line(row)[:column])
        return found.group(1) if found else None

    def _complete(self, partial: str) -> None:
        if not partial:
            self.post_message(self.PickFile())
            return
        completed, names = complete_path(partial)
        if completed != partial or (len(names) == 1 and not names[0].endswith("/")):
            whole = len(names) == 1 and not names[0].endswith("/")  # a file: the word is done
            self.insert(completed[len(partial) :] + (" " if whole else ""))
        elif len(names) > 1:
            more = f" … {len(names) - _SHOWN_NAMES} more" if len(names) > _SHOWN_NAMES else ""
            self.notify("  ".join(names[:_SHOWN_NAMES]) + more, title=f"@{partial}")
        elif not names:
            self.notify(f"no file starts with {partial}", severity="warning")

    def attach(self, path: str) -> None:
        """Put `@path` at the cursor (the file picker's choice), a space before it where the
        text before does not end in one."""
        row, column = self.cursor_location
        before = self.document.get_line(row)[:column]
        self.insert(("" if not before or before[-1].isspace() else " ") + mention_of(path) + " ")
