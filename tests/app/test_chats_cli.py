"""`specchat chats` on a real SQLite file, through the real command line (in the test's process):
list, show, search, export, delete, with --json for scripts; an unknown id is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specchat.history import DB_FILE, HistoryStore, StoredMessage
from tests.cli import Ran, run_cli


def specchat(data_dir: Path, *args: str) -> Ran:
    return run_cli("chats", *args, env={"SPECCHAT_DATA_DIR": str(data_dir)})


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Two chats; the first has an edited question (two branches)."""
    store = HistoryStore(tmp_path / DB_FILE)
    capitals = store.new_chat("Capitals")
    france = store.add_message(capitals, StoredMessage("user", "What is the capital of France?"))
    store.add_message(capitals, StoredMessage("assistant", "Paris.", decoder="greedy"))
    store.add_message(capitals, StoredMessage("user", "And of Italy?"), parent_id=None)
    store.add_message(capitals, StoredMessage("assistant", "Rome.", decoder="pld"))
    code = store.new_chat("Fibonacci")
    store.add_message(code, StoredMessage("user", "fibonacci in python"))
    store.add_message(
        code,
        StoredMessage(
            "assistant", "```python\ndef fib(n): ...\n```", "lookahead", "eos", runs=[(0, 9, 3, "")]
        ),
    )
    store.switch_branch(france)
    store.close()
    return tmp_path


def test_without_a_command_it_lists_the_commands(data_dir):
    result = specchat(data_dir)
    assert result.returncode == 0, result.stderr
    for command in ("list", "show", "search", "export", "delete"):
        assert command in result.stdout


def test_list_shows_every_chat_newest_first(data_dir):
    result = specchat(data_dir, "list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "Fibonacci" in lines[0] and "Capitals" in lines[1]
    rows = json.loads(specchat(data_dir, "list", "--json").stdout)
    assert [(r["id"], r["title"], r["messages"]) for r in rows] == [
        (2, "Fibonacci", 2),
        (1, "Capitals", 4),
    ]


def test_show_prints_the_current_branch_with_its_marker(data_dir):
    result = specchat(data_dir, "show", "1")
    assert result.returncode == 0, result.stderr
    assert "What is the capital of France?" in result.stdout and "Paris." in result.stdout
    assert "Italy" not in result.stdout  # the other branch
    assert "‹1/2›" in result.stdout
    chat = json.loads(specchat(data_dir, "show", "1", "--json").stdout)
    assert [m["content"] for m in chat["messages"]] == ["What is the capital of France?", "Paris."]
    assert chat["messages"][0]["branch"] == [1, 2]


def test_search_finds_messages_in_every_chat_and_branch(data_dir):
    result = specchat(data_dir, "search", "capital")
    assert result.returncode == 0, result.stderr
    assert "1#1" in result.stdout and "[capital]" in result.stdout
    hits = json.loads(specchat(data_dir, "search", "ital", "--json").stdout)  # Italy: a prefix
    assert [(h["chat_id"], h["role"]) for h in hits] == [(1, "user")]
    assert "nothing found" in specchat(data_dir, "search", "zebra").stdout


def test_export_markdown_and_json(data_dir):
    markdown = specchat(data_dir, "export", "2").stdout
    assert markdown.startswith("# Fibonacci")
    assert "## Assistant (lookahead)" in markdown and "```python" in markdown
    exported = json.loads(specchat(data_dir, "export", "2", "--format", "json").stdout)
    assert exported["messages"][1]["runs"] == [[0, 9, 3, ""]]


def test_delete_removes_the_chat(data_dir):
    result = specchat(data_dir, "delete", "2")
    assert result.returncode == 0 and "Fibonacci" in result.stdout
    assert [r["id"] for r in json.loads(specchat(data_dir, "list", "--json").stdout)] == [1]
    assert specchat(data_dir, "search", "fibonacci", "--json").stdout.strip() == "[]"


@pytest.mark.parametrize(
    "args,words",
    [
        (("show", "7"), "no chat 7"),
        (("export", "7"), "no chat 7"),
        (("delete", "7"), "no chat 7"),
        (("export", "1", "--format", "pdf"), "--format"),
        (("show", "one"), "chat_id"),
        (("search", "  "), "search"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(data_dir, args, words):
    result = specchat(data_dir, *args)
    assert result.returncode == 2, result.stdout
    assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr
    assert "Traceback" not in result.stderr
