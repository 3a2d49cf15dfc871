"""A benchmark's own chat store: the questions asked so far, for decoders that draft from saved chats.

`specchat bench --history` runs the questions as one long history, each a chat of its own: after a
question, its turns with greedy's answers are saved here before the next question starts. The
store lives in a temporary folder and is deleted after the run — a benchmark never writes into
the user's chats, nor drafts from them.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from specchat.backends.base import Backend, ChatMessage
from specchat.history import HistoryStore, StoredMessage
from specchat.saved_chats import SavedChatsIndex


class BenchHistory:
    def __init__(self, backend: Backend) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="specchat-bench-history-")
        self.store = HistoryStore(Path(self._folder.name) / "history.sqlite3")
        self.index = SavedChatsIndex(self.store.path, backend, persist=False).start()
        self.store.add_listener(self.index.chat_changed)
        self.index.wait_idle()

    def record(self, title: str, messages: list[ChatMessage]) -> None:
        """Save a finished question as a chat; returns once the index holds it, so the next
        question drafts from it whatever the machine's speed."""
        chat_id = self.store.new_chat(" ".join(title.split())[:48])
        for message in messages:
            self.store.add_message(chat_id, StoredMessage(message.role, message.content))
        self.index.wait_idle()

    def close(self) -> None:
        self.index.close(wait=True)
        self.store.close()
        self._folder.cleanup()

    def __enter__(self) -> BenchHistory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
