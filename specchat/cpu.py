"""The CPU a run computes on: its model name and the instruction-set level the kernels use.

Why a level and not just "the CPU": a runtime's speed and its exact arithmetic both depend on which
vector instructions its kernels were built for, and most machines (AVX2 laptops, ARM) are not the
AVX-512 ones the fast paths were first written on. `SPECCHAT_CPU` (also `cpu` in settings.toml
and `--cpu`) caps the level, so any machine can run and test the lower ones; the int4 runtime's C
kernels are built per level, and torch follows through `ATEN_CPU_CAPABILITY`. Figures name the
CPU and the level that ran (`describe`).
"""

from __future__ import annotations

import os
import platform
from functools import cache

from specchat.errors import SpecchatError

# lowest first; a cap never raises a level above what the CPU has. avxvnni is AVX2 with AVX-VNNI's
# byte dot products (Intel since Alder Lake and Sapphire Rapids, AMD since Zen 5): most laptops
# sold since 2022, without AVX-512; some AVX-512 CPUs lack it (Ice Lake servers, Zen 4), so a cap
# at avxvnni there runs avx2.
LEVELS = ("generic", "avx2", "avxvnni", "avx512")
ENV = "SPECCHAT_CPU"
_AVX2 = {"avx2", "fma", "f16c", "bmi2"}
# what each level needs in /proc/cpuinfo's flags (x86-64-v3 and v4, as compilers define them)
_NEEDS = {
    "avx2": _AVX2,
    "avxvnni": _AVX2 | {"avx_vnni"},
    "avx512": _AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"},
}
# torch's names for the same caps
_TORCH_CAPABILITY = {"generic": "default", "avx2": "avx2", "avxvnni": "avx2", "avx512": "avx512"}


@cache
def _cpuinfo() -> tuple[str, frozenset[str]]:
    name, flags = "", frozenset()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                key, _, value = line.partition(":")
                key = key.strip()
                if not name and key in ("model name", "Model", "Hardware"):
                    name = value.strip()
                elif not flags and key in ("flags", "Features"):
                    flags = frozenset(value.split())
    except OSError:
        pass
    return name or platform.processor() or platform.machine() or "unknown CPU", flags


def cpu_name() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it."""
    return _cpuinfo()[0]


def runs(level: str) -> bool:
    """Whether this CPU has what `level` needs (generic: any)."""
    if level == "generic":
        return True
    return platform.machine().lower() in ("x86_64", "amd64") and _NEEDS[level] <= _cpuinfo()[1]


def native_level() -> str:
    """The highest level this CPU runs: avx512, avxvnni or avx2 on x86-64 with those features,
    else generic (plain C, which the compiler vectorizes where it can: NEON on ARM)."""
    return levels_here()[-1]


def levels_here(top: str | None = None) -> list[str]:
    """The levels this CPU runs, lowest first, up to `top` (default: all of them)."""
    below = LEVELS if top is None else LEVELS[: LEVELS.index(top) + 1]
    return [level for level in below if runs(level)]


def check_level(value: str) -> str:
    """`value` as a level name, or a one-line error."""
    level = value.strip().lower()
    if level not in LEVELS:
        raise SpecchatError(f"{ENV}={value!r}: use one of {', '.join(LEVELS)}")
    return level


def level() -> str:
    """The level the kernels use: the CPU's own, capped by SPECCHAT_CPU where set."""
    native = native_level()
    cap = os.environ.get(ENV, "").strip()
    if not cap:
        return native
    return levels_here(min(check_level(cap), native, key=LEVELS.index))[-1]


def apply(cap: str | None) -> None:
    """Cap the level for this process (None: the environment's or the CPU's own). torch reads
    its cap once, at its first kernel call: a process that already ran torch keeps its own."""
    if cap:
        os.environ[ENV] = check_level(cap)
    os.environ.setdefault("ATEN_CPU_CAPABILITY", _TORCH_CAPABILITY[level()])


def level_of_build(system_info: str) -> str:
    """The level a llama.cpp build's CPU kernels use, from `llama_print_system_info()`: ggml
    picks its kernels when it is compiled (`-DGGML_NATIVE=OFF` builds AVX2), not by SPECCHAT_CPU."""
    found = {
        part.split("=")[0].strip()
        for part in system_info.split("|")
        if part.strip().endswith("= 1")
    }
    if "AVX512" in found:
        return "avx512"
    return "avx2" if {"AVX2", "FMA"} <= found else "generic"


def torch_level() -> str:
    """The level torch's CPU kernels run at in this process (ATEN_CPU_CAPABILITY caps it)."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability().lower()
    return (
        "avx512"
        if capability.startswith("avx512")
        else ("avx2" if capability == "avx2" else "generic")
    )


def describe(ran: str | None = None) -> str:
    """The CPU line every figure carries: the model name and the level that ran (`ran`, default
    this process's), with the CPU's own where that is higher."""
    ran, native = ran or level(), native_level()
    shown = ran if ran == native else f"{ran}; the CPU has {native}"
    return f"{cpu_name()} ({shown})"
