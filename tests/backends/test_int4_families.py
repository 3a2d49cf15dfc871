"""The int4 runtime on each model family it runs besides the bundled Llama (conftest.FAMILY_SHAPES:
Llama 3 with frequency factors and linear RoPE scaling, SmolLM3, qwen2, qwen3, qwen3 with YaRN,
phi3, Gemma 2 and 3), on random-weight files quantized by llama.cpp's own quantizer, with
llama.cpp on the same file as the oracle.

The tolerance: both round a matmul's input to 8 bits per 32 values; the int4 runtime also keeps
bf16 between the matmuls. Measured on these files at every level, the largest logit difference
from llama.cpp's is 0.07-0.10 of the row's standard deviation; a forward that pairs RoPE's
dimensions wrongly or skips qwen2's biases is 0.88-2.0 off, YaRN computed as linear scaling 2.6,
SmolLM3 with RoPE in its fourth layer too 0.65.
Every logit within `TOLERANCE` also means the two pick the same greedy token wherever llama.cpp's
top two are more than twice that apart. (The Backend contract on these files, blocks bitwise
equal to one-token passes included, is test_contract.py's.)
"""

from __future__ import annotations

import numpy as np
import pytest

from specchat.backends.base import Block
from specchat.errors import SpecchatError
from tests.backends.test_int4_backend import LEVELS_HERE
from tests.cli import run_cli
from tests.conftest import FAMILY_SHAPES

TOLERANCE = 0.2  # of a row's logit standard deviation
TEXT = "The quick brown fox jumps over the lazy dog, then it runs home to sleep."


def _greedy_chain(llama, prompt: list[int], tokens: int) -> tuple[list[int], np.ndarray]:
    """llama.cpp's greedy continuation of `prompt` and its logits at each of those tokens."""
    llama.rollback(0)
    llama.prefill(prompt[:-1])
    chain, rows = [prompt[-1]], []
    for _ in range(tokens):
        logits = llama.evaluate(Block.chain([chain[-1]]))[0]
        llama.commit([0])
        rows.append(logits)
        chain.append(int(np.argmax(logits)))
    return chain[:-1], np.stack(rows)


@pytest.mark.parametrize("level", LEVELS_HERE)
@pytest.mark.parametrize(
    "family,quant",
    [(name, "Q4_0") for name in FAMILY_SHAPES]
    + [("qwen3", "Q4_K_M"), ("phi3", "Q8_0")]
    + [(gemma, quant) for gemma in ("gemma2", "gemma3") for quant in ("F16", "Q4_K_M")],
)
def test_each_family_agrees_with_llama_cpp(family_gguf, family, quant, level) -> None:
    from specchat.backends.int4.backend import Int4Backend
    from specchat.backends.llama import LlamaBackend

    path = family_gguf(family, quant)
    llama = LlamaBackend(path, n_ctx=512, max_branches=1, threads=1)
    int4 = Int4Backend(path, n_ctx=512, threads=1, level=level)
    try:
        prompt = llama.tokenize(TEXT)
        chain, expected = _greedy_chain(llama, prompt, 24)
        int4.prefill(prompt[:-1])
        # as one block: llama.cpp's one-token rows against a block's rows
        ours = int4.evaluate(Block.chain(chain))
        scale = expected.std(axis=1, keepdims=True)
        worst = float((np.abs(ours - expected) / scale).max())
        assert worst <= TOLERANCE, f"logits {worst:.3f} of a row's spread from llama.cpp's"
        top_two = np.sort(expected, axis=1)[:, -2:]
        clear = (top_two[:, 1] - top_two[:, 0]) > 2 * TOLERANCE * scale[:, 0]
        assert clear.sum() >= 3  # the comparison below says something
        assert np.array_equal(ours.argmax(axis=1)[clear], expected.argmax(axis=1)[clear])
    finally:
        llama.close()
        int4.close()


def test_gemma3_with_soft_capped_logits_agrees_with_llama_cpp(tmp_path) -> None:
    """A Gemma 3 file that declares a final soft cap: logits c * tanh(logits / c), as llama.cpp
    computes them (a cap of 8 bends these random logits: computed without it they are far off)."""
    from benchmarks.random_gguf import RandomShape, write_random_gguf
    from specchat.backends.int4.backend import Int4Backend
    from specchat.backends.llama import LlamaBackend

    shape = RandomShape(**{**FAMILY_SHAPES["gemma3"], "softcap": 8.0})
    path = write_random_gguf(tmp_path / "capped.gguf", shape, "Q4_0")
    llama = LlamaBackend(path, n_ctx=256, max_branches=1, threads=1)
    int4 = Int4Backend(path, n_ctx=256, threads=1)
    try:
        prompt = llama.tokenize(TEXT)
        chain, expected = _greedy_chain(llama, prompt, 12)
        assert np.abs(expected).max() <= 8.0
        int4.prefill(prompt[:-1])
        ours = int4.evaluate(Block.chain(chain))
        worst = float((np.abs(ours - expected) / expected.std(axis=1, keepdims=True)).max())
        assert worst <= TOLERANCE, f"logits {worst:.3f} of a row's spread from llama.cpp's"
    finally:
        llama.close()
        int4.close()


@pytest.mark.parametrize("level", LEVELS_HERE)
@pytest.mark.parametrize("family", list(FAMILY_SHAPES))
def test_a_tree_block_is_its_paths_evaluated_alone(family_gguf, family, level) -> None:
    """At every level (below AVX-512 the whole forward is one C call): each row of a tree equals
    its root-to-node path evaluated one token at a time, bit for bit."""
    from specchat.backends.int4.backend import Int4Backend

    int4 = Int4Backend(family_gguf(family), n_ctx=256, threads=1, level=level)
    try:
        ids = int4.tokenize(TEXT)
        int4.prefill(ids[:4])
        tree = Block(tuple(ids[4:11]), (-1, 0, 1, 0, 3, 4, 1))
        rows = int4.evaluate(tree)
        for node in range(len(tree.tokens)):
            path, at = [], node
            while at >= 0:
                path.insert(0, tree.tokens[at])
                at = tree.parents[at]
            int4.rollback(4)
            for token in path:
                alone = int4.evaluate(Block.chain([token]))
                int4.commit([0])
            assert np.array_equal(alone[0], rows[node]), (family, node)
    finally:
        int4.close()


@pytest.mark.parametrize("family", list(FAMILY_SHAPES))
def test_each_family_answers_on_the_int4_runtime_and_is_offered_to_the_chooser(
    family_gguf, family
) -> None:
    from specchat.backends.registry import GGUF
    from specchat.backends.runtimes import candidates

    path = family_gguf(family)
    assert candidates(GGUF, path, "cpu") == ["int4", "llama"]
    ran = run_cli("ask", "--model", str(path), "--backend", "int4", "--max-tokens", "8", "Hi")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout and "Traceback" not in ran.stderr  # random weights: maybe only spaces


def test_a_sliding_window_holds_the_context_within_it(tmp_path) -> None:
    """Within a declared window every key is in sight, so attention is the full one there: the
    context is capped at the window instead of computing a different attention."""
    from benchmarks.random_gguf import RandomShape, write_random_gguf
    from specchat.backends.int4.backend import Int4Backend

    path = write_random_gguf(tmp_path / "w.gguf", RandomShape(arch="phi3", window=96))
    backend = Int4Backend(path, n_ctx=512, threads=1)
    try:
        assert backend.n_ctx == 96
    finally:
        backend.close()


def test_a_tensor_the_forward_would_skip_is_refused_in_one_line(tmp_path) -> None:
    """Phi-3's 128k files carry LongRoPE's factor tables: computing without them would give
    other logits, so the runtime refuses the file and the chooser leaves it to llama.cpp."""
    import gguf

    from benchmarks.random_gguf import RandomShape, write_random_gguf
    from specchat.backends.int4.backend import Int4Backend, unavailable_reason

    plain = write_random_gguf(tmp_path / "plain.gguf", RandomShape(arch="phi3"), "F32")
    reader = gguf.GGUFReader(plain)
    path = tmp_path / "longrope.gguf"
    writer = gguf.GGUFWriter(str(path), "phi3")
    for key, field in reader.fields.items():
        if not key.startswith("GGUF.") and key != "general.architecture":
            kind = field.types[0]
            item = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(key, field.contents(), kind, sub_type=item)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, np.array(tensor.data).reshape(tensor.shape[::-1]))
    writer.add_tensor("rope_factors_long.weight", np.ones(8, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert unavailable_reason(plain, "cpu") is None
    assert "LongRoPE" in unavailable_reason(path, "cpu")
    with pytest.raises(SpecchatError) as error:
        Int4Backend(path, threads=1)
    assert "rope_factors_long.weight" in str(error.value) and "\n" not in str(error.value)


def test_a_file_written_straight_in_blocks_runs_alike_on_both_runtimes(tmp_path) -> None:
    """benchmarks/scale.py's files (Q4_0 layers, a Q8_0 embedding, written without a float copy)
    are models both runtimes read, the head on int4's 8-bit path, not a float32 fallback."""
    from benchmarks.random_gguf import RandomShape, write_block_gguf
    from specchat.backends.int4.backend import Int4Backend
    from specchat.backends.llama import LlamaBackend

    path = write_block_gguf(tmp_path / "blocks.gguf", RandomShape(layers=2, dim=128, ffn=256))
    llama = LlamaBackend(path, n_ctx=256, max_branches=1, threads=1)
    int4 = Int4Backend(path, n_ctx=256, threads=1)
    try:
        assert int4.model.head.form == "int8" and int4.model.carriers() == {"4-bit": 8}
        ids = llama.tokenize(TEXT)
        expected = llama.evaluate(Block.chain(ids))
        ours = int4.evaluate(Block.chain(ids))
        scale = expected.std(axis=1, keepdims=True)
        assert float((np.abs(ours - expected) / scale).max()) <= TOLERANCE
    finally:
        llama.close()
        int4.close()


@pytest.mark.parametrize("family", ["gemma3", "qwen2"])
def test_a_steps_embedding_rows_are_the_prompts(family_gguf, family) -> None:
    """A decoding step's rows come from a cache, a long prompt's are dequantized together: the
    same rows either way, however often a token is met (Gemma scales them by √d after lookup)."""
    from specchat.backends.int4.backend import Int4Backend

    int4 = Int4Backend(family_gguf(family), n_ctx=256, threads=1)
    try:
        ids = (int4.tokenize(TEXT) * 6)[:100]  # every token met several times
        together = int4.model.embedded(ids)
        for _ in range(2):
            one_by_one = np.concatenate([int4.model.embedded([token]) for token in ids])
            assert np.array_equal(together, one_by_one)
    finally:
        int4.close()
