"""The real `specchat` in a real terminal (tmux), as the terminal tests drive it: start it in a
new session with private folders and settings, type, wait for what the screen shows."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

TMUX = shutil.which("tmux")
SPECCHAT = Path(sys.executable).with_name("specchat")
needs_tmux = pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux)")
SOCKETS = Path(tempfile.mkdtemp(prefix="specchat-tmux-"))
atexit.register(shutil.rmtree, SOCKETS, ignore_errors=True)


def socket(session: str) -> Path:
    return SOCKETS / session


def tmux(session: str, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """A tmux command on `session`'s own server. A shared server exits when its last session
    closes; a test starting a session just then gets "server exited unexpectedly" — one server
    per session takes that race away."""
    return subprocess.run(
        [TMUX, "-S", str(socket(session)), *args], capture_output=True, text=True, check=check
    )


def capture(session: str) -> str:
    return tmux(session, "capture-pane", "-p", "-t", session).stdout


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


def keys(session: str, *names: str) -> None:
    tmux(session, "send-keys", "-t", session, *names, check=True)


def start_specchat(
    root: Path, settings: str, height: int = 36, name: str = "test", folder: Path | None = None
) -> str:
    """`specchat` in a new 120-column tmux session with its config, data and cache under `root`
    and `settings` as its settings.toml, started in `folder` (default: this process's); the
    session's name. The code under test runs, also when it is not the installed checkout
    (PYTHONPATH is passed on)."""
    config = root / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "settings.toml").write_text(settings)
    session = f"specchat-{name}-{uuid.uuid4().hex[:8]}"
    program = SPECCHAT if SPECCHAT.exists() else "specchat"
    command = (
        f"exec env SPECCHAT_CONFIG_DIR={config} SPECCHAT_DATA_DIR={root / 'data'} "
        f"SPECCHAT_CACHE_DIR={root / 'cache'} TERM=xterm-256color "
        f"PYTHONPATH={os.environ.get('PYTHONPATH', '')} {program}"
    )
    tmux(
        session,
        "new-session",
        "-d",
        "-s",
        session,
        "-x",
        "120",
        "-y",
        str(height),
        *(["-c", str(folder)] if folder is not None else []),
        command,
        check=True,
    )
    return session


def pane_pid(session: str) -> int:
    return int(
        tmux(session, "display-message", "-p", "-t", session, "#{pane_pid}", check=True).stdout
    )


def wait_until_usable(session: str) -> str:
    """The figures line appears once the model is loaded ("loading SmolLM2…" comes before)."""
    return wait_for(session, lambda s: "tok/s" in s and "Ask something" in s)


def ask(session: str, question: str, shows: str = "assistant ·") -> None:
    """Type `question` and send it. A key can get lost while Textual still reads the terminal's
    replies to its start-up queries: Enter is pressed again until the turn (`shows`) appears."""
    keys(session, "-l", question)
    for _ in range(20):
        keys(session, "Enter")
        try:
            wait_for(session, lambda s: shows in s, limit=2.0)
            return
        except AssertionError:
            continue
    raise AssertionError(f"the question was never sent:\n{capture(session)}")


def quit_and_close(session: str) -> None:
    tmux(session, "send-keys", "-t", session, "C-q")
    time.sleep(0.3)
    close(session)


def close(session: str) -> None:
    """Stop the session's own tmux server (and whatever still runs in it) and remove its socket."""
    tmux(session, "kill-server")
    socket(session).unlink(missing_ok=True)
