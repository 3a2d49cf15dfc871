"""One OpenMP runtime per process: torch's own, where torch is installed.

torch ships its libgomp, and the int4 kernels and llama.cpp link the system's. Two runtimes in
one process are two pools of spinning threads on the same cores. Whichever library loads first
decides which runtime the others bind to (the loader matches the name `libgomp.so.1`), so each
native library with OpenMP is loaded after `share_torch_runtime`. It loads torch's runtime
without importing torch, which cost a second of every `ask` and chat start."""

from __future__ import annotations

import ctypes
import functools
import importlib.util
from pathlib import Path


@functools.cache
def share_torch_runtime() -> None:
    """Load torch's OpenMP runtime, once, where torch is installed (else the system's serves)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return
    for folder in (spec.submodule_search_locations or []) if spec else []:
        runtime = Path(folder) / "lib" / "libgomp.so.1"
        if runtime.exists():
            try:
                ctypes.CDLL(str(runtime), mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass  # the system's runtime serves, as where torch is absent
            return
