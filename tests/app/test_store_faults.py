"""The chat store under faults, with real `specchat` processes and a real SQLite file.

`specchat ask` records each exchange in the store (and, with the suffix decoder, reads every saved
chat through its index under the cache dir, building and saving it on a worker thread while the
answer runs). These tests kill it with SIGKILL during an answer and right after one, and run two
at once on the same store; afterwards the store opens with every committed message intact and
the next `specchat` works.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.history import HistoryStore

STORE_FILE = "history.sqlite3"


def environment(root: Path) -> dict[str, str]:
    """Private config, data and cache dirs; one llama.cpp thread (the suite shares two cores)."""
    config = root / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "settings.toml").write_text("threads = 1\n")
    return {
        **os.environ,
        "PYTHONWARNINGS": "ignore",
        "SPECCHAT_CONFIG_DIR": str(config),
        "SPECCHAT_DATA_DIR": str(root / "data"),
        "SPECCHAT_CACHE_DIR": str(root / "cache"),
    }


def ask_command(prompt: str, max_tokens: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "specchat",
        "ask",
        prompt,
        "--decoder",
        "suffix",
        "--threads",
        "1",
        "--max-tokens",
        str(max_tokens),
        "--json",
    ]


def ask(env: dict[str, str], prompt: str, max_tokens: int = 8) -> None:
    result = subprocess.run(
        ask_command(prompt, max_tokens),
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["type"] == "done"


def kill_when(env: dict[str, str], prompt: str, max_tokens: int, event_type: str) -> None:
    """Start an answer and SIGKILL it as soon as it printed an event of `event_type` ("step":
    during the answer; "done": right after it, while the exchange is being recorded)."""
    process = subprocess.Popen(
        ask_command(prompt, max_tokens),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        for line in process.stdout:
            if json.loads(line)["type"] == event_type:
                break
        else:
            raise AssertionError(f"the answer ended before a {event_type} event")
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=60)
        process.stdout.close()
    assert process.returncode == -signal.SIGKILL


def check_store(path: Path, committed: list[str]) -> None:
    """The file passes SQLite's integrity check, opens as a store, and holds each committed
    exchange whole: the question as asked, and a non-empty answer right after it."""
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    store = HistoryStore(path)
    try:
        answers = {}
        for chat in store.list_chats():
            messages = store.messages(chat.id)
            for question, reply in zip(messages, messages[1:]):
                if question.role == "user" and reply.role == "assistant":
                    answers[question.content] = reply
        for prompt in committed:
            assert prompt in answers, prompt
            assert answers[prompt].content and answers[prompt].stats is not None
    finally:
        store.close()


@pytest.mark.slow
def test_kill_9_during_and_right_after_an_answer_keeps_every_committed_message(tmp_path):
    env = environment(tmp_path)
    path = tmp_path / "data" / STORE_FILE
    committed: list[str] = []
    for round_ in range(3):
        prompt = f"Name a colour. (round {round_})"
        ask(env, prompt)
        committed.append(prompt)
        kill_when(env, f"Tell me a very long story, part {round_}.", 400, "step")
        check_store(path, committed)
        kill_when(env, f"Say hi. (round {round_})", 4, "done")
        check_store(path, committed)
    # the next specchat opens the store (and the saved chats' index) and records as before
    ask(env, "One more question.")
    check_store(path, [*committed, "One more question."])


@pytest.mark.slow
def test_two_specchat_processes_on_one_store_both_work_and_nothing_is_lost(tmp_path):
    env = environment(tmp_path)
    committed: list[str] = []
    for round_ in range(3):
        prompts = [f"Name a fruit. (process A, round {round_})", f"Name a city. (B, {round_})"]
        processes = [
            subprocess.Popen(
                ask_command(prompt, 12),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for prompt in prompts
        ]
        for process in processes:
            out, err = process.communicate(timeout=300)
            assert process.returncode == 0, err
            assert json.loads(out.splitlines()[-1])["type"] == "done"
        committed += prompts
    check_store(tmp_path / "data" / STORE_FILE, committed)
