"""Chats kept across runs: one SQLite file under the data dir.

Each assistant message keeps its run spans — (char_start, char_end, n_tokens, source) for every step
that landed more than one token, with where its draft came from — so a reopened chat shows the same
colours it had while streaming — and its figures: the engine's stats, the seconds the answer took on
screen and the decoder parameters shown, stored together as one JSON object (`_stats_json` and
`_stats_from_json`, the only place they are a dict). Its steps (`drafts.AnswerSteps`: what each
step drafted, kept and threw away) live in a table of their own, `answer_steps`, read only when
asked for (`answer_steps`): opening a chat does not load them.

A chat is a tree: every message has a parent (the message it follows; none for the first), an
edited question is a sibling of the one it replaces and a regenerated answer a sibling of the
earlier answer. The chat's transcript is the path from its first message to its current leaf;
`switch_branch` moves the leaf. An FTS5 index over message content (kept by triggers) answers
`search`.

A chat may have a system prompt of its own (`system_prompt`), and a question the files it
attached: their text is part of its content (the prompt, the context count and search all see
it), and `attached` says where each file's block ends, so a transcript can fold them.

The schema carries its version in `PRAGMA user_version`; opening a file of an older version
migrates it in one transaction (`_MIGRATIONS`), a newer one is refused. Every failure of the file
itself (corrupt, locked past `timeout`, newer) is a `HistoryError`: one line for the user.
Every write is one transaction; the database runs in WAL mode so a reader never blocks a writer.
Listeners hear which chat each write changed (the saved-chat index follows the store that way).
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from specchat.answer_steps import AnswerSteps
from specchat.engine.stats import GenerationStats
from specchat.errors import HistoryError
from specchat.locations import data_dir

DB_FILE = "history.sqlite3"
RunSpan = tuple[int, int, int, str]  # char start, char end, tokens, draft source ("": unknown)
SCHEMA_VERSION = 3
LOCK_TIMEOUT_SECONDS = 5.0  # how long a write waits for another process's transaction

# Version 0: the tables as the first releases wrote them (no user_version set). A new file is
# made as version 0 and migrated like an old one, so both reach the same schema the same way.
_SCHEMA_V0 = [
    """CREATE TABLE IF NOT EXISTS chats (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    decoder TEXT,
    finish_reason TEXT,
    stats TEXT NOT NULL DEFAULT '{}',
    runs TEXT NOT NULL DEFAULT '[]',
    created REAL NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS messages_by_chat ON messages(chat_id, id)",
]

# Version 1: branches (a parent per message, a current leaf per chat) and full-text search.
# Each message of a version-0 chat follows the one before it; the leaf is the chat's last message.
_TO_V1 = [
    "ALTER TABLE messages ADD COLUMN parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE",
    "UPDATE messages SET parent_id = (SELECT MAX(p.id) FROM messages p "
    "WHERE p.chat_id = messages.chat_id AND p.id < messages.id)",
    "CREATE INDEX messages_by_parent ON messages(chat_id, parent_id)",
    "ALTER TABLE chats ADD COLUMN leaf_id INTEGER",
    "UPDATE chats SET leaf_id = (SELECT MAX(m.id) FROM messages m WHERE m.chat_id = chats.id)",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id')",
    "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
    "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN "
    "INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END",
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);"
    " END",
    "CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);"
    " INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END",
]

# Version 2: an answer's steps (drafted, accepted, rejected text, source, depth, pass cost) and
# the pass costs they were measured with, as one JSON object per answer. Older answers have none.
_TO_V2 = [
    "CREATE TABLE answer_steps ("
    " message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,"
    " steps TEXT NOT NULL)",
]

# Version 3: a system prompt per chat (NULL: none), and the files a question attached: their
# names and how many leading characters of its content each one's block takes (`attached`).
_TO_V3 = [
    "ALTER TABLE chats ADD COLUMN system_prompt TEXT",
    "ALTER TABLE messages ADD COLUMN attachments TEXT NOT NULL DEFAULT '[]'",
]

_MIGRATIONS = [_TO_V1, _TO_V2, _TO_V3]  # _MIGRATIONS[v] takes a file from version v to v + 1
assert len(_MIGRATIONS) == SCHEMA_VERSION


class _Leaf:
    def __repr__(self) -> str:
        return "LEAF"


LEAF = _Leaf()  # add_message's default parent: the chat's current leaf


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
    parent_id: int | None = None  # the message this one follows; None for a chat's first
    branch: tuple[int, int] = (1, 1)  # (position among its siblings from 1, how many there are)
    # an answer's steps: written with it when given; `HistoryStore.answer_steps` reads them back
    steps: AnswerSteps | None = None
    # a question's attached files, in order: (name, characters its block takes at the start of
    # `content`, the separator after it included); the question as typed follows them
    attached: list[tuple[str, int]] = field(default_factory=list)

    @property
    def question(self) -> str:
        """The content without the attached files' blocks: what the user typed."""
        return self.content[sum(chars for _, chars in self.attached) :]

    def attachment_blocks(self) -> list[tuple[str, str]]:
        """(name, block text) of each attached file, as the prompt holds it."""
        blocks, start = [], 0
        for name, chars in self.attached:
            blocks.append((name, self.content[start : start + chars].rstrip("\n")))
            start += chars
        return blocks

    @property
    def written_by(self) -> tuple[str, ...]:
        """Every decoder that wrote this answer, in the order they ran (a switch mid-answer
        makes two or more); the stored decoder alone for answers kept without them."""
        names = tuple(self.stats.decoders) if self.stats is not None else ()
        if self.decoder and self.decoder not in names:
            names += (self.decoder,)
        return names

    @property
    def written_by_label(self) -> str:
        """`written_by` as one label ("suffix → greedy"); "" when unknown."""
        return decoders_label(self.written_by)


def decoders_label(names: tuple[str, ...]) -> str:
    """The decoders that wrote an answer, as its header and exports name them."""
    return " → ".join(names)


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
    messages: int  # every message, in every branch


@dataclass(frozen=True)
class SearchHit:
    chat_id: int
    message_id: int
    title: str  # the chat's
    role: str
    snippet: str  # a few words around the match, the matches between the two marks


_MESSAGE_COLUMNS = (
    "m.id, m.role, m.content, m.decoder, m.finish_reason, m.stats, m.runs, m.parent_id,"
    " m.attachments"
)


def _fts_query(text: str) -> str:
    """What the user typed as an FTS5 query: every word must appear (as a word or the start of
    one), and nothing they type is read as FTS5 syntax."""
    return " ".join(f'"{word}" *' for word in re.findall(r"\w+", text))


class HistoryStore:
    """The chat database. Open one per app; all calls come from the UI thread (a worker thread
    opens its own). `timeout`: how long a write waits for another process's transaction before
    it fails with a HistoryError."""

    def __init__(self, path: Path | None = None, *, timeout: float = LOCK_TIMEOUT_SECONDS) -> None:
        self.path = path or data_dir() / DB_FILE
        self.timeout = timeout
        self._listeners: list[Callable[[int], None]] = []
        with self._errors():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=timeout)
            try:
                self._open()
            except BaseException:
                self._db.close()
                raise

    def _open(self) -> None:
        version = self._version()
        if version > SCHEMA_VERSION:
            raise HistoryError(
                f"chat database {self.path} was written by a newer specchat (schema {version}; "
                f"this one reads up to {SCHEMA_VERSION}): upgrade specchat"
            )
        if self._db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        if version < SCHEMA_VERSION:
            self._migrate()

    def _version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        """Bring the file to SCHEMA_VERSION in one transaction (another process may have done
        it meanwhile: the version is read again inside)."""
        with self._transaction() as db:
            version = self._version()
            if version == 0:
                for statement in _SCHEMA_V0:
                    db.execute(statement)
            for migration in _MIGRATIONS[version:]:
                for statement in migration:
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """SQLite's failures of the file as one line the user can act on."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                raise HistoryError(
                    f"chat database {self.path} is locked by another process (waited "
                    f"{self.timeout:g} s): try again once it is done"
                ) from None
            if any(word in text for word in ("unable to open", "readonly", "disk", "full")):
                raise HistoryError(f"chat database {self.path}: {text}") from None
            raise  # a mistake in our SQL: a bug, not the user's to fix
        except sqlite3.DatabaseError as exc:  # not a database, malformed image
            raise HistoryError(
                f"chat database {self.path} is unreadable ({exc}): move it aside to start afresh"
            ) from None
        except OSError as exc:
            raise HistoryError(f"chat database {self.path}: {exc.strerror or exc}") from None

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._errors():
            return self._db.execute(sql, params).fetchall()

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
        with self._errors():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- chats ------------------------------------------------------------------------------
    def new_chat(self, title: str = "New chat", system_prompt: str | None = None) -> int:
        now = time.time()
        value = system_prompt if system_prompt and system_prompt.strip() else None
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT INTO chats (title, created, updated, system_prompt) VALUES (?, ?, ?, ?)",
                (title, now, now, value),
            )
            return int(cursor.lastrowid)

    def list_chats(self) -> list[ChatSummary]:
        rows = self._rows(
            "SELECT c.id, c.title, c.updated, COUNT(m.id) FROM chats c "
            "LEFT JOIN messages m ON m.chat_id = c.id GROUP BY c.id ORDER BY c.updated DESC, c.id DESC"
        )
        return [ChatSummary(int(r[0]), r[1], float(r[2]), int(r[3])) for r in rows]

    def chat(self, chat_id: int) -> ChatSummary | None:
        return next((c for c in self.list_chats() if c.id == chat_id), None)

    def chat_title(self, chat_id: int) -> str | None:
        rows = self._rows("SELECT title FROM chats WHERE id = ?", (chat_id,))
        return rows[0][0] if rows else None

    def rename_chat(self, chat_id: int, title: str) -> None:
        with self._transaction() as db:
            db.execute("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))

    def system_prompt(self, chat_id: int) -> str | None:
        """The chat's own system prompt (None: it has none)."""
        rows = self._rows("SELECT system_prompt FROM chats WHERE id = ?", (chat_id,))
        return rows[0][0] if rows and rows[0][0] else None

    def set_system_prompt(self, chat_id: int, text: str | None) -> None:
        """Give the chat a system prompt (None or blank: none); later answers follow it."""
        value = text if text and text.strip() else None
        with self._transaction() as db:
            db.execute("UPDATE chats SET system_prompt = ? WHERE id = ?", (value, chat_id))

    def delete_chat(self, chat_id: int) -> None:
        with self._transaction() as db:
            db.execute("UPDATE messages SET parent_id = NULL WHERE chat_id = ?", (chat_id,))
            db.execute("DELETE FROM messages WHERE chat_id = ?", (chat_id,))
            db.execute("DELETE FROM chats WHERE id = ?", (chat_id,))
        self._changed(chat_id)

    # -- messages ---------------------------------------------------------------------------
    def add_message(
        self, chat_id: int, message: StoredMessage, parent_id: int | None | _Leaf = LEAF
    ) -> int:
        """Add `message` after `parent_id` (default: the chat's current leaf; None: as a first
        message) and make it the chat's leaf. A parent that already has a child makes a branch."""
        now = time.time()
        with self._transaction() as db:
            if isinstance(parent_id, _Leaf):
                row = db.execute("SELECT leaf_id FROM chats WHERE id = ?", (chat_id,)).fetchone()
                parent_id = None if row is None or row[0] is None else int(row[0])
            cursor = db.execute(
                "INSERT INTO messages (chat_id, role, content, decoder, finish_reason, stats, runs,"
                " created, parent_id, attachments) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    chat_id,
                    message.role,
                    message.content,
                    message.decoder,
                    message.finish_reason,
                    _stats_json(message),
                    json.dumps([list(span) for span in message.runs]),
                    now,
                    parent_id,
                    json.dumps([list(item) for item in message.attached], ensure_ascii=False),
                ),
            )
            message.id = int(cursor.lastrowid)
            message.parent_id = parent_id
            if message.steps is not None:
                db.execute(
                    "INSERT INTO answer_steps (message_id, steps) VALUES (?, ?)",
                    (message.id, json.dumps(message.steps.as_dict(), ensure_ascii=False)),
                )
            db.execute(
                "UPDATE chats SET updated = ?, leaf_id = ? WHERE id = ?",
                (now, message.id, chat_id),
            )
            message.branch = self._branch(message.id)
        self._changed(chat_id)
        return message.id

    def delete_message(self, message_id: int) -> None:
        """Delete a message and everything after it in its branches; the chat shows the message
        before it when it showed one of those."""
        rows = self._rows("SELECT chat_id, parent_id FROM messages WHERE id = ?", (message_id,))
        if not rows:
            return
        chat_id, parent_id = int(rows[0][0]), rows[0][1]
        with self._transaction() as db:
            db.execute("DELETE FROM messages WHERE id = ?", (message_id,))
            db.execute(
                "UPDATE chats SET leaf_id = ? WHERE id = ? AND leaf_id IS NOT NULL AND "
                "leaf_id NOT IN (SELECT id FROM messages WHERE chat_id = ?)",
                (parent_id, chat_id, chat_id),
            )
        self._changed(chat_id)

    def messages(self, chat_id: int) -> list[StoredMessage]:
        """The chat's transcript: the path from its first message to its current leaf, each
        message with its place among its siblings."""
        rows = self._rows(
            "WITH RECURSIVE path(id, depth) AS ("
            " SELECT leaf_id, 0 FROM chats WHERE id = ? AND leaf_id IS NOT NULL"
            " UNION ALL SELECT m.parent_id, p.depth + 1 FROM messages m JOIN path p ON m.id = p.id"
            " WHERE m.parent_id IS NOT NULL)"
            f" SELECT {_MESSAGE_COLUMNS},"
            " (SELECT COUNT(*) FROM messages s WHERE s.chat_id = m.chat_id"
            "  AND s.parent_id IS m.parent_id AND s.id <= m.id),"
            " (SELECT COUNT(*) FROM messages s WHERE s.chat_id = m.chat_id"
            "  AND s.parent_id IS m.parent_id)"
            " FROM path JOIN messages m ON m.id = path.id ORDER BY path.depth DESC",
            (chat_id,),
        )
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
                    parent_id=None if r[7] is None else int(r[7]),
                    branch=(int(r[9]), int(r[10])),
                    attached=[(str(name), int(chars)) for name, chars in json.loads(r[8])],
                )
            )
        return messages

    def answer_steps(self, message_id: int) -> AnswerSteps | None:
        """The steps kept with an answer; None for one stored without them (older versions, a
        question)."""
        rows = self._rows("SELECT steps FROM answer_steps WHERE message_id = ?", (message_id,))
        return AnswerSteps.from_dict(json.loads(rows[0][0])) if rows else None

    def _branch(self, message_id: int) -> tuple[int, int]:
        siblings = self.siblings(message_id)
        return (siblings.index(message_id) + 1, len(siblings)) if siblings else (1, 1)

    def siblings(self, message_id: int) -> list[int]:
        """The ids of the messages that follow the same message as `message_id` (itself
        included), oldest first: the alternatives the chat can switch between there."""
        rows = self._rows(
            "SELECT s.id FROM messages m JOIN messages s ON s.chat_id = m.chat_id"
            " AND s.parent_id IS m.parent_id WHERE m.id = ? ORDER BY s.id",
            (message_id,),
        )
        return [int(r[0]) for r in rows]

    def message_chat(self, message_id: int) -> int | None:
        rows = self._rows("SELECT chat_id FROM messages WHERE id = ?", (message_id,))
        return int(rows[0][0]) if rows else None

    def switch_branch(self, message_id: int) -> None:
        """Show `message_id`'s branch: the chat's leaf becomes the end of its latest
        continuation (the newest child at each step)."""
        chat_id = self.message_chat(message_id)
        if chat_id is None:
            return
        with self._transaction() as db:
            leaf = message_id
            while True:
                row = db.execute(
                    "SELECT MAX(id) FROM messages WHERE parent_id = ?", (leaf,)
                ).fetchone()
                if row[0] is None:
                    break
                leaf = int(row[0])
            db.execute("UPDATE chats SET leaf_id = ? WHERE id = ?", (leaf, chat_id))
        self._changed(chat_id)

    def search(
        self, text: str, limit: int = 50, marks: tuple[str, str] = ("[", "]")
    ) -> list[SearchHit]:
        """Messages of every chat, in every branch, holding all the words of `text` (a word may
        be the start of a longer one), best match first."""
        query = _fts_query(text)
        if not query:
            return []
        rows = self._rows(
            "SELECT m.chat_id, m.id, c.title, m.role,"
            " snippet(messages_fts, 0, ?, ?, '…', 12) FROM messages_fts"
            " JOIN messages m ON m.id = messages_fts.rowid JOIN chats c ON c.id = m.chat_id"
            " WHERE messages_fts MATCH ? ORDER BY rank, m.id DESC LIMIT ?",
            (marks[0], marks[1], query, limit),
        )
        return [SearchHit(int(r[0]), int(r[1]), r[2], r[3], r[4]) for r in rows]

    def message_ids(self) -> dict[int, list[int]]:
        """Every chat's transcript as message ids, oldest first (what the saved-chat index
        checks its cache by)."""
        parents: dict[int, int | None] = {}
        for message_id, parent_id in self._rows("SELECT id, parent_id FROM messages"):
            parents[int(message_id)] = parent_id
        found: dict[int, list[int]] = {}
        for chat_id, leaf_id in self._rows(
            "SELECT id, leaf_id FROM chats WHERE leaf_id IS NOT NULL ORDER BY id"
        ):
            path: list[int] = []
            node = leaf_id
            while node is not None and node in parents:
                path.append(int(node))
                node = parents[node]
            found[int(chat_id)] = path[::-1]
        return found
