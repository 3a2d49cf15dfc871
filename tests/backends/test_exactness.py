"""Whether a block's logits equal one-token passes' is measured per model and runtime, kept with
the pass costs, and said where it matters: the bundled Q4_1 model is bitwise exact on the
batch-invariant llama.cpp build; a Q4_K_M copy made with llama.cpp's own quantizer is not (its
K-quant kernels sum in another order in a batch), and the chat, `ask --json` and `compare` say
that greedy-family decoders are exact only to near-ties there."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.backends import exactness as exactness_module
from specchat.backends.exactness import probe_exactness
from tests.cli import run_cli


def _requantized(tmp_path_factory: pytest.TempPathFactory, bundled_gguf: Path, name: str) -> Path:
    """The bundled model requantized to `name` (Q4_K_M, Q8_0) by llama.cpp's own quantizer."""
    from benchmarks.random_gguf import quantize

    target = tmp_path_factory.mktemp("quants") / f"SmolLM2-135M-Instruct.{name}.gguf"
    quantize(bundled_gguf, target, name)
    return target


@pytest.fixture(scope="module")
def q4_k_m(tmp_path_factory: pytest.TempPathFactory, bundled_gguf: Path) -> Path:
    return _requantized(tmp_path_factory, bundled_gguf, "Q4_K_M")


@pytest.fixture(scope="module")
def q8_0(tmp_path_factory: pytest.TempPathFactory, bundled_gguf: Path) -> Path:
    return _requantized(tmp_path_factory, bundled_gguf, "Q8_0")


@pytest.fixture(scope="module")
def k_quant_backend(q4_k_m: Path):
    from specchat.backends.llama import LlamaBackend

    backend = LlamaBackend(q4_k_m, n_ctx=512, threads=1)
    yield backend
    backend.close()


def test_the_bundled_model_is_bitwise_exact_on_llama_cpp(fresh_llama):
    measured = probe_exactness(fresh_llama)
    assert measured.bitwise and measured.max_difference == 0.0
    assert measured.label == "exact" and measured.note is None
    assert fresh_llama.n_committed == 0, "the probe leaves the cache as it found it"


def test_a_k_quant_copy_is_exact_only_to_near_ties_and_it_is_kept(k_quant_backend, monkeypatch):
    measured = k_quant_backend.exactness()
    assert not measured.bitwise and measured.max_difference > 0
    assert measured.label == "exact to near-ties" and "near-ties" in measured.note

    # kept with the pass costs: a second backend on the same file does not probe again
    from specchat.backends.llama import LlamaBackend

    def no_probe(backend):
        raise AssertionError("probed again")

    monkeypatch.setattr("specchat.backends.block_cost.probe_exactness", no_probe)
    again = LlamaBackend(k_quant_backend.model_path, n_ctx=512, threads=1)
    try:
        kept = again.exactness()
        assert not kept.bitwise and kept.max_difference == pytest.approx(measured.max_difference)
    finally:
        again.close()
    assert exactness_module.PROBE_BLOCK > 1


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"), reason="the patch's kernel is x86's"
)
def test_the_installed_llama_cpp_multiplies_several_tokens_at_once():
    """scripts/setup builds llama.cpp with scripts/patches applied, whose Q4_1 and Q8_0 kernel
    takes a weight row against several tokens at once; its build names the patch's revision."""
    import llama_cpp

    assert b"SPECCHAT_COLS = 2" in llama_cpp.llama_print_system_info()


@pytest.mark.parametrize("kernel", ["default", "avx2"])
@pytest.mark.parametrize("quant", ["bundled", "q8_0"])
def test_blocks_of_any_width_give_the_one_by_one_logits(quant, kernel, bundled_gguf: Path, request):
    """The patched kernel takes up to 8 tokens a call, and a pass of up to 32 splits its rows by
    thread: blocks narrower, wider and not a multiple of that, on two threads, give bit for bit
    the logits of the tokens one by one, on the bundled Q4_1 file and on a Q8_0 copy (whose
    layers and LM head take the Q8_0 kernel), with the AVX-512 kernel where the CPU has one and
    with the AVX2 kernel every x86-64 build has."""
    path = bundled_gguf if quant == "bundled" else request.getfixturevalue(quant)
    env = dict(os.environ, SPECCHAT_GGML_NO_AVX512="1" if kernel == "avx2" else "0")
    ran = subprocess.run(
        [sys.executable, "-m", "tests.backends.block_widths", str(path)],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip().endswith("bitwise")


def test_numpy_backend_probes_bitwise(numpy_backend):
    assert numpy_backend.exactness().bitwise


@pytest.mark.parametrize(
    "quant,runtime,bitwise",
    [("bundled", "llama", True), ("q4_k_m", "llama", False), ("q4_k_m", "int4", True)],
)
def test_ask_json_and_compare_say_how_exact_the_model_is(quant, runtime, bitwise, q4_k_m: Path):
    """The K-quant copy is exact only to near-ties on llama.cpp, bitwise on the int4 runtime
    (whose kernels compute a row the same way whatever shares the pass)."""
    model = ("--backend", runtime) + (() if quant == "bundled" else ("--model", str(q4_k_m)))
    asked = run_cli("ask", "Count to five.", "-d", "pld", "--max-tokens", "8", "--json", *model)
    assert asked.returncode == 0, asked.stderr
    done = json.loads(asked.stdout.splitlines()[-1])
    assert done["exactness"]["bitwise"] is bitwise

    compared = run_cli("compare", "Count to five.", "-d", "pld", "--repeats", "1", *model)
    assert compared.returncode == 0, compared.stderr
    assert ("exact to near-ties on this model" in compared.stdout) is not bitwise


@pytest.mark.anyio
async def test_the_chat_says_when_speculation_is_exact_only_to_near_ties(k_quant_backend):
    from specchat.app.tui.app import SpecchatApp
    from specchat.app.tui.widgets.status_bar import StatusBar
    from specchat.options import RunConfig

    app = SpecchatApp(settings=RunConfig(), backend=k_quant_backend, save_settings_file=False)
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.pause()
        status = str(app.screen.query_one(StatusBar).render())
        assert "exact to near-ties" in status


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
