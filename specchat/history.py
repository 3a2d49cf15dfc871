"""Chats kept across runs: one SQLite file under the data dir.

Each assistant message keeps its run spans — (char_start, char_end, n_tokens, source) for every step
that landed more than one token, with where its draft came from — so a reopened chat shows the same
colours it had while streaming — and
its figures: the engine's stats, the seconds the answer took on screen and the decoder parameters
shown, stored together as one JSON object (`_stats_json` and `_stats_from_json`, the only place
they are a dict).
Every write is one transaction; the database runs in WAL mode so a reader never blocks a writer.
Listeners hear which chat each write changed (the saved-chat index follows the store that way).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from specchat.decoding.stats import GenerationStats
from specchat.locations import data_dir

DB_FILE = "history.sqlite3"
RunSpan = tuple[int, int, int, str]  # char start, char end, tokens, draft source ("": unknown)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chats (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    decoder TEXT,
    finish_reason TEXT,
    stats TEXT NOT NULL DEFAULT '{}',
    runs TEXT NOT NULL DEFAULT '[]',
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_chat ON messages(chat_id, id);
"""


@dataclass
class StoredMessage:
    role: str  # user | assistant
    content: str
    decoder: str | None = None
    finish_reason: str | None = None
    stats: GenerationStats | None = None  # an answer's; None for the user's turns
    runs: list[RunSpan] = field(default_factory=list)
    id: int | None = None
    elapsed_seconds: float = 0.0  # from sending to the end of the answer, as the user saw it
    params: str = ""  # the decoder parameters the status bar showed


def _run_span(stored: list) -> RunSpan:
    """A stored span; those saved before sources were kept have three fields."""
    start, end, n_tokens = (int(x) for x in stored[:3])
    return (start, end, n_tokens, str(stored[3]) if len(stored) > 3 else "")


def _stats_json(message: StoredMessage) -> str:
    if message.stats is None:
        return "{}"
    return json.dumps(
        {
            **message.stats.as_dict(),
            "elapsed_seconds": message.elapsed_seconds,
            "params": message.params,
        }
    )


def _stats_from_json(text: str) -> tuple[GenerationStats | None, float, str]:
    """(stats, elapsed seconds, params) of a stored message; no stats for an empty object."""
    data = json.loads(text)
    if not data:
        return None, 0.0, ""
    return (
        GenerationStats.from_dict(data),
        float(data.get("elapsed_seconds", 0.0)),
        str(data.get("params", "")),
    )


@dataclass(frozen=True)
class ChatSummary:
    id: int
    title: str
    updated: float
    messages: int


class HistoryStore:
    """The chat database. Open one per app; all calls come from the UI thread."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_dir() / DB_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)
        self._listeners: list[Callable[[int], None]] = []

    def add_listener(self, listener: Callable[[int], None]) -> None:
        """Call `listener(chat_id)` after every write that changes a chat's messages."""
        self._listeners.append(listener)

    def _changed(self, chat_id: int) -> None:
        for listener in self._listeners:
            listener(chat_id)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # -- chats ------------------------------------------------------------------------------
    def new_chat(self, title: str = "New chat") -> int:
        now = time.time()
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT INTO chats (title, created, updated) VALUES (?, ?, ?)", (title, now, now)
            )
            return int(cursor.lastrowid)

    def list_chats(self) -> list[ChatSummary]:
        rows = self._db.execute(
            "SELECT c.id, c.title, c.updated, COUNT(m.id) FROM chats c "
            "LEFT JOIN messages m ON m.chat_id = c.id GROUP BY c.id ORDER BY c.updated DESC, c.id DESC"
        ).fetchall()
        return [ChatSummary(int(r[0]), r[1], float(r[2]), int(r[3])) for r in rows]

    def chat_title(self, chat_id: int) -> str | None:
        row = self._db.execute("SELECT title FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return None if row is None else row[0]

    def rename_chat(self, chat_id: int, title: str) -> None:
        with self._transaction() as db:
            db.execute("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))

    def delete_chat(self, chat_id: int) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM messages WHERE chat_id = ?", (chat_id,))
            db.execute("DELETE FROM chats WHERE id = ?", (chat_id,))
        self._changed(chat_id)

    # -- messages ---------------------------------------------------------------------------
    def add_message(self, chat_id: int, message: StoredMessage) -> int:
        now = time.time()
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT INTO messages (chat_id, role, content, decoder, finish_reason, stats, runs,"
                " created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    chat_id,
                    message.role,
                    message.content,
                    message.decoder,
                    message.finish_reason,
                    _stats_json(message),
                    json.dumps([list(span) for span in message.runs]),
                    now,
                ),
            )
            db.execute("UPDATE chats SET updated = ? WHERE id = ?", (now, chat_id))
            message.id = int(cursor.lastrowid)
        self._changed(chat_id)
        return message.id

    def delete_message(self, message_id: int) -> None:
        row = self._db.execute(
            "SELECT chat_id FROM messages WHERE id = ?", (message_id,)
        ).fetchone()
        with self._transaction() as db:
            db.execute("DELETE FROM messages WHERE id = ?", (message_id,))
        if row is not None:
            self._changed(int(row[0]))

    def messages(self, chat_id: int) -> list[StoredMessage]:
        rows = self._db.execute(
            "SELECT id, role, content, decoder, finish_reason, stats, runs FROM messages "
            "WHERE chat_id = ? ORDER BY id",
            (chat_id,),
        ).fetchall()
        messages = []
        for r in rows:
            stats, elapsed, params = _stats_from_json(r[5])
            messages.append(
                StoredMessage(
                    role=r[1],
                    content=r[2],
                    decoder=r[3],
                    finish_reason=r[4],
                    stats=stats,
                    runs=[_run_span(span) for span in json.loads(r[6])],
                    id=int(r[0]),
                    elapsed_seconds=elapsed,
                    params=params,
                )
            )
        return messages

    def message_ids(self) -> dict[int, list[int]]:
        """Every chat's message ids, oldest first (what the saved-chat index checks its cache by)."""
        found: dict[int, list[int]] = {}
        for chat_id, message_id in self._db.execute(
            "SELECT chat_id, id FROM messages ORDER BY chat_id, id"
        ):
            found.setdefault(int(chat_id), []).append(int(message_id))
        return found
