"""Copying and exporting from the chat: the last answer, the whole chat as Markdown (to the
clipboard or a file), a focused message and its code blocks. A part of `ChatScreen` (a mixin)."""

from __future__ import annotations

from pathlib import Path

from specchat.app.chat_export import chat_markdown
from specchat.app.tui.clipboard import code_blocks, copy_to_clipboard
from specchat.app.tui.widgets.message import Turn
from specchat.locations import exports_dir


class Copying:
    """What leaves the chat: the clipboard and exported files. `_code_block` is this part's
    own; moving to another message calls `restart_code_blocks`."""

    _code_block = 0  # which code block `y` copies next from the focused message

    def restart_code_blocks(self) -> None:
        """`y` copies the focused message's first code block next."""
        self._code_block = 0

    def action_copy_answer(self) -> None:
        last = self.conversation.last("assistant")
        if last is None:
            self.notify("no answer to copy yet", severity="warning")
            return
        copy_to_clipboard(self.app, last.content, "the last answer")

    def _title(self) -> str:
        return self.conversation.title or "specchat chat"

    def action_copy_chat(self) -> None:
        copy_to_clipboard(
            self.app,
            chat_markdown(self._title(), self.messages, self.conversation.system_prompt),
            "the chat",
        )

    def action_export(self) -> Path | None:
        if not self.messages:
            self.notify("nothing to export yet", severity="warning")
            return None
        stem = "".join(c if c.isalnum() else "-" for c in self._title().lower()).strip("-")[:40]
        path = exports_dir() / f"{self.chat_id or 0:04d}-{stem or 'chat'}.md"
        path.write_text(
            chat_markdown(self._title(), self.messages, self.conversation.system_prompt),
            encoding="utf-8",
        )
        self.notify(f"exported to {path}", timeout=8)
        return path

    def action_copy_message(self) -> None:
        """`c` on a focused message: copy its text."""
        turn = self.focused
        if isinstance(turn, Turn) and turn.stored is not None:
            who = "the question" if turn.stored.role == "user" else "the answer"
            copy_to_clipboard(self.app, turn.stored.content, who)

    def action_copy_code(self) -> None:
        """`y` on a focused message: copy its code block; pressed again, the next one."""
        turn = self.focused
        if not isinstance(turn, Turn) or turn.stored is None:
            return
        blocks = code_blocks(turn.stored.content)
        if not blocks:
            self.notify("no code block in this message (c copies all of it)", severity="warning")
            return
        index = self._code_block % len(blocks)
        self._code_block += 1
        what = "the code block" if len(blocks) == 1 else f"code block {index + 1}/{len(blocks)}"
        copy_to_clipboard(self.app, blocks[index], what)
