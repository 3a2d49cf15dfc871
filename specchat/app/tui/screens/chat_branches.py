"""The chat's branches: editing a question (a new branch from the same message), moving the focus
between messages and switching a message's siblings. A part of `ChatScreen` (a mixin)."""

from __future__ import annotations

from textual.containers import VerticalScroll

from specchat.app.tui.widgets.message import Turn, UserMessage
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.errors import HistoryError
from specchat.history import StoredMessage


class Branches:
    """Editing questions and moving between branches and messages. `_editing` is this part's
    own; the rest of the screen asks `editing`, `stop_editing` and `send_or_fork`."""

    _editing: StoredMessage | None = None  # the question being edited (a fork on send)

    @property
    def editing(self) -> bool:
        return self._editing is not None

    async def send_or_fork(self, text: str) -> None:
        """Send `text`: in place of the question being edited (a new branch), else after the
        last message."""
        if self._editing is not None:
            await self._fork(self._editing, text)
        else:
            await self.send(text)

    def action_edit_message(self) -> None:
        """`e` (or Enter) on a focused question: edit it."""
        turn = self.focused
        if isinstance(turn, UserMessage) and turn.stored is not None:
            self.start_editing(turn.stored)

    def start_editing(self, message: StoredMessage) -> None:
        if message.id is None:
            return
        self._editing = message
        prompt = self.query_one(PromptInput)
        prompt.text = message.question  # its @path mentions attach the files anew
        prompt.move_cursor(prompt.document.end)
        prompt.border_title = "editing a question — Enter sends it as a new branch, Esc cancels"
        prompt.focus()

    def stop_editing(self) -> None:
        self._editing = None
        self.query_one(PromptInput).border_title = None

    async def _fork(self, edited: StoredMessage, text: str) -> None:
        """Send `text` in place of `edited`: a sibling after the same message, a new branch;
        the old branch stays (←/→ on the question switch back)."""
        self.stop_editing()
        index = self.conversation.fork(edited)
        if index is not None:
            for turn in list(self.query(Turn))[index:]:
                await turn.remove()
            for notice in self.query(".notice"):  # they spoke of answers no longer shown
                await notice.remove()
        await self.send(text)

    def _turns(self) -> list[Turn]:
        return list(self.query(Turn))

    def action_focus_message(self, delta: int) -> None:
        """Move the focus between messages (from the prompt: to the last one); past the last
        message, back to the prompt."""
        turns = self._turns()
        if not turns:
            return
        focused = self.focused
        current = turns.index(focused) if isinstance(focused, Turn) else len(turns)
        target = current + delta
        if target >= len(turns):
            self.query_one(PromptInput).focus()
            return
        self.query_one("#transcript", VerticalScroll).anchor(False)
        turns[max(0, target)].focus()
        self.restart_code_blocks()

    async def action_switch_branch(self, delta: int) -> None:
        """←/→ on a focused message: show its previous or next sibling's branch."""
        turn = self.focused
        if not isinstance(turn, Turn) or turn.stored is None or turn.stored.id is None:
            return
        if not self._idle():
            return
        siblings = self.conversation.siblings(turn.stored)
        if len(siblings) < 2:
            self.notify(
                "this message has no other version: edit a question (e) or regenerate an "
                "answer (Ctrl+R) to make one",
                timeout=4,
            )
            return
        index = siblings.index(turn.stored.id) + delta
        if not 0 <= index < len(siblings):
            return
        await self._show_branch(siblings[index])

    async def _show_branch(self, message_id: int) -> None:
        """Make the branch through `message_id` current and show it, that message focused."""
        self.stop_editing()
        try:
            self.conversation.switch_branch(message_id)
        except HistoryError as exc:
            self.notify(str(exc), severity="error")
            return
        await self._show_conversation(focus=message_id)
