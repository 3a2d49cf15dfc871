"""The real `specchat` in a real terminal (tmux): start, ask, read the answer and the status bar.

Also prints the start-up time to a usable input (the status bar names the loaded model), measured
from the launch of the process; it is reported, never asserted.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

TMUX = shutil.which("tmux")
SPECCHAT = Path(sys.executable).with_name("specchat")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux)")


def capture(session: str) -> str:
    return subprocess.run(
        [TMUX, "capture-pane", "-p", "-t", session], capture_output=True, text=True
    ).stdout


def wait_for(session: str, condition, limit: float = 120.0) -> str:
    """Poll the pane until `condition(screen)`; `limit` only guards against a hang."""
    deadline = time.monotonic() + limit
    while True:
        screen = capture(session)
        if condition(screen):
            return screen
        if time.monotonic() > deadline:
            raise AssertionError(f"the terminal never showed what we waited for:\n{screen}")
        time.sleep(0.05)


def test_specchat_in_tmux(private_dirs):
    config = private_dirs / "config"
    config.mkdir(exist_ok=True)
    # one llama.cpp thread: the suite shares two cores with other processes
    (config / "settings.toml").write_text("threads = 1\nmax_tokens = 48\n")
    session = f"specchat-test-{uuid.uuid4().hex[:8]}"
    command = (
        f"env SPECCHAT_CONFIG_DIR={config} SPECCHAT_DATA_DIR={private_dirs / 'data'} "
        f"TERM=xterm-256color {SPECCHAT if SPECCHAT.exists() else 'specchat'}"
    )
    start = time.monotonic()
    subprocess.run(
        [TMUX, "new-session", "-d", "-s", session, "-x", "120", "-y", "36", command], check=True
    )
    try:
        # the figures line appears once the model is loaded ("loading SmolLM2…" comes before)
        wait_for(session, lambda s: "tok/s" in s and "Ask something" in s)
        print(f"\nstart-up to a usable input: {time.monotonic() - start:.2f} s")
        subprocess.run([TMUX, "send-keys", "-t", session, "-l", "What is the capital of France?"])
        # Should a key get lost while Textual still reads the terminal's
        # replies to its start-up queries, press Enter again until the turn shows.
        for _ in range(20):
            subprocess.run([TMUX, "send-keys", "-t", session, "Enter"])
            try:
                wait_for(session, lambda s: "assistant · greedy" in s, limit=2.0)
                break
            except AssertionError:
                continue
        screen = wait_for(session, lambda s: "ended:" in s)
        assert "What is the capital of France?" in screen
        assert "assistant · greedy" in screen
        assert "tok/s" in screen and "tok/step" in screen
        lines = screen.splitlines()
        header = next(i for i, line in enumerate(lines) if "assistant · greedy" in line)
        assert lines[header + 1].strip(" █"), "the answer's first line is on screen"
        assert "ended: " in screen
    finally:
        subprocess.run([TMUX, "send-keys", "-t", session, "C-q"])
        time.sleep(0.3)
        subprocess.run([TMUX, "kill-session", "-t", session], capture_output=True)
