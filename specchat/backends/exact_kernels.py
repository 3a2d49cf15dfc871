"""The int4 runtime's row-exact kernels (exact_kernels.c), compiled once and called through ctypes.

torch's own attention, softmax and matmul make a row's result depend on how many rows share the
call and how many masked slots follow it (measured: SDPA and matmul + softmax differ in the last
bits between a 1-row and a k-row call, fp32 and bf16 alike), so a block would not equal one-token
passes. These few loops fix every reduction's order per row instead; being plain C with no torch
headers they compile in about a second with the C compiler the llama.cpp build already needs, and
the shared object is cached under the cache dir, keyed by source, compiler and CPU.

A ctypes call costs about a microsecond, less than a torch op, so they also keep the per-layer
overhead down.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

from specchat import locations
from specchat.errors import SpecchatError

_SOURCE = Path(__file__).with_name("exact_kernels.c")
_FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-fPIC", "-shared", "-std=c11"]

_p = ctypes.c_void_p
_i64 = ctypes.c_int64
_i32 = ctypes.c_int32
_f32 = ctypes.c_float
_SIGNATURES = {
    "residual_rms_norm": [_p, _p, _i64, _p, _p, ctypes.c_int, _i64, _i64, _f32],
    "silu_mul": [_p, _p, _i64, _p, _i64, _i64],
    "attention": [
        _p, _i64, _p, _i64, _p, _i64,  # q, k, v and their row strides
        _p, _p, _p,  # cos, sin, positions
        _p, _p, _i64,  # k cache, v cache, slots
        _i32, _i32, _p, _i32, _p,  # n_prefix, rows, seen, seen_stride, n_seen
        _p, _i32, _i32, _i32, _f32, _i32,  # out, heads, kv_heads, head_dim, scale, threads
    ],
    "matmul_rows": [
        _p, _p, _p, _p, _i32,  # float32 rows, or int8 codes with scales (and zeros) per group
        _i64, _i64, _p, _i32, _i64, _p, _i32, _i32,  # rows, cols, x, x_is_bf16, m, out, out_is_bf16, threads
    ],
}  # fmt: skip


def _compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise SpecchatError(
        "the int4 runtime builds its attention kernels with a C compiler once; none was found "
        "(install gcc, or use --backend llama)"
    )


def _cpu_key() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return ""


@cache
def kernels() -> ctypes.CDLL:
    """The compiled kernels (built on first use, then loaded from the cache)."""
    import torch  # noqa: F401 - loads the OpenMP runtime the kernels then share with torch

    compiler = _compiler()
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, check=False
    ).stdout
    source = _SOURCE.read_bytes()
    key = hashlib.sha256(
        b"|".join([source, version.encode(), " ".join(_FLAGS).encode(), _cpu_key().encode()])
    ).hexdigest()[:16]
    folder = locations.cache_dir() / "int4-kernels"
    folder.mkdir(parents=True, exist_ok=True)
    library = folder / f"exact_kernels-{key}.so"
    if not library.exists():
        partial = folder / f".exact_kernels-{key}.{os.getpid()}.so"
        built = subprocess.run(
            [compiler, *_FLAGS, "-o", str(partial), str(_SOURCE), "-lm"],
            capture_output=True,
            text=True,
            check=False,
        )
        if built.returncode != 0:
            partial.unlink(missing_ok=True)
            message = (built.stderr.strip().splitlines() or ["no message"])[0]
            raise SpecchatError(
                f"cannot build the int4 runtime's kernels with {compiler}: {message}"
            )
        os.replace(partial, library)
        for stale in folder.glob("exact_kernels-*.so"):  # builds of older sources or compilers
            if stale != library:
                stale.unlink(missing_ok=True)
    lib = ctypes.CDLL(str(library))
    for name, argtypes in _SIGNATURES.items():
        function = getattr(lib, name)
        function.argtypes = argtypes
        function.restype = None
    return lib
