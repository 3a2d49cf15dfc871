"""The real `specchat` in a real terminal (tmux): start, ask, read the answer and the status bar.

Also prints the start-up time to a usable input (the status bar names the loaded model), measured
from the launch of the process; it is reported, never asserted.
"""

from __future__ import annotations

import time

import pytest

from specchat.decoding.registry import default_decoder

from .tmux import (
    ask,
    keys,
    needs_tmux,
    quit_and_close,
    start_specchat,
    wait_for,
    wait_until_usable,
)

pytestmark = needs_tmux


@pytest.mark.slow
def test_specchat_in_tmux(private_dirs):
    start = time.monotonic()
    # one llama.cpp thread: the suite shares two cores with other processes
    session = start_specchat(private_dirs, "threads = 1\nmax_tokens = 48\n")
    try:
        wait_until_usable(session)
        print(f"\nstart-up to a usable input: {time.monotonic() - start:.2f} s")
        ask(session, "What is the capital of France?", shows=f"assistant · {default_decoder()}")
        screen = wait_for(session, lambda s: "ended:" in s)
        assert "What is the capital of France?" in screen
        assert f"assistant · {default_decoder()}" in screen
        assert "tok/s" in screen and "tok/step" in screen
        lines = screen.splitlines()
        header = next(
            i for i, line in enumerate(lines) if f"assistant · {default_decoder()}" in line
        )
        assert lines[header + 1].strip(" █"), "the answer's first line is on screen"
        assert "ended: " in screen
    finally:
        quit_and_close(session)


@pytest.mark.slow
def test_a_poems_lines_are_drawn_as_lines(private_dirs):
    """The bundled model's poem puts each line on its own ("…where shadows play,\nA place of
    endless wonder,\nA place of…"): the chat draws them so, as chat apps do, where Markdown's
    soft break, drawn as a space, ran them into one paragraph."""
    session = start_specchat(private_dirs, "threads = 1\nmax_tokens = 64\n", name="poem")
    try:
        wait_until_usable(session)
        ask(session, "Write a short poem about the ocean", shows="assistant ·")
        screen = wait_for(session, lambda s: "ended:" in s)
        starts = [line.strip(" █▊") for line in screen.splitlines()]
        assert sum(line.startswith("A place of endless") for line in starts) >= 3, screen
    finally:
        quit_and_close(session)


@pytest.mark.slow
def test_ctrl_j_in_a_burst_of_keys_breaks_the_line_where_it_was_typed(private_dirs):
    """A paste or a laggy link delivers keys in one read: each Ctrl+J lands between the words
    typed around it, not after all of them."""
    session = start_specchat(private_dirs, "threads = 1\nmax_tokens = 8\n", name="burst")
    try:
        wait_until_usable(session)
        time.sleep(3)  # settled: the start-up notifications gone, the prompt idle
        for _ in range(3):
            keys(session, "first", "C-j", "second", "C-j", "third", "C-j")
            time.sleep(0.3)
        keys(session, "ant", "C-j", "bee", "C-j", "cat")
        screen = wait_for(session, lambda s: "cat" in s)
        # the prompt's lines, each its first word (a notification may sit beside them)
        lines = [line[1:].split()[0] for line in screen.splitlines() if line[:2] == "▊ "]
        assert lines[-3:] == ["ant", "bee", "cat"], screen
        assert "firstsecond" not in screen and "antbee" not in screen
    finally:
        quit_and_close(session)


@pytest.mark.slow
def test_a_file_attached_with_at_and_tab_in_a_real_terminal(private_dirs):
    """In the folder specchat was started in: `@no` and Tab complete the file's name, Enter
    sends the question with the file's text, and the transcript shows the file folded."""
    folder = private_dirs / "project"
    folder.mkdir()
    (folder / "notes.txt").write_text("remember the milk\nand the bread\n")
    session = start_specchat(
        private_dirs, "threads = 1\nmax_tokens = 8\n", name="attach", folder=folder
    )
    try:
        wait_until_usable(session)
        time.sleep(3)  # settled: the start-up notifications gone, the prompt idle
        keys(session, "Summarise @no")
        wait_for(session, lambda s: "Summarise @no" in s)
        keys(session, "Tab")
        wait_for(session, lambda s: "Summarise @notes.txt" in s)
        keys(session, "Enter")
        screen = wait_for(session, lambda s: "ended:" in s and "notes.txt · 2 lines" in s)
        assert "▸ notes.txt · 2 lines" in screen and "remember the milk" not in screen
    finally:
        quit_and_close(session)
