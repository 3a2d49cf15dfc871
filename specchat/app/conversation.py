"""One chat as the chat screen shows it: its current branch, and the only writer of the store for it.

The transcript is the chat's current branch. Asking adds a question after the last message shown;
an edited question is a sibling of the old one (a new branch, `fork`); a regenerated answer is a
sibling of the old answer (`regenerate`, then `record_answer`). A question whose answer failed
before it began is taken back (`take_back_question`): kept, it would be part of every later prompt
and fail each of them. A chat has its own system prompt: a new one starts with the default
(settings' `system_prompt`), kept with the chat once its first question is. Plain Python, no
widgets: the chat screen shows what this holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from specchat.answer_steps import AnswerSteps
from specchat.backends.base import ChatMessage
from specchat.errors import HistoryError
from specchat.history import HistoryStore, StoredMessage

TITLE_LENGTH = 48
NEW_CHAT = "New chat"


def chat_title(text: str) -> str:
    """A new chat's title: its first question, on one line, cut short at a word's end with an
    ellipsis (a single word longer than the title is cut inside it)."""
    line = " ".join(text.split())
    if len(line) <= TITLE_LENGTH:
        return line or NEW_CHAT
    cut = line[: TITLE_LENGTH - 1]
    if line[TITLE_LENGTH - 1] != " " and " " in cut:
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:.") + "…"


class Conversation:
    """A chat's messages on its current branch (none, for a chat not yet stored)."""

    def __init__(
        self, store: HistoryStore, chat_id: int | None = None, default_system: str | None = None
    ) -> None:
        self.store = store
        self.default_system = default_system  # a new chat's system prompt
        self.chat_id: int | None = None
        self.messages: list[StoredMessage] = []
        self.system_prompt: str | None = default_system
        self._unanswered: int | None = None  # the question the running answer answers
        if chat_id is not None:
            self.open(chat_id)

    @property
    def title(self) -> str:
        if self.chat_id is None:
            return ""
        return self.store.chat_title(self.chat_id) or ""

    def open(self, chat_id: int | None) -> None:
        """Show chat `chat_id` (None: a new, empty one) in its current branch; raises
        HistoryError and changes nothing when the store cannot be read."""
        messages = self.store.messages(chat_id) if chat_id is not None else []
        system = self.store.system_prompt(chat_id) if chat_id is not None else self.default_system
        self.chat_id, self.messages, self._unanswered = chat_id, messages, None
        self.system_prompt = system

    def set_system_prompt(self, text: str | None) -> None:
        """This chat's system prompt from the next answer on (None or blank: none); stored with
        the chat (a chat not yet stored keeps it for its first question). Raises HistoryError
        with nothing changed when the store refuses."""
        value = text if text and text.strip() else None
        if self.chat_id is not None:
            self.store.set_system_prompt(self.chat_id, value)
        self.system_prompt = value

    def _last_id(self) -> int | None:
        """The message a new one follows: the last one shown (None: the chat's first)."""
        return self.messages[-1].id if self.messages else None

    def ask(self, text: str, attached: list[tuple[str, int]] | None = None) -> StoredMessage:
        """Add the user's question after the last message shown (a new chat, titled by it, when
        none is open); `attached`: the files at the start of `text` (`attached_spans`). Raises
        HistoryError with nothing changed when the store refuses."""
        message = StoredMessage("user", text, attached=list(attached or ()))
        created = self.chat_id is None
        if created:
            self.chat_id = self.store.new_chat(chat_title(message.question), self.system_prompt)
        try:
            self._unanswered = self.store.add_message(
                self.chat_id, message, parent_id=self._last_id()
            )
        except HistoryError:
            if created:
                self.chat_id = None
            raise
        self.messages.append(message)
        return message

    def fork(self, edited: StoredMessage) -> int | None:
        """Make way for question `edited` asked anew: it and what followed it leave the view (the
        store keeps them), so the next `ask` adds a sibling after the same message, a new branch.
        Returns where the view was cut (None: `edited` is not shown)."""
        index = next((i for i, m in enumerate(self.messages) if m.id == edited.id), None)
        if index is not None:
            self.messages = self.messages[:index]
        return index

    def regenerate(self) -> str | None:
        """Make way for a new version of the last answer: it leaves the view (the store keeps it;
        the new answer becomes its sibling) and its text is returned, a draft source for the new
        one. None when the chat ends with a question."""
        if self.messages and self.messages[-1].role == "assistant":
            return self.messages.pop().content
        return None

    def record_answer(self, answer: StoredMessage) -> str | None:
        """Store a finished answer after the last message shown; returns why it could not be
        saved (it is shown all the same)."""
        error = None
        if self.chat_id is not None:
            try:
                self.store.add_message(self.chat_id, answer, parent_id=self._last_id())
            except HistoryError as exc:
                error = str(exc)
        self.messages.append(answer)
        self._unanswered = None
        return error

    def take_back_question(self) -> StoredMessage | None:
        """The question of an answer that failed before it began leaves the chat and the store,
        and is returned (to go back into the input). None when the failed answer was a
        regenerated one: its question had been answered before."""
        question_id, self._unanswered = self._unanswered, None
        if question_id is None or not self.messages or self.messages[-1].id != question_id:
            return None
        question = self.messages.pop()
        self.store.delete_message(question_id)
        return question

    def answer_steps(self, message: StoredMessage) -> AnswerSteps | None:
        """An answer's steps: those it was recorded with in this session, else the store's (a
        reopened chat); None for an answer stored without them. Raises HistoryError when the
        store cannot be read."""
        if message.steps is not None or message.id is None:
            return message.steps
        return self.store.answer_steps(message.id)

    def siblings(self, message: StoredMessage) -> list[int]:
        """The ids of `message`'s versions, itself included, oldest first."""
        return self.store.siblings(message.id) if message.id is not None else []

    def switch_branch(self, message_id: int) -> None:
        """Make the branch through `message_id` the chat's current one, and show it."""
        self.store.switch_branch(message_id)
        chat_id = self.store.message_chat(message_id)
        self.open(chat_id if chat_id is not None else self.chat_id)

    def prompt(self) -> list[ChatMessage]:
        """The conversation to answer. An answer stopped (or failed) before its first token stays
        in the transcript but not in the prompt: an empty assistant turn would teach the model to
        answer with nothing."""
        return prompt_messages(self.messages, self.system_prompt)

    def last(self, role: str) -> StoredMessage | None:
        return next((m for m in reversed(self.messages) if m.role == role), None)


def prompt_messages(
    messages: Sequence[StoredMessage], system: str | None = None
) -> list[ChatMessage]:
    head = [ChatMessage("system", system)] if system else []
    return head + [
        ChatMessage(m.role, m.content) for m in messages if m.content or m.role == "user"
    ]
