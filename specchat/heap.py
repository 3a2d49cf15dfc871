"""Memory a process freed, given back to the system.

Why: glibc keeps freed heap memory for the process to reuse, and after many mid-sized arrays
are freed (laying out a model's weights, a runtime closed) it may keep most of it. After the
int4 runtime laid out a 1.7B Q4_K_M file and was closed to time llama.cpp, 935 MiB of freed
memory stayed with the process for the rest of its life; `malloc_trim` gave back all but 30.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _trim():
    """glibc's `malloc_trim`, or None where the C library has none (macOS, musl)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def give_back_freed() -> None:
    """Return the heap's free pages to the system, where the C library can."""
    trim = _trim()
    if trim is not None:
        trim(0)
