"""A chat database that cannot be used says so in one line: `specchat chats` exits with 2 and
prints one line on stderr, no traceback. Real files, a real second process holding the lock."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.history import DB_FILE, SCHEMA_VERSION, HistoryStore, StoredMessage
from tests.cli import Ran, run_cli


def specchat(data_dir: Path, *args: str) -> Ran:
    return run_cli(*args, env={"SPECCHAT_DATA_DIR": str(data_dir)})


def assert_one_line(result: Ran, *words: str) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0]
    return lines[0]


def test_corrupt_database_one_line(tmp_path):
    (tmp_path / DB_FILE).write_bytes(b"this is not SQLite, just bytes\x00\x01" * 200)
    assert_one_line(specchat(tmp_path, "chats", "list"), "unreadable", DB_FILE)


def test_newer_schema_one_line(tmp_path):
    HistoryStore(tmp_path / DB_FILE).close()
    db = sqlite3.connect(tmp_path / DB_FILE)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    assert_one_line(specchat(tmp_path, "chats", "list"), "newer specchat")


HOLD_LOCK = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
db.execute("UPDATE chats SET title = 'held' WHERE id = 1")
print("holding", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
"""


@pytest.mark.slow
def test_locked_database_one_line(tmp_path):
    store = HistoryStore(tmp_path / DB_FILE)
    chat = store.new_chat("busy")
    store.add_message(chat, StoredMessage("user", "hello"))
    store.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path / DB_FILE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        # reading works while another process writes (WAL); writing waits, then says why
        assert specchat(tmp_path, "chats", "list").returncode == 0
        line = assert_one_line(specchat(tmp_path, "chats", "delete", str(chat)), "locked")
        assert "another process" in line
    finally:
        holder.communicate("\n", timeout=60)
    assert specchat(tmp_path, "chats", "delete", str(chat)).returncode == 0
