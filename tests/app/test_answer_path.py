"""One path for an answer: every entry point builds its decoder and engine in `answers.py`, and
`ask` and the chat keep the same answer the same way — from its events."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import specchat
from specchat.app.session import ChatSession
from specchat.backends.base import ChatMessage
from specchat.history import HistoryStore
from specchat.options import RunConfig
from tests.cli import run_cli

ROOT = Path(specchat.__file__).parent
COPYING = "Repeat exactly: the quick brown fox jumps over the lazy dog, and the lazy dog sleeps."


def _callers(function: str) -> set[str]:
    """The modules under specchat/ that call `function` by name."""
    found = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = node.func
                name = called.id if isinstance(called, ast.Name) else getattr(called, "attr", "")
                if name == function:
                    found.add(str(path.relative_to(ROOT)))
    return found


def test_one_function_builds_every_answers_decoder_and_engine():
    assert _callers("build_decoder") == {"answers.py"}
    assert _callers("engine_for") == {"answers.py"}
    # and every entry point goes through it
    for entry in ("app/ask.py", "app/repl.py", "app/session.py", "evaluation/race.py"):
        assert entry in _callers("build_engine") | _callers("make_decoder"), entry
    assert {"app/compare.py", "app/bench_cli.py"} <= _callers("open_model")


def _kept(message) -> tuple:
    """What an answer keeps, but for timings."""
    steps = message.steps.steps
    return (
        message.content,
        message.decoder,
        message.finish_reason,
        [tuple(run) for run in message.runs],
        [(s.text, s.tokens, s.drafted, s.accepted, s.rejected, s.source) for s in steps],
        len(message.steps.pass_costs) > 0,
    )


def test_ask_and_the_chat_keep_the_same_answer(tmp_path: Path) -> None:
    """The same question on the same model and decoder: `ask` and the chat session store the
    same text, runs, steps and rejected drafts (greedy, drafts of a fixed length: the same
    tokens both times)."""
    flags = ("--backend", "llama", "-d", "pld", "-p", "fixed_draft=4", "--max-tokens", "32")
    asked = run_cli("ask", COPYING, *flags, env={"SPECCHAT_DATA_DIR": str(tmp_path / "ask")})
    assert asked.returncode == 0, asked.stderr
    store = HistoryStore(tmp_path / "ask" / "history.sqlite3")
    (chat,) = store.list_chats()
    from_ask = store.messages(chat.id)[1]
    from_ask.steps = store.answer_steps(from_ask.id)
    store.close()

    config = RunConfig(
        backend="llama", decoder="pld", decoders={"pld": {"fixed_draft": 4}}, max_tokens=32
    )
    session = ChatSession(
        config, config, HistoryStore(tmp_path / "chat.sqlite3"), save_settings_file=False
    )
    try:
        session.load(lambda text: None)
        record = session.record()
        for event in session.answer([ChatMessage("user", COPYING)], threading.Event()):
            if hasattr(event, "finish_reason"):
                record.finish(event)
            elif hasattr(event, "tokens"):
                record.add(event)
        from_chat = record.stored()
    finally:
        session.close()
    assert from_chat.steps is not None and from_chat.runs, "the answer copied: runs and steps"
    assert _kept(from_chat) == _kept(from_ask)
