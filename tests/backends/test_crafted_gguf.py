"""A crafted GGUF never crashes a runtime: counts, lengths, dims, offsets and types of a small
random-weight Llama file (the bundled tokenizer, Q4_0 from llama.cpp's quantizer) are set to edge
values by hypothesis, and each file either loads and answers or is refused in one line, on
llama.cpp and on the int4 runtime alike. `benchmarks/fuzz_gguf.py` runs thousands of such files
through the CLI; here a fixed, derandomized sample runs in-process, and a few through the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.random_gguf import SPOT_BYTES, field_spots, write_random_gguf
from specchat.backends.base import Block
from specchat.errors import SpecchatError

EDGES = [0, 1, 3, 255, 2**31 - 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1]


@pytest.fixture(scope="module")
def seed_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random_gguf(tmp_path_factory.mktemp("crafted") / "tiny.gguf", quant="Q4_0")


def load_and_answer(path: Path, runtime: str) -> str:
    """'answered' or the one-line refusal; anything else raises."""
    if runtime == "int4":
        from specchat.backends.int4.backend import Int4Backend as Runtime
    else:
        from specchat.backends.llama import LlamaBackend as Runtime
    try:
        backend = Runtime(path, threads=1, n_ctx=64)
    except SpecchatError as exc:
        assert "\n" not in str(exc)
        return str(exc)
    try:
        ids = backend.tokenize("Hi there")[:8] or [0]
        backend.prefill(ids[:-1])
        assert backend.evaluate(Block.chain(ids[-1:])).shape[0] == 1
    finally:
        backend.close()
    return "answered"


def test_the_seed_file_answers_on_both_runtimes(seed_file: Path) -> None:
    assert load_and_answer(seed_file, "llama") == "answered"
    assert load_and_answer(seed_file, "int4") == "answered"


@settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_mutated_header_loads_or_is_one_line(seed_file: Path, tmp_path: Path, data) -> None:
    original = seed_file.read_bytes()
    spots = field_spots(original)
    mutated = bytearray(original)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        at, kind = data.draw(st.sampled_from(spots[:-1]), label="field")
        if kind in ("type", "ttype"):
            size, value = (
                SPOT_BYTES[kind],
                data.draw(st.integers(0, 40) | st.just(2**32 - 1), label="type"),
            )
        else:
            size = SPOT_BYTES[kind]
            value = data.draw(st.sampled_from(EDGES) | st.integers(0, 2**16), label="value")
        mutated[at : at + size] = (value % 2 ** (8 * size)).to_bytes(size, "little")
    if data.draw(st.booleans(), label="truncate"):
        mutated = mutated[: data.draw(st.integers(0, len(mutated) - 1), label="at")]
    path = tmp_path / "crafted.gguf"
    path.write_bytes(bytes(mutated))
    for runtime in ("llama", "int4"):
        load_and_answer(path, runtime)


@pytest.mark.parametrize("runtime", ["llama", "int4"])
def test_the_cli_refuses_a_crafted_file_in_one_line(seed_file: Path, tmp_path: Path, runtime):
    """A tensor table whose first tensor claims 2^32 rows: `specchat ask` says so in one line
    and exits 2."""
    data = bytearray(seed_file.read_bytes())
    first_dim = next(at for at, kind in field_spots(bytes(data)) if kind == "dim")
    data[first_dim : first_dim + 8] = (2**32).to_bytes(8, "little")
    _refusal(bytes(data), tmp_path, runtime)


def _value_at(data: bytes, key: str) -> int:
    """Where metadata `key`'s value starts (after its 4-byte type)."""
    at = data.index(key.encode()) + len(key)
    return at + 4


def _integer_norm(data: bytearray) -> None:
    spots = field_spots(bytes(data))
    for index, (at, kind) in enumerate(spots):
        if kind == "ndims" and int.from_bytes(data[at : at + 4], "little") == 1:
            ttype = spots[index + 2][0]  # ndims, one dim, then the type
            data[ttype : ttype + 4] = (26).to_bytes(4, "little")  # I32
            return


def _nan_epsilon(data: bytearray) -> None:
    at = _value_at(bytes(data), "llama.attention.layer_norm_rms_epsilon")
    data[at : at + 4] = bytes.fromhex("0000c07f")


def _too_many_layers(data: bytearray) -> None:
    at = _value_at(bytes(data), "llama.block_count")
    data[at : at + 4] = (65536).to_bytes(4, "little")


def _twin_tokens(data: bytearray) -> None:
    at = _value_at(bytes(data), "tokenizer.ggml.tokens") + 12  # item type, count
    seen: dict[int, int] = {}
    while True:
        length = int.from_bytes(data[at : at + 8], "little")
        if length in seen:  # spell this token as the earlier one of its length
            first = seen[length]
            data[at + 8 : at + 8 + length] = data[first : first + length]
            return
        seen[length] = at + 8
        at += 8 + length


@pytest.mark.parametrize(
    "craft,says",
    [
        (_integer_norm, "holds integers"),
        (_nan_epsilon, "layer_norm_rms_epsilon is nan"),
        (_too_many_layers, "65536 layers"),
        (_twin_tokens, "spelled as another"),
    ],
)
def test_what_llama_cpp_would_abort_on_is_refused_first(seed_file: Path, tmp_path, craft, says):
    """Files the fuzzer found ending llama.cpp with an assertion (SIGABRT): refused in one line
    before llama.cpp reads them."""
    data = bytearray(seed_file.read_bytes())
    craft(data)
    assert says in _refusal(bytes(data), tmp_path)


@pytest.mark.parametrize("dims,says", [(0, "is 0"), (2, "is 2 for heads of 16")])
def test_a_qwen2_file_that_rotates_part_of_a_head_is_refused_first(
    family_gguf, tmp_path, dims, says
):
    """The fuzzer on a qwen2 seed: a rope.dimension_count other than the head size passes
    llama.cpp's loader (which checks it for Llama only) and ends it with an assertion in the
    graph builder."""
    data = bytearray(family_gguf("qwen2").read_bytes())
    at = _value_at(bytes(data), "qwen2.rope.dimension_count")
    data[at : at + 4] = dims.to_bytes(4, "little")
    assert f"qwen2.rope.dimension_count {says}" in _refusal(bytes(data), tmp_path)


def _refusal(data: bytes, tmp_path: Path, runtime: str = "llama") -> str:
    """The one line `specchat ask` (a process of its own: an abort would end it) refuses the
    file with on `runtime`, exit code 2."""
    crafted = tmp_path / "crafted.gguf"
    crafted.write_bytes(data)
    run = subprocess.run(
        [sys.executable, "-m", "specchat", "ask", "Hi", "--model", str(crafted), "--backend",
         runtime, "--threads", "1", "--max-tokens", "2"],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr[-2000:]
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specchat: error: "), run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["llama", "int4"])
def test_a_token_that_a_nul_byte_makes_another_is_refused_in_one_line(
    seed_file: Path, tmp_path: Path, runtime: str
) -> None:
    """llama.cpp reads token strings as C strings: "Ġthe" rewritten as "Ġt\\0x" is "Ġt" to it, a
    token spelled twice, and its vocabulary loader aborts the process (exit 134, found by
    benchmarks/fuzz_gguf.py). The file is refused in one line before llama.cpp reads it."""
    data = bytearray(seed_file.read_bytes())
    spelled = (5).to_bytes(8, "little") + "Ġthe".encode()
    at = data.index(spelled) + 8
    assert (3).to_bytes(8, "little") + "Ġt".encode() in data  # "Ġt" is a token of its own
    data[at : at + 5] = "Ġt".encode() + b"\0x"
    assert "spelled as another" in _refusal(bytes(data), tmp_path, runtime)
