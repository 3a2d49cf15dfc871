"""`kill -9` of the real chat in a real terminal (tmux), as a user loses it: the chat stores the
question when it is sent and the answer when it ends, so a kill during an answer must keep the
question, and a kill right after one must keep both; the next start opens the store."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.app.test_store_faults import check_store

from .tmux import ask, close, needs_tmux, pane_pid, start_specchat, wait_for, wait_until_usable

pytestmark = needs_tmux
STORE_FILE = "history.sqlite3"
SETTINGS = "threads = 1\nmax_tokens = 400\n"


def start_chat(root: Path) -> tuple[str, int]:
    """specchat in a new tmux session; its session name and process id, once it is usable."""
    session = start_specchat(root, SETTINGS, name="kill")
    wait_until_usable(session)
    return session, pane_pid(session)


def kill(session: str, pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    close(session)


def questions_in(path: Path) -> list[str]:
    from specchat.history import HistoryStore

    store = HistoryStore(path)
    try:
        return [
            m.content for c in store.list_chats() for m in store.messages(c.id) if m.role == "user"
        ]
    finally:
        store.close()


@pytest.mark.slow
def test_kill_9_of_the_chat_during_and_right_after_an_answer(tmp_path: Path):
    store = tmp_path / "data" / STORE_FILE
    answered: list[str] = []
    asked: list[str] = []
    for round_ in range(2):
        # right after an answer: the status bar says it ended once it is stored
        session, pid = start_chat(tmp_path)
        question = f"Say just: yes. ({round_})"
        ask(session, question)
        wait_for(session, lambda s: "ended:" in s)
        kill(session, pid)
        answered.append(question)
        check_store(store, answered)
        # during an answer: the question is stored when it is sent
        session, pid = start_chat(tmp_path)
        question = f"Tell me a very long story about a lighthouse. ({round_})"
        ask(session, question)
        wait_for(session, lambda s: "generating" in s)
        kill(session, pid)
        asked.append(question)
        check_store(store, answered)
        assert set(asked) <= set(questions_in(store))
    # the next start opens the store and works
    session, pid = start_chat(tmp_path)
    kill(session, pid)
