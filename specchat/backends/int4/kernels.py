"""The int4 runtime's row-exact kernels (the C in `c/`), compiled once and called through ctypes.

torch's own attention, softmax and matmul make a row's result depend on how many rows share the
call and how many masked slots follow it (measured: SDPA and matmul + softmax differ in the last
bits between a 1-row and a k-row call, fp32 and bf16 alike), so a block would not equal one-token
passes. These few loops fix every reduction's order per row instead; being plain C with no torch
headers they compile in about a second with the C compiler the llama.cpp build already needs, and
the shared object is cached under the cache dir, keyed by source, compiler and instruction-set
level (`specchat.cpu`): each level is its own build, so a machine can run the lower ones too.

The whole forward is one call (`forward`); `matmul_rows` and `top_k_rows` are also called alone
(a weight's rows for checks, the recycled candidates), and `draft_head_guesses` after a pass.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from specchat import cpu, first_time, locations, openmp
from specchat.errors import SpecchatError

_SOURCES = Path(__file__).with_name("c")  # one file per job; base.h says how they are shaped
_FLAGS = ["-O3", "-fno-math-errno", "-fPIC", "-shared", "-std=c11"]
# -std=c11 (not gnu11) also means -ffp-contract=off: no multiply and add is fused behind the
# source's back, so a level's vector code and its plain C compute the same bits
_OPENMP = "-fopenmp"
# what each level is built for on x86-64; avx512 is only ever the CPU's own (a level never
# exceeds it), so it is built for the CPU itself, as it always was
_X86_MARCH = {
    "generic": ["-march=x86-64"],
    "avx2": ["-march=x86-64-v3"],
    "avxvnni": ["-march=x86-64-v3", "-mavxvnni"],
    "avx512": ["-march=native"],
}

_p = ctypes.c_void_p
_i64 = ctypes.c_int64
_i32 = ctypes.c_int32
_f32 = ctypes.c_float
_SIGNATURES = {
    "matmul_rows": [
        _p, _p, _p, _p, _i32, _i32, _i32, _i32,  # float32 rows, or codes, scales (and zeros): group, bits, half scales, int8 x
        _i64, _i64, _p, _i32, _i64, _p, _i32, _i32,  # rows, cols, x, x_is_bf16, m, out, out_is_bf16, threads
    ],
    "top_k_rows": [_p, _i64, _i64, _i32, _p],  # logits, rows, vocab, k, out (int32 [rows, k])
    "tile_blocks": [_p],  # out (int32): blocks of eight rows a tile takes (codes laid for it)
    "halves_of": [_p, _i64, _p],  # float32 values, n, out (float16 bits): the key cache's rounding
    "draft_head_guesses": [
        _p, _p, _p, _f32, _p,  # head, residual, norm, eps, embedding
        _i32, _i32, _p, _p,  # m, threads, out, sure
    ],
    "forward": [
        _p, _p, _i32, _p, _i32, _i32,  # model, x, rows, positions, n_prefix, first_row
        _p, _i32, _p, _p, _p, _i32,  # seen, seen_stride, n_seen, logits, guesses, threads
    ],
}  # fmt: skip


def _compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise SpecchatError(
        "the int4 runtime builds its kernels with a C compiler once; none was found "
        "(install gcc, or use --backend llama)"
    )


def level_flags(level: str) -> list[str]:
    """The compiler flags that build the kernels for `level` on this machine."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        return list(_X86_MARCH[level])
    return []  # another architecture: plain C, vectorized by the compiler (NEON on ARM)


@dataclass(frozen=True)
class Kernels:
    """A loaded build: the library, the level it was built for and whether it runs threads
    (OpenMP), or one thread where the compiler has no OpenMP."""

    library: ctypes.CDLL
    level: str
    threaded: bool
    key: str  # the build's identity: source, compiler and flags (costs measured on it are its)

    def __getattr__(self, name: str):
        return getattr(self.library, name)

    @functools.cached_property
    def tile_blocks(self) -> int:
        """Blocks of eight rows one tile of the interleaved kernels takes: 2 where AVX-512 VNNI
        takes a pair, whose codes are then laid side by side (`linear.join_pairs`)."""
        out = ctypes.c_int32()
        self.library.tile_blocks(ctypes.byref(out))
        return out.value


def kernels(level: str | None = None) -> Kernels:
    """The kernels built for `level` (default: this process's, `specchat.cpu.level`), built on
    first use and then loaded from the cache; a one-line SpecchatError when they cannot be."""
    chosen = level or cpu.level()
    return _load(chosen, _compiler())


@cache
def _load(level: str, compiler: str) -> Kernels:
    openmp.share_torch_runtime()  # before the kernels bind to a runtime
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, check=False
    ).stdout
    flags = [*_FLAGS, *level_flags(level)]
    native = any("native" in flag for flag in flags)
    key = hashlib.sha256(
        b"|".join(
            [
                *(_sources_text()),
                version.encode(),
                " ".join(flags).encode(),
                _cpu_flags().encode() if native else b"",
            ]
        )
    ).hexdigest()[:16]
    folder = locations.cache_dir() / "int4-kernels"
    folder.mkdir(parents=True, exist_ok=True)
    threaded_library = folder / f"int4-{level}-{key}-omp.so"
    serial_library = folder / f"int4-{level}-{key}.so"
    for library, threaded in ((threaded_library, True), (serial_library, False)):
        if library.exists():
            return _open(library, level, threaded, key)
    first_time.say("building the int4 runtime's kernels for this CPU (once)")
    error = _build(compiler, [*flags, _OPENMP], threaded_library)
    if error is None:
        return _open(threaded_library, level, True, key)
    if _build(compiler, flags, serial_library) is None:  # no OpenMP here: one thread
        return _open(serial_library, level, False, key)
    raise SpecchatError(f"cannot build the int4 runtime's kernels with {compiler}: {error}")


def _c_files() -> list[Path]:
    return sorted(_SOURCES.glob("*.c"))


def _sources_text() -> list[bytes]:
    """Every source and header, named: a change to any of them is a new build."""
    files = sorted([*_SOURCES.glob("*.c"), *_SOURCES.glob("*.h")])
    return [part for f in files for part in (f.name.encode(), f.read_bytes())]


def _build(compiler: str, flags: list[str], library: Path) -> str | None:
    """Compile the kernels into `library`; None, or the compiler's first line of complaint.
    Each source is compiled apart, as many at once as there are CPUs, then linked: one call
    compiling them in turn took 7.5 s on a 2-core EPYC (2 s its longest file), a new user's
    first start waiting on it. The same objects either way: nothing is optimised across files."""
    work = Path(tempfile.mkdtemp(prefix="specchat-kernels-"))  # the objects, gone after
    partial = library.with_name(f".{library.stem}.{os.getpid()}.so")
    compile_flags = [flag for flag in flags if flag != "-shared"]
    sources = _c_files()
    objects = [work / f"{source.stem}.o" for source in sources]
    try:
        with concurrent.futures.ThreadPoolExecutor(min(len(sources), os.cpu_count() or 1)) as pool:
            steps = pool.map(
                _run,
                [
                    [compiler, *compile_flags, "-c", str(s), "-o", str(o)]
                    for s, o in zip(sources, objects, strict=True)
                ],
            )
            error = next((complaint for complaint in steps if complaint is not None), None)
        if error is None:
            error = _run([compiler, *flags, "-o", str(partial), *map(str, objects), "-lm"])
        if error is None and not partial.exists():
            error = "failed"
        if error is not None:
            partial.unlink(missing_ok=True)
            return error
        os.replace(partial, library)
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(command: list[str]) -> str | None:
    """Run a compiler command: None, or its first line of complaint."""
    try:
        built = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if built.returncode != 0:
        lines = (built.stderr or built.stdout).strip().splitlines()
        return next((line for line in lines if "error" in line), lines[0] if lines else "failed")
    return None


def _open(library: Path, level: str, threaded: bool, key: str) -> Kernels:
    try:
        lib = ctypes.CDLL(str(library))
    except OSError as exc:
        raise SpecchatError(f"cannot load the int4 runtime's kernels: {exc}") from None
    for name, argtypes in _SIGNATURES.items():
        function = getattr(lib, name)
        function.argtypes = argtypes
        function.restype = None
    return Kernels(lib, level, threaded, key)


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return ""
