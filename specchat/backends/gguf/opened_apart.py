"""A GGUF is opened by llama.cpp in a child process before this process opens it.

specchat's own reader refuses a crafted header in one line (`header.py`), but llama.cpp reads far
more of a file than any header check can foresee, and where it meets what it cannot handle it
aborts (`GGML_ASSERT`) and takes the whole process with it: the chat and its unsaved state, not
only the model. So a file is first opened — header check and llama.cpp's whole model load —
by `python -m specchat.backends.gguf.opened_apart FILE` (after the header check here, which
refuses most crafted files in a millisecond) — and where llama.cpp may run it, its first pass too
(`compute`: a norm stored as float16 loads, then aborts in the first pass); a child that dies by a signal or exits
any other way than cleanly is the file's one-line refusal here, and this process never opens it.
A file that opened is remembered by path, size and modification time (`opened-files.json` in
the cache dir), so it costs one child process (about half a second) once per file, and nothing
for the bundled model. Where llama-cpp-python is not installed nothing can abort this way, and
nothing is checked.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from specchat import locations
from specchat.errors import SpecchatError
from specchat.json_tables import put_entry, read_table

_VERDICTS = "opened-files.json"
_CHECK = "2"  # what the child does: a verdict of another check is not taken
_TIMEOUT = 300.0  # seconds a child may take to open a file (a large one on a slow disk)
_PREFIX = "specchat: error: "


def _key(path: Path, compute: bool) -> str:
    stat = path.stat()
    kind = "pass" if compute else "load"
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{_CHECK}|{kind}"


def _verdicts() -> dict:
    return read_table(locations.cache_dir() / _VERDICTS)


def _remember(key: str) -> None:
    """Add a file that opened (the other verdicts kept)."""
    with contextlib.suppress(OSError):  # a cache that cannot be written stops nothing
        put_entry(locations.cache_dir() / _VERDICTS, key, True)


def check_opened_apart(
    path: Path, progress: Callable[[str], None] | None = None, *, compute: bool = True
) -> None:
    """Return once llama.cpp has opened `path` in a child process (now or before) and, with
    `compute`, run a first pass of two tokens on it; else raise the one-line SpecchatError that
    says why it was refused."""
    if importlib.util.find_spec("llama_cpp") is None:
        return
    from specchat.backends.gguf.header import GGUFHeader

    GGUFHeader(path).check_llama()  # what the header says wrong: one line here, no child needed
    key = _key(path, compute)
    if key in _verdicts() or (not compute and _key(path, True) in _verdicts()):
        return
    if progress:
        progress(f"opening {path.name} in a separate process first (once per file)")
    command = [sys.executable, "-m", "specchat.backends.gguf.opened_apart", str(path)]
    command += ["--compute"] if compute else []
    try:
        ran = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise SpecchatError(
            f"{path.name}: llama.cpp took over {_TIMEOUT:.0f} s to open it: refused"
        ) from None
    if ran.returncode == 0:
        _remember(key)
        return
    said = [line for line in ran.stderr.splitlines() if line.startswith(_PREFIX)]
    if ran.returncode == 2 and said:
        raise SpecchatError(said[-1].removeprefix(_PREFIX))
    if ran.returncode < 0:
        name = (
            signal.Signals(-ran.returncode).name
            if -ran.returncode in signal.valid_signals()
            else ""
        )
        how = f"signal {-ran.returncode}" + (f", {name}" if name else "")
        raise SpecchatError(
            f"{path.name} crashed llama.cpp while it was opened ({how}): refused, "
            "this process never opened it"
        )
    raise SpecchatError(
        f"{path.name}: llama.cpp could not open it (the check exited {ran.returncode}): refused"
    )


def _open_here(path: Path, compute: bool) -> None:
    """The child's work: the header check, llama.cpp's whole model load and, with `compute`, a
    small context and one pass over two tokens (every layer's operations, once)."""
    from specchat.backends.gguf.header import GGUFHeader
    from specchat.backends.gguf.vocab import import_llama_cpp

    GGUFHeader(path).check_llama()
    if os.environ.get("SPECCHAT_TEST_ABORT_OPENING") == path.name:
        os.abort()  # the tests' stand-in for an abort inside llama.cpp: a real signal, for real
    llama_cpp = import_llama_cpp()  # its log silenced: the child speaks through its exit alone
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise SpecchatError(f"cannot load {path}: not a valid GGUF model")
    if compute:
        _first_pass(llama_cpp, model, path)
    llama_cpp.llama_model_free(model)


def _first_pass(llama_cpp, model, path: Path) -> None:
    """Two tokens through every layer, in a context of 32 (as the backend sets one up)."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = 32, 8, 8, 1
    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    params.n_threads = params.n_threads_batch = 1
    params.no_perf = True
    context = llama_cpp.llama_init_from_model(model, params)
    if not context:
        raise SpecchatError(f"cannot create a llama.cpp context for {path.name}")
    batch = llama_cpp.llama_batch_init(2, 0, 1)
    try:
        for i in range(2):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = i, i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, i == 1
        batch.n_tokens = 2
        if llama_cpp.llama_decode(context, batch) != 0:
            raise SpecchatError(f"{path.name}: llama.cpp could not run a first pass on it")
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(context)


def main(argv: list[str]) -> int:
    try:
        _open_here(Path(argv[0]), compute="--compute" in argv[1:])
    except SpecchatError as exc:
        sys.stderr.write(f"{_PREFIX}{exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
