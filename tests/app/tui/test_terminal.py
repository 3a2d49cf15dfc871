"""The real `specchat` in a real terminal (tmux): start, ask, read the answer and the status bar.

Also prints the start-up time to a usable input (the status bar names the loaded model), measured
from the launch of the process; it is reported, never asserted.
"""

from __future__ import annotations

import time

import pytest

from specchat.decoding.registry import default_decoder

from .tmux import ask, needs_tmux, quit_and_close, start_specchat, wait_for, wait_until_usable

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
