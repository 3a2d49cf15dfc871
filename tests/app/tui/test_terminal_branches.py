"""The real `specchat` in tmux: ask, edit the question with Up, see the branch marker, switch
back to the first version with Shift+Tab, Up and Left."""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest

from .test_terminal import SPECCHAT, TMUX, wait_for

pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux)")


def keys(session: str, *names: str) -> None:
    subprocess.run([TMUX, "send-keys", "-t", session, *names], check=True)


def answered(screen: str, after: str = "you") -> bool:
    """The answer after the last line holding `after` has ended: its header has no "…"."""
    lines = screen.splitlines()
    marks = [i for i, line in enumerate(lines) if after in line]
    if not marks or "ended:" not in screen:
        return False
    return any("assistant · greedy" in line and "…" not in line for line in lines[marks[-1] + 1 :])


def test_edit_a_question_see_the_branch_and_switch_back(private_dirs):
    config = private_dirs / "config"
    config.mkdir(exist_ok=True)
    (config / "settings.toml").write_text("threads = 1\nmax_tokens = 12\n")
    session = f"specchat-branch-{uuid.uuid4().hex[:8]}"
    command = (
        f"env SPECCHAT_CONFIG_DIR={config} SPECCHAT_DATA_DIR={private_dirs / 'data'} "
        f"TERM=xterm-256color {SPECCHAT if SPECCHAT.exists() else 'specchat'}"
    )
    subprocess.run(
        [TMUX, "new-session", "-d", "-s", session, "-x", "120", "-y", "40", command], check=True
    )
    try:
        wait_for(session, lambda s: "tok/s" in s and "Ask something" in s)
        keys(session, "-l", "Name a colour.")
        for _ in range(20):  # a key may be lost while Textual reads the terminal's replies
            keys(session, "Enter")
            try:
                wait_for(session, lambda s: "assistant · greedy" in s, limit=2.0)
                break
            except AssertionError:
                continue
        wait_for(session, answered)

        keys(session, "Up")  # the prompt is empty: edit the last question
        wait_for(session, lambda s: "editing a question" in s)
        keys(session, "End")
        keys(session, "-l", " And a fruit?")
        keys(session, "Enter")
        screen = wait_for(session, lambda s: answered(s, after="you ‹2/2›"))
        assert "Name a colour. And a fruit?" in screen

        keys(session, "BTab")  # Shift+Tab: the answer takes the focus
        keys(session, "Up")  # the question
        # its first version; the header of an answer ends a moment before the chat is free
        # again, and a switch asked in between is refused: press again until it shows
        for _ in range(20):
            keys(session, "Left")
            try:
                screen = wait_for(session, lambda s: "‹1/2›" in s, limit=2.0)
                break
            except AssertionError:
                continue
        screen = wait_for(session, lambda s: "‹1/2›" in s)
        assert "Name a colour." in screen and "And a fruit?" not in screen
    finally:
        keys(session, "C-q")
        time.sleep(0.3)
        subprocess.run([TMUX, "kill-session", "-t", session], capture_output=True)
