"""`--device auto`, the default: a GPU where the model's runtime sees one, else the CPU — on a
machine without one (this one, CI) every path says cpu, and nothing asks torch or llama.cpp."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specchat import devices
from specchat.backends.registry import GGUF, INT4, LLAMA_CPP, TRANSFORMERS, Runtime, runtime


def a_runtime(gpu: bool | None) -> Runtime:
    """A declaration whose GPU check answers `gpu` (None: it declares no GPU, as int4)."""
    check = "" if gpu is None else f"tests.test_devices:{'yes' if gpu else 'no'}"
    return Runtime("test", (GGUF,), "unused:unused", gpu=check)


def yes() -> bool:
    return True


def no() -> bool:
    return False


def test_a_named_device_is_kept():
    assert devices.pick("cpu", [a_runtime(True)]) == "cpu"
    assert devices.pick("cuda", [a_runtime(None)]) == "cuda"


def test_auto_is_the_cpu_without_a_gpu_device_file_whatever_the_runtimes_say(monkeypatch):
    monkeypatch.setattr(devices, "gpu_present", lambda: False)
    assert devices.pick("auto", [a_runtime(True)]) == "cpu"


def test_auto_is_cuda_where_a_runtime_that_could_run_the_model_sees_the_gpu(monkeypatch):
    monkeypatch.setattr(devices, "gpu_present", lambda: True)
    assert devices.pick("auto", [a_runtime(None), a_runtime(True)]) == "cuda"
    # a GPU whose runtimes cannot use it (a CPU-only llama.cpp build, a CPU torch): the CPU
    assert devices.pick("auto", [a_runtime(None), a_runtime(False)]) == "cpu"


def test_the_int4_runtime_never_claims_a_gpu_and_these_builds_see_none():
    assert not runtime(INT4).sees_gpu()
    if devices.gpu_present():  # pragma: no cover - a machine with a GPU
        pytest.skip("this machine has a GPU")
    assert not runtime(LLAMA_CPP).sees_gpu()  # the suite's llama.cpp is a CPU build
    assert not runtime(TRANSFORMERS).sees_gpu()


def test_ask_runs_on_the_device_auto_picked_and_says_which():
    done = subprocess.run(
        [sys.executable, "-m", "specchat", "ask", "Hi", "--max-tokens", "2", "--json"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["device"] == ("cuda" if devices.gpu_present() else "cpu")


def test_setup_with_cuda_and_no_cuda_compiler_is_one_line(tmp_path):
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        ["bash", str(root / "scripts" / "setup"), "--cuda"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CUDA_HOME": str(tmp_path / "none")},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if done.returncode == 0 or "nvcc" not in done.stderr:  # pragma: no cover - nvcc in /usr/bin
        pytest.skip("this machine has CUDA's compiler on the plain PATH")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "nvcc" in done.stderr and "without --cuda" in done.stderr


def test_asking_for_cuda_without_a_cuda_build_names_the_fix():
    done = subprocess.run(
        [sys.executable, "-m", "specchat", "ask", "Hi", "--device", "cuda", "--backend", "llama"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if devices.gpu_present():  # pragma: no cover - a machine with a GPU
        pytest.skip("this machine has a GPU")
    assert done.returncode == 2
    assert "scripts/setup --cuda" in done.stderr and "Traceback" not in done.stderr
