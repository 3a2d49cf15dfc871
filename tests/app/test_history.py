"""The chat store on real SQLite files: a database written before schema versions opens, migrates
and keeps every chat, message, colour and figure; branches; full-text search."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from specchat.history import SCHEMA_VERSION, HistoryStore, StoredMessage

V0_DUMP = Path(__file__).parent / "fixtures" / "history_v0.sql"


def old_database(path: Path) -> Path:
    """A file as today's code wrote it before versions existed (tests/app/fixtures)."""
    db = sqlite3.connect(path)
    db.executescript(V0_DUMP.read_text())
    db.close()
    return path


def raw_rows(path: Path) -> list[tuple]:
    db = sqlite3.connect(path)
    try:
        return db.execute(
            "SELECT id, chat_id, role, content, decoder, finish_reason, stats, runs FROM messages"
            " ORDER BY id"
        ).fetchall()
    finally:
        db.close()


def test_old_database_migrates_and_keeps_every_message_and_colour(tmp_path):
    path = old_database(tmp_path / "history.sqlite3")
    before = raw_rows(path)
    store = HistoryStore(path)
    assert [(c.title, c.messages) for c in store.list_chats()] == [
        ("Fibonacci in Python", 2),
        ("Repeating a sentence", 4),
    ]
    assert raw_rows(path) == before  # nothing rewritten
    chat = store.messages(1)
    assert [m.role for m in chat] == ["user", "assistant", "user", "assistant"]
    assert [m.content for m in chat] == [row[3] for row in before[:4]]
    answer = chat[1]
    assert answer.runs == [(7, 23, 5, "prompt"), (23, 40, 9, "saved")]
    assert answer.decoder == "pld" and answer.params == "max_ngram=3"
    assert answer.stats is not None and answer.stats.accepted == 16
    assert answer.elapsed_seconds == 0.21
    assert chat[3].runs == [(0, 4, 2, "")]  # saved before sources were kept
    assert chat[3].finish_reason == "cancelled"
    assert all(m.branch == (1, 1) for m in chat)
    assert store.system_prompt(1) is None and not any(m.attached for m in chat)
    # the migrated chat goes on where it stopped
    store.add_message(1, StoredMessage("user", "and one more"))
    assert [m.content for m in store.messages(1)][-2:] == ["Beam over dark waves", "and one more"]
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()
    reopened = HistoryStore(path)  # a second open does not migrate again
    assert len(reopened.messages(1)) == 5
    assert reopened.search("fibonacci")[0].chat_id == 2  # old messages are searchable
    reopened.close()


def test_new_database_and_migrated_one_have_the_same_schema(tmp_path):
    HistoryStore(tmp_path / "new.sqlite3").close()
    HistoryStore(old_database(tmp_path / "old.sqlite3")).close()

    def schema(path: Path) -> set[tuple]:
        db = sqlite3.connect(path)
        try:
            return {
                (name, " ".join(sql.split()))
                for name, sql in db.execute(
                    "SELECT name, sql FROM sqlite_master WHERE sql NOT NULL"
                )
            }
        finally:
            db.close()

    assert schema(tmp_path / "new.sqlite3") == schema(tmp_path / "old.sqlite3")


def test_a_chats_system_prompt_and_a_questions_files_survive_a_restart(tmp_path):
    from specchat.attachments import Attachment, attached_spans, with_attachments

    path = tmp_path / "history.sqlite3"
    store = HistoryStore(path)
    chat = store.new_chat("Fix it", "You review code.")
    files = [
        Attachment("a.py", "x = 1\n"),
        Attachment("notes.md", "use `x`\n```\nnot a fence end\n"),
    ]
    question = StoredMessage(
        "user", with_attachments("Fix @a.py", files), attached=attached_spans(files)
    )
    store.add_message(chat, question)
    store.set_system_prompt(chat, "You review Python.")
    store.close()
    store = HistoryStore(path)
    (kept,) = store.messages(chat)
    assert kept.question == "Fix @a.py"
    assert [name for name, _ in kept.attachment_blocks()] == ["a.py", "notes.md"]
    assert kept.attachment_blocks()[0][1] == "a.py:\n```python\nx = 1\n```"
    assert kept.attachment_blocks()[1][1].endswith("not a fence end\n````")
    assert store.system_prompt(chat) == "You review Python."
    store.set_system_prompt(chat, "   ")  # blank: none
    assert store.system_prompt(chat) is None
    store.close()


def test_edit_and_regenerate_make_branches_that_survive_a_restart(tmp_path):
    path = tmp_path / "history.sqlite3"
    store = HistoryStore(path)
    chat = store.new_chat("capitals")
    question = store.add_message(chat, StoredMessage("user", "capital of France?"))
    first = store.add_message(chat, StoredMessage("assistant", "Paris."))
    again = store.add_message(chat, StoredMessage("assistant", "It is Paris."), parent_id=question)
    assert store.siblings(first) == [first, again]
    assert [m.content for m in store.messages(chat)] == ["capital of France?", "It is Paris."]
    assert store.messages(chat)[1].branch == (2, 2)
    edited = store.add_message(chat, StoredMessage("user", "capital of Italy?"), parent_id=None)
    store.add_message(chat, StoredMessage("assistant", "Rome."))
    store.close()

    store = HistoryStore(path)
    shown = store.messages(chat)
    assert [(m.content, m.branch) for m in shown] == [
        ("capital of Italy?", (2, 2)),
        ("Rome.", (1, 1)),
    ]
    store.switch_branch(question)  # back to the first question, with its latest answer
    assert [(m.content, m.branch) for m in store.messages(chat)] == [
        ("capital of France?", (1, 2)),
        ("It is Paris.", (2, 2)),
    ]
    store.switch_branch(first)
    assert [m.content for m in store.messages(chat)] == ["capital of France?", "Paris."]
    assert store.message_ids()[chat] == [question, first]
    store.switch_branch(edited)
    assert store.messages(chat)[-1].content == "Rome."
    store.close()


def test_search_finds_words_in_every_chat_and_branch(tmp_path):
    store = HistoryStore(tmp_path / "history.sqlite3")
    a = store.new_chat("cats")
    store.add_message(a, StoredMessage("user", "Tell me about lighthouses and cats"))
    b = store.new_chat("code")
    q = store.add_message(b, StoredMessage("user", "fibonacci please"))
    store.add_message(b, StoredMessage("assistant", "def fibonacci(n): ..."))
    store.add_message(b, StoredMessage("assistant", "A lighthouse keeper's fibonacci"), parent_id=q)
    hits = store.search("lighthouse")
    assert {(h.chat_id, h.role) for h in hits} == {(a, "user"), (b, "assistant")}
    assert "[lighthouses]" in next(h.snippet for h in hits if h.chat_id == a)
    assert len(store.search("fibonacci")) == 3
    assert store.search('fib" OR (') == []  # what the user types is never FTS5 syntax
    store.delete_chat(b)
    assert [h.chat_id for h in store.search("lighthouse")] == [a]
    assert json.loads(json.dumps([h.snippet for h in store.search("cats")]))
    store.close()


def test_an_answers_steps_are_kept_apart_and_read_when_asked(tmp_path):
    """Steps are written with the answer, read back only by `answer_steps` (opening a chat does
    not load them), absent for answers of a migrated file, and deleted with their answer."""
    from specchat.answer_steps import AnswerSteps, DraftStep

    path = old_database(tmp_path / "history.sqlite3")
    store = HistoryStore(path)
    old_answer = store.messages(1)[1]
    assert store.answer_steps(old_answer.id) is None
    steps = AnswerSteps(
        (
            DraftStep("The cat", 3, 4, 2, " sat on", 2, "prompt", 4, 0.0123, 0.0131, "pld"),
            DraftStep("⏎ é", 1, 0, 0, "", 0, "", 0, 0.011, 0.0112, "pld"),
        ),
        (0.011, 0.012, 0.013, 0.014, 0.015),
    )
    question = store.add_message(1, StoredMessage("user", "again?"))
    assert question is not None
    answer = StoredMessage("assistant", "The cat⏎ é", "pld", "eos", steps=steps)
    store.add_message(1, answer)
    assert store.messages(1)[-1].steps is None  # not loaded with the chat
    assert store.answer_steps(answer.id) == steps
    store.delete_message(answer.id)
    assert store.answer_steps(answer.id) is None
    db = sqlite3.connect(path)
    assert db.execute("SELECT COUNT(*) FROM answer_steps").fetchone()[0] == 0
    db.close()
