"""`specchat ARGS` run in the test's own process: the command line a user types, its stdout,
stderr and exit code — without starting Python and loading the libraries again. Tests of what
only a process shows (a signal, kill -9, two processes, stdin's bytes in a locale) run real
processes instead (`run_process`)."""

from __future__ import annotations

import contextlib
import gc
import io
import os
import subprocess
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, env: Mapping[str, str] | None = None, stdin: str = "") -> Ran:
    """`specchat ARGS` in this process, with `env` added to the environment for the run."""
    from specchat.app.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = (dict(os.environ), sys.argv, sys.stdin)
    os.environ.update(env or {})
    sys.argv, sys.stdin = ["specchat", *args], io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:  # what a process would print before dying
                traceback.print_exc()
                code = 1
    finally:
        os.environ.clear()
        os.environ.update(saved[0])
        sys.argv, sys.stdin = saved[1], saved[2]
        gc.unfreeze()  # main leaves the collector frozen for the process's exit; this one goes on
    return Ran(code, out.getvalue(), err.getvalue())


def run_process(
    *args: str | bytes,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    """`python -m specchat ARGS` as its own process (bytes out, for tests of encodings)."""
    # no stdin given: /dev/null, as a user's shell gives a command nothing is piped to
    given = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    return subprocess.run(
        [sys.executable, "-m", "specchat", *args],
        **given,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})},
    )
