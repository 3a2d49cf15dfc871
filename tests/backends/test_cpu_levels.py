"""The instruction-set levels (specchat/cpu.py): what SPECCHAT_CPU caps, the int4 runtime's kernels
built per level and equal across the levels that share their arithmetic, and a machine where the
kernels cannot be built (no compiler, a failing one, no OpenMP) running llama.cpp instead.

The Backend contract at every level below the CPU's own is test_contract.py's (`int4@LEVEL`)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from specchat import cpu
from specchat.backends.base import Block
from specchat.errors import SpecchatError
from specchat.models import LoadOptions, load_model
from tests.cli import run_cli

HERE = cpu.levels_here()


def test_the_cap_never_raises_the_level(monkeypatch: pytest.MonkeyPatch) -> None:
    native = cpu.native_level()
    for cap in cpu.LEVELS:
        monkeypatch.setenv(cpu.ENV, cap)
        ceiling = cpu.LEVELS.index(min(cap, native, key=cpu.LEVELS.index))
        # the highest level this CPU runs at or below the cap (the cap itself where it runs)
        assert cpu.level() == [level for level in HERE if cpu.LEVELS.index(level) <= ceiling][-1]
    monkeypatch.setenv(cpu.ENV, "avx2")
    assert cpu.level() == ("avx2" if "avx2" in HERE else "generic")
    monkeypatch.setenv(cpu.ENV, "generic")
    assert cpu.describe().startswith(cpu.cpu_name())
    assert "generic" in cpu.describe()
    monkeypatch.setenv(cpu.ENV, "avx9")
    with pytest.raises(SpecchatError, match="avx9"):
        cpu.level()


AVX2 = "fpu sse2 avx avx2 fma f16c bmi2"
AVX512 = " avx512f avx512bw avx512vl avx512dq avx512_vnni"


@pytest.mark.parametrize(
    ("flags", "native", "capped_at_avxvnni"),
    [
        (AVX2, "avx2", "avx2"),  # an AMD EPYC of Zen 3
        (AVX2 + " avx_vnni", "avxvnni", "avxvnni"),  # an Alder Lake laptop
        (AVX2 + AVX512, "avx512", "avx2"),  # a Zen 4 or an Ice Lake server: no AVX-VNNI
        (AVX2 + AVX512 + " avx_vnni", "avx512", "avxvnni"),  # a Sapphire Rapids Xeon
    ],
)
def test_each_cpu_runs_the_levels_it_has(
    monkeypatch: pytest.MonkeyPatch, flags: str, native: str, capped_at_avxvnni: str
) -> None:
    """A level runs only where the CPU has its instructions, so a cap at avxvnni on an AVX-512
    CPU without AVX-VNNI runs avx2 (the kernels would otherwise stop on an illegal instruction)."""
    monkeypatch.setattr(cpu, "_cpuinfo", lambda: ("a CPU", frozenset(flags.split())))
    monkeypatch.setattr(cpu.platform, "machine", lambda: "x86_64")
    monkeypatch.delenv(cpu.ENV, raising=False)
    assert cpu.native_level() == cpu.level() == native
    monkeypatch.setenv(cpu.ENV, "avxvnni")
    assert cpu.level() == capped_at_avxvnni
    monkeypatch.setenv(cpu.ENV, "generic")
    assert cpu.level() == "generic"


def test_a_llama_cpp_build_names_its_level() -> None:
    assert (
        cpu.level_of_build("CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 |") == "avx2"
    )
    assert (
        cpu.level_of_build("CPU : AVX2 = 1 | FMA = 1 | AVX512 = 1 | AVX512_VNNI = 1 |") == "avx512"
    )
    assert cpu.level_of_build("CPU : NEON = 1 | ARM_FMA = 1 |") == "generic"
    assert cpu.level_of_build("CPU : AVX2 = 0 | FMA = 1 |") == "generic"


@pytest.mark.slow
@pytest.mark.skipif(len(HERE) < 2 or "avx2" not in HERE, reason="no AVX2 on this CPU")
def test_every_level_computes_the_plain_c_bits(int4_at_level, int4_backend) -> None:
    """The AVX2 and AVX-512 kernels are the plain C ones vectorized (VNNI sums the same exact
    integers): the bundled model's logits after a prefill, a chain and a tree are the same bits
    at every level this CPU runs."""
    logits = {}
    for level in HERE:
        backend = int4_backend if int4_backend.level == level else int4_at_level(level)
        ids = backend.tokenize("The quick brown fox jumps over the lazy dog. It was")
        backend.rollback(0)
        backend.prefill(ids[:-4])
        chain = backend.evaluate(Block.chain(ids[-4:]))
        backend.rollback(len(ids) - 4)
        tree = backend.evaluate(Block((ids[-4], ids[-3], ids[-1], ids[-2]), (-1, 0, 0, 2)))
        logits[level] = (chain, tree)
        backend.rollback(0)
    for level in HERE[1:]:
        for vectorized, plain in zip(logits[level], logits["generic"]):
            assert np.array_equal(vectorized, plain), level


@pytest.mark.parametrize("level", HERE)
def test_each_level_is_its_own_cached_build(level: str) -> None:
    from specchat.backends.int4.kernels import kernels, level_flags

    library = kernels(level)
    assert library.level == level
    assert kernels(level) is library  # built once per process
    if level != "avx512":  # a fixed target: the same build on any machine of the architecture
        assert not any("native" in flag for flag in level_flags(level))


def _compiler(folder: Path, script: str) -> str:
    path = folder / "cc"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache dir of the test's own: no kernels built before, no pass costs kept."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(cache))
    return cache


@pytest.mark.slow
def test_a_compiler_that_fails_leaves_llama_cpp(
    tmp_path: Path, own_cache: Path, bundled_gguf
) -> None:
    """The int4 runtime says why it cannot run, the chooser runs llama.cpp, and asking for int4
    by name is one line and exit code 2."""
    from specchat.backends.int4.backend import unavailable_reason
    from specchat.backends.registry import GGUF
    from specchat.backends.runtimes import candidates

    failing = _compiler(tmp_path, 'echo "cc: error: this compiler is broken" >&2\nexit 1\n')
    env = {"CC": failing, "SPECCHAT_CACHE_DIR": str(own_cache)}
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        reason = unavailable_reason(bundled_gguf, "cpu")
        assert reason is not None and "this compiler is broken" in reason and "\n" not in reason
        assert candidates(GGUF, bundled_gguf, "cpu") == ["llama"]
        # a load that meets a first build says so (seconds, once a machine), then runs llama.cpp
        heard: list[str] = []
        backend = load_model(None, LoadOptions(threads=1, n_ctx=256), heard.append)
        backend.close()
        assert backend.name == "llama"
        assert "building the int4 runtime's kernels for this CPU (once)" in heard
    finally:
        os.environ.clear()
        os.environ.update(saved)
    ran = run_cli("ask", "Hi", "--max-tokens", "2", "--json", "--no-log", env=env)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.splitlines()[-1])["runtime"] == "llama"
    ran = run_cli("ask", "Hi", "--max-tokens", "2", "--backend", "int4", env=env)
    assert ran.returncode == 2
    assert ran.stderr.count("\n") == 1 and "this compiler is broken" in ran.stderr


@pytest.mark.slow
def test_without_openmp_the_kernels_run_on_one_thread(
    tmp_path: Path, own_cache: Path, bundled_gguf, int4_backend
) -> None:
    """A compiler without OpenMP builds the kernels serially: the same model, the same bits."""
    from specchat.backends.int4.backend import Int4Backend
    from specchat.backends.int4.kernels import kernels

    no_openmp = _compiler(
        tmp_path,
        'for a in "$@"; do [ "$a" = -fopenmp ] && { echo "cc: error: unsupported option -fopenmp" >&2; exit 1; }; done\n'
        'exec cc "$@"\n',
    )
    saved = dict(os.environ)
    os.environ["CC"] = no_openmp
    try:
        library = kernels(int4_backend.level)
        assert not library.threaded
        serial = Int4Backend(bundled_gguf, n_ctx=256, threads=2, level=int4_backend.level)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        ids = serial.tokenize("Once upon a time, in a land far away,")
        for backend in (serial, int4_backend):
            backend.rollback(0)
            backend.prefill(ids[:-3])
        assert np.array_equal(
            serial.evaluate(Block.chain(ids[-3:])), int4_backend.evaluate(Block.chain(ids[-3:]))
        )
    finally:
        serial.close()
        int4_backend.rollback(0)


@pytest.mark.slow
def test_the_level_that_ran_is_named(bundled_gguf) -> None:
    """`ask --json` names the runtime and the CPU line with its level; --cpu caps it."""
    ran = run_cli(
        "ask", "Hi", "--max-tokens", "2", "--json", "--no-log", "--backend", "int4",
        "--cpu", "generic",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    done = json.loads(ran.stdout.splitlines()[-1])
    assert done["runtime"] == "int4"
    assert done["cpu"] == cpu.describe("generic") and "generic" in done["cpu"]
    ran = run_cli("ask", "Hi", "--cpu", "avx9")
    assert ran.returncode == 2 and "avx9" in ran.stderr
