"""A user's own text in `ask`: files (-f) and piped stdin join the prompt under their names and
are stored with the question; what is not text is one line and nothing is sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specchat.attachments import (
    Attachment,
    attach_mentions,
    complete_path,
    language_of,
    mention_of,
    mentions,
    with_attachments,
)
from specchat.errors import SpecchatError
from tests.cli import run_cli, run_process


def stored_chats(data_dir: Path) -> list[dict]:
    listed = run_cli("chats", "list", "--json", env={"SPECCHAT_DATA_DIR": str(data_dir)})
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


def first_question(data_dir: Path) -> tuple[str, str]:
    """The stored chat's title and its question's text."""
    shown = run_cli("chats", "show", "1", "--json", env={"SPECCHAT_DATA_DIR": str(data_dir)})
    chat = json.loads(shown.stdout)
    return chat["title"], chat["messages"][0]["content"]


def test_a_fence_is_tagged_with_the_language_the_files_extension_says():
    assert language_of("src/app.py") == "python" and language_of("lib.rs") == "rust"
    assert language_of("Makefile") == "" and language_of("stdin") == ""
    assert language_of("v1.2/notes") == "" and language_of("data.json") == "json"


def test_a_fence_is_longer_than_any_run_of_backticks_in_the_text():
    text = "a code block:\n```python\nx = 1\n```\nand ````four````"
    block = Attachment("notes.md", text).block()
    assert block.startswith("notes.md:\n`````markdown\n") and block.endswith("\n`````")
    prompt = with_attachments("Summarise.", [Attachment("a.txt", "one"), Attachment("b", "two")])
    assert prompt == "a.txt:\n```txt\none\n```\n\nb:\n```\ntwo\n```\n\nSummarise."


@pytest.mark.slow
def test_piped_text_reaches_the_prompt_and_the_store(tmp_path: Path):
    """`echo CODE | specchat ask "Rename …"` in a real pipe: the question stored holds the code
    under "stdin", the chat is titled by the question."""
    code = "def add(a, b): return a + b"
    ran = run_process(
        "ask", "Rename add to plus in this code.", "-d", "greedy", "--max-tokens", "4",
        stdin=(code + "\n").encode(), env={"SPECCHAT_DATA_DIR": str(tmp_path)},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr.decode()
    title, question = first_question(tmp_path)
    assert title == "Rename add to plus in this code."
    assert question == f"stdin:\n```\n{code}\n```\n\nRename add to plus in this code."


@pytest.mark.slow
def test_piped_text_alone_is_the_question(tmp_path: Path):
    """`echo "QUESTION" | specchat ask`, as `llm` takes it: the piped line is the question (the
    newline echo adds left off), answered as the same question given as an argument is."""
    env = {"SPECCHAT_DATA_DIR": str(tmp_path)}
    args = ("-d", "greedy", "--max-tokens", "6", "--no-log")
    piped = run_process("ask", *args, stdin=b"Name three colours.\n", env=env)
    given = run_process("ask", "Name three colours.", *args, env=env)
    assert piped.returncode == given.returncode == 0, piped.stderr.decode()
    assert piped.stdout == given.stdout and piped.stdout.strip()


def test_files_alone_are_the_question(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`ask -f FILE` with no question: one file's text is the question; several are sent under
    their names, the chat titled by them. Nothing at all: one line, as before."""
    monkeypatch.chdir(tmp_path)
    question, code = Path("q.txt"), Path("add.py")
    question.write_text("Name a colour.\n")
    code.write_text("def add(a, b):\n    return a + b\n")
    data = tmp_path / "data"
    env = {"SPECCHAT_DATA_DIR": str(data)}
    ran = run_cli("ask", "-f", "q.txt", "-d", "greedy", "--max-tokens", "2", env=env)
    assert ran.returncode == 0, ran.stderr
    assert first_question(data) == ("Name a colour.", "Name a colour.")
    ran = run_cli("ask", "-f", "q.txt", "-f", "add.py", "--max-tokens", "2", env=env)
    assert ran.returncode == 0, ran.stderr
    shown = run_cli("chats", "show", "2", "--json", env=env)
    chat = json.loads(shown.stdout)
    assert chat["title"] == "q.txt, add.py"
    assert chat["messages"][0]["content"] == (
        "q.txt:\n```txt\nName a colour.\n```\n\n"
        "add.py:\n```python\ndef add(a, b):\n    return a + b\n```"
    )
    ran = run_cli("ask", env=env)
    assert ran.returncode == 2 and "the prompt is empty" in ran.stderr


@pytest.mark.slow
def test_files_join_the_prompt_under_their_names(tmp_path: Path):
    first, second = tmp_path / "add.py", tmp_path / "notes.txt"
    first.write_text("def add(a, b):\n    return a + b\n")
    second.write_text("keep the signature")
    data = tmp_path / "data"
    ran = run_cli(
        "ask", "Rename add to plus.", "-f", str(first), "--file", str(second), "-d", "greedy",
        "--max-tokens", "2", env={"SPECCHAT_DATA_DIR": str(data)},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    _, question = first_question(data)
    assert question == (
        f"{first}:\n```python\ndef add(a, b):\n    return a + b\n```\n\n"
        f"{second}:\n```txt\nkeep the signature\n```\n\nRename add to plus."
    )
    shown = run_cli("chats", "show", "1", env={"SPECCHAT_DATA_DIR": str(data)})
    assert f"── you · attached {first}, {second}  #1" in shown.stdout


@pytest.mark.slow
def test_ask_follows_the_settings_system_prompt_and_keeps_it_with_the_chat(tmp_path: Path):
    config, data = tmp_path / "config", tmp_path / "data"
    config.mkdir()
    (config / "settings.toml").write_text('system_prompt = "Answer in French."\n')
    env = {"SPECCHAT_DATA_DIR": str(data), "SPECCHAT_CONFIG_DIR": str(config)}
    for extra in ([], ["--system", "Answer in German."]):
        ran = run_cli("ask", "Hello", "-d", "greedy", "--max-tokens", "2", *extra, env=env)
        assert ran.returncode == 0, ran.stderr
    first = run_cli("chats", "show", "1", env=env).stdout
    assert "── system prompt\nAnswer in French.\n" in first
    second = json.loads(run_cli("chats", "show", "2", "--json", env=env).stdout)
    assert second["system_prompt"] == "Answer in German."


def test_at_mentions_name_files_and_paths_but_not_people(tmp_path: Path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("x = 1\n")
    (tmp_path / "README").write_text("read me\n")
    text = "Compare @src/app.py, @README and @nope.txt. Ask @alice; mail bob@example.com"
    assert mentions(text, tmp_path) == ["src/app.py", "README", "nope.txt"]
    with pytest.raises(SpecchatError, match="@nope.txt: no such file: nothing was sent"):
        attach_mentions(text, tmp_path)
    attached = attach_mentions("Fix @src/app.py and again @src/app.py.", tmp_path)
    assert attached == [Attachment("src/app.py", "x = 1\n")]  # each file once
    (tmp_path / "my notes.txt").write_text("milk\n")
    assert mention_of("my notes.txt") == '@"my notes.txt"' and mention_of("a.py") == "@a.py"
    quoted = attach_mentions('Read @"my notes.txt" and @README', tmp_path)
    assert [a.name for a in quoted] == ["my notes.txt", "README"]


def test_tab_completes_to_what_every_match_shares(tmp_path: Path):
    (tmp_path / "src").mkdir()
    for name in ("maths.py", "main.py", ".hidden.py"):
        (tmp_path / "src" / name).write_text("")
    assert complete_path("s", tmp_path) == ("src/", ["src/"])
    assert complete_path("src/m", tmp_path) == ("src/ma", ["main.py", "maths.py"])
    assert complete_path("src/mat", tmp_path) == ("src/maths.py", ["maths.py"])
    assert complete_path("src/.h", tmp_path) == ("src/.hidden.py", [".hidden.py"])
    assert complete_path("src/x", tmp_path) == ("src/x", [])
    assert complete_path(f"{tmp_path}/sr", Path("/")) == (f"{tmp_path}/src/", ["src/"])


@pytest.mark.parametrize(
    "content,message",
    [
        (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "is a binary file, not text: nothing was sent"),
        ("caf\u00e9".encode("latin-1"), "is not UTF-8 text (byte 3 is not valid)"),
        (None, "cannot read"),
    ],
)
def test_a_file_that_is_not_text_is_one_line_and_nothing_is_sent(tmp_path, content, message):
    path = tmp_path / "file.bin"
    if content is not None:
        path.write_bytes(content)
    data = tmp_path / "data"
    ran = run_cli("ask", "What is this?", "-f", str(path), env={"SPECCHAT_DATA_DIR": str(data)})
    assert ran.returncode == 2
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], ran.stderr
    assert not (data / "history.sqlite3").exists() or stored_chats(data) == []


def test_dash_f_dash_with_nothing_on_stdin_says_so():
    ran = run_cli("ask", "Summarise.", "-f", "-")
    assert ran.returncode == 2 and "-f -: nothing came on stdin" in ran.stderr
