"""A yes/no question before something that cannot be undone (deleting a chat): y or Enter says
yes, n or Esc says no. Dismisses with the answer."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("y,enter", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Label(self.question, id="confirm-question")
            yield Label("y / Enter: yes    n / Esc: no", id="confirm-keys")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
