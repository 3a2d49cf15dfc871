"""llama.cpp's own `llama-server`, started and stopped on 127.0.0.1: for the bench peer that runs
llama.cpp's speculation, and for the tests that check specchat's remote backend against it.

The binary comes from `scripts/llama-server`, which builds it once from the llama.cpp source that
llama-cpp-python vendors, with the wheel's flags, into the user's cache; a setting
(`llama_server` in settings.toml) or $SPECCHAT_LLAMA_SERVER names another.
It runs with flash attention off and one slot, like specchat's own llama.cpp backend, so its
greedy answers are specchat's greedy answers.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import os
import platform
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from specchat.errors import SpecchatError

_READY_SECONDS = 300.0  # loading the model; generous for a loaded machine, never a result
DEFAULT_FLAGS = "-DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF"  # as scripts/setup builds the wheel


def build_dir() -> Path:
    """Where scripts/llama-server keeps its builds: the user's cache, one folder per llama.cpp
    version, flags and machine (not SPECCHAT_CACHE_DIR, which tests point elsewhere)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("specchat")) / "llama-server"


def build_key() -> str:
    """The build folder scripts/llama-server names for the installed llama-cpp-python and the
    flags it was built with (the same key the script computes)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        llama = version("llama-cpp-python")
    except PackageNotFoundError:
        llama = "?"
    flags = os.environ.get("SPECCHAT_LLAMA_CMAKE_ARGS") or DEFAULT_FLAGS
    text = f"{llama}|{flags}|{platform.machine()}|server"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def find_llama_server(setting: str | None = None) -> Path:
    """The llama-server binary: `setting` (the run's llama_server: settings.toml or
    $SPECCHAT_LLAMA_SERVER), or the build scripts/llama-server made for this llama-cpp-python
    (else its newest build); a one-line SpecchatError saying how to get one when there is none."""
    if setting:
        if not Path(setting).is_file():
            raise SpecchatError(f"llama_server = {setting} is not a file")
        return Path(setting)
    matching = build_dir() / build_key() / "llama-server"
    if matching.is_file():
        return matching
    built = sorted(build_dir().glob("*/llama-server"), key=lambda p: p.stat().st_mtime)
    if built:
        return built[-1]
    raise SpecchatError(
        "llama-server is not built: run scripts/llama-server --build-only in a specchat "
        "checkout, or name a binary with llama_server in settings.toml"
    )


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_command(
    binary: Path | str,
    model: Path | str,
    port: int,
    *,
    spec_type: str | None = None,
    threads: int | None = None,
    n_ctx: int = 4096,
    extra: Sequence[str] = (),
) -> list[str]:
    """The command line: on 127.0.0.1, one slot, flash attention off (batch-invariant logits),
    the model served as "smollm2", `spec_type` as llama-server's --spec-type."""
    command = [
        str(binary),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        str(model),
        "--alias",
        "smollm2",
        "--ctx-size",
        str(n_ctx),
        "--parallel",
        "1",
        "--flash-attn",
        "off",
        "--no-webui",
    ]
    if threads:
        command += ["--threads", str(threads), "--threads-batch", str(threads)]
    if spec_type and spec_type != "none":
        command += ["--spec-type", spec_type]
    return command + list(extra)


@contextlib.contextmanager
def stopped_when_terminated() -> Iterator[None]:
    """Within it, SIGTERM (a `kill`, a timeout) ends this process as an exception does, so the
    servers it started are stopped on the way out; by default SIGTERM would end it at once and
    leave them running. Only the main thread can take signals: elsewhere it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class LlamaServerProcess:
    """A llama-server subprocess: `start` waits until it answers /health, `stop` ends it (and
    nothing else: it is this process's own child). Its log goes to a temporary file, whose last
    line is the error when it fails to start."""

    def __init__(self, command: Sequence[str], port: int, env: dict[str, str] | None = None):
        self.command = list(command)
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._env = env
        self._process: subprocess.Popen | None = None
        self._log = None

    def start(self) -> LlamaServerProcess:
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen(
            self.command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self._env,
            preexec_fn=_ended_with_parent(),
        )
        atexit.register(self.stop)  # never left running after specchat exits
        deadline = time.monotonic() + _READY_SECONDS
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                message = self._last_log_line()
                self.stop()
                raise SpecchatError(f"llama-server exited at start: {message}")
            if _healthy(self.port):
                return self
            time.sleep(0.2)
        self.stop()
        raise SpecchatError(f"llama-server did not become ready in {_READY_SECONDS:.0f} s")

    def _last_log_line(self) -> str:
        self._log.seek(0)
        lines = self._log.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else "no message"

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LlamaServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _ended_with_parent() -> Callable[[], None] | None:
    """What the server's child process runs before llama-server starts, so that it is sent
    SIGTERM when specchat dies: SIGKILL (or a crash) skips `atexit` and every handler, and left
    servers running on the cores. Linux's PR_SET_PDEATHSIG fires when the *thread* that started
    the child ends, so only the main thread asks for it; elsewhere (and off Linux) None."""
    if platform.system() != "Linux" or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the child
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def ask() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))

    return ask


def _healthy(port: int) -> bool:
    """Whether the server on `port` has loaded its model (GET /health answers 200)."""
    from urllib.error import URLError
    from urllib.request import urlopen

    try:
        with urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return response.status == 200
    except (URLError, OSError):
        return False
