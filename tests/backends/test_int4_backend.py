"""What only the int4 runtime does: carry a GGUF file's own weights (4-bit blocks repacked, other
types dequantized once), agree with llama.cpp on the same file, and refuse what it cannot run in
one line. The Backend contract itself (bitwise blocks, trees, commit, rollback) is
test_contract.py's.

Copies of the bundled model in other quant types are made with llama.cpp's own quantizer.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from specchat import cpu
from specchat.backends.base import Block, ChatMessage
from specchat.backends.gguf.tensors import Factored, GGUFTensors, GroupedInt8, Nibbles
from specchat.backends.int4.kernels import kernels
from specchat.backends.int4.linear import RowsLinear
from specchat.errors import SpecchatError
from specchat.prompting import chat_prompt_ids

# llama.cpp's logits and ours differ by rounding (both quantize a matmul's input to 8 bits per 32,
# we also keep bf16 between the matmuls and sum in another order): measured over 8 prompts x 48 greedy tokens on four files, the
# two picked different tokens only where llama.cpp's top two were within 0.37 of each other.
NEAR_TIE = 0.75
# the instruction-set levels this machine runs: its own and every one below it
LEVELS_HERE = cpu.levels_here()


@pytest.fixture(scope="session")
def quantized(tmp_path_factory: pytest.TempPathFactory, bundled_gguf: Path) -> dict[str, Path]:
    """The bundled model requantized by llama.cpp: Q4_0, Q4_K_M (mostly Q5_0, Q6_K and Q8_0 on
    this model, whose rows of 576 are no multiple of 256), Q5_1, Q5_K_M, Q8_0, and Q2_K (which
    brings Q3_K)."""
    from benchmarks.random_gguf import quantize

    folder = tmp_path_factory.mktemp("quantized")
    paths = {}
    for name in ("Q4_0", "Q4_K_M", "Q8_0", "Q2_K", "Q5_1", "Q5_K_M"):
        paths[name] = folder / f"smollm2-{name}.gguf"
        quantize(bundled_gguf, paths[name], name)
    return paths


def model_file(name: str, bundled_gguf: Path, quantized: dict[str, Path]) -> Path:
    return bundled_gguf if name == "Q4_1" else quantized[name]


def gguf_dequantized(tensors: GGUFTensors, name: str) -> np.ndarray:
    """The gguf package's own dequantization of a tensor, as [rows, cols] float32."""
    import gguf

    tensor = tensors._tensor(name)
    values = gguf.quants.dequantize(np.asarray(tensor.data), tensor.tensor_type)
    return values.reshape(tensors.shape(name)).astype(np.float32)


# -- weights --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "file,kind",
    [("Q4_1", "Q4_1"), ("Q4_0", "Q4_0"), ("Q4_K_M", "Q4_K")],
    ids=["Q4_1", "Q4_0", "Q4_K"],
)
def test_int4_blocks_are_the_files_weights(bundled_gguf, quantized, file, kind) -> None:
    """Codes, scales and zeros read straight from the 4-bit blocks give gguf's dequantized
    weights bit for bit, for every 4-bit tensor of the file."""
    tensors = GGUFTensors(model_file(file, bundled_gguf, quantized))
    names = [n for n in tensors._tensors if tensors.is_int4(n) and tensors.type_name(n) == kind]
    assert names
    for name in names:
        blocks = tensors.int4_blocks(name)
        assert blocks.codes.max() <= 15
        assert np.array_equal(blocks.dequantize(), gguf_dequantized(tensors, name)), name


@pytest.mark.parametrize("file", ["Q4_1", "Q4_K_M"])  # token_embd Q8_0, and Q6_K
def test_embedding_rows_are_gguf_s_own(bundled_gguf, quantized, file) -> None:
    """The embedding rows a decoding step looks up (Q8_0's read without gguf's generic calls)
    are gguf's dequantized rows bit for bit."""
    tensors = GGUFTensors(model_file(file, bundled_gguf, quantized))
    rows = np.asarray([0, 17, 4_000, tensors.shape("token_embd.weight")[0] - 1])
    whole = gguf_dequantized(tensors, "token_embd.weight")
    assert np.array_equal(tensors.dense_rows("token_embd.weight", rows), whole[rows])


@pytest.mark.parametrize("level", LEVELS_HERE)
@pytest.mark.parametrize("file", ["Q4_1", "Q4_0", "Q4_K_M"])
def test_four_bit_rows_read_eight_at_a_time_are_the_files_weights(
    bundled_gguf, quantized, file, level
) -> None:
    """Below AVX-512 the 4-bit weights are laid out eight rows to a vector: read back through an
    identity matrix (each one-hot row rounds to 8 bits exactly), every weight of a 37-row slice
    (a partial block of eight at the end) comes back in its place, within float32 roundings."""
    tensors = GGUFTensors(model_file(file, bundled_gguf, quantized))
    name = next(n for n in tensors._tensors if tensors.is_int4(n))
    blocks = tensors.int4_blocks(name)
    exact = gguf_dequantized(tensors, name)[:37]
    nibbles = blocks.nibbles()
    part = Nibbles(nibbles.packed[:37], nibbles.scales[:37], nibbles.zeros[:37])
    cols = exact.shape[1]
    with torch.inference_mode():
        seen = RowsLinear(part, float32_out=True, library=kernels(level))(torch.eye(cols))
    step = np.repeat(np.abs(part.scales), 32, axis=1)
    assert seen.shape == (cols, 37)
    assert np.allclose(seen.T.numpy(), exact, rtol=1e-6, atol=1e-5 * step.max())
    assert np.abs(seen.T.numpy() - exact).max() < 0.01 * step[step > 0].min()


@pytest.mark.parametrize("level", LEVELS_HERE)
def test_four_bit_rows_are_the_same_bits_in_a_call_of_any_number_of_tokens(
    bundled_gguf, level
) -> None:
    """A call's tokens are read tile by tile (quantize.h: 4 or 8 a tile, the last one short):
    each token's row of the bundled model's 4-bit weights is the same bits alone or in a call of
    2 to 21 tokens (whole tiles, a short last one, several), for 37 rows (an odd last block of
    eight, as AVX-512 reads them in pairs, and a partial one) and 40."""
    tensors = GGUFTensors(bundled_gguf)
    name = next(n for n in tensors._tensors if tensors.is_int4(n))
    full = tensors.int4_blocks(name).nibbles()
    x = torch.randn(21, full.packed.shape[1] * 2, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        for rows in (37, 40):
            part = Nibbles(full.packed[:rows], full.scales[:rows], full.zeros[:rows])
            linear = RowsLinear(part, float32_out=True, library=kernels(level))
            alone = [linear(x[i : i + 1])[0] for i in range(len(x))]
            for m in (2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 21):
                together = linear(x[:m])
                assert all(torch.equal(together[i], alone[i]) for i in range(m)), (rows, m)


@pytest.mark.parametrize("level", LEVELS_HERE)
@pytest.mark.parametrize(
    "file,kind",
    [
        ("Q4_K_M", "Q5_0"),
        ("Q4_K_M", "Q6_K"),
        ("Q8_0", "Q8_0"),
        ("Q5_1", "Q5_1"),
        ("Q5_K_M", "Q5_K"),
    ],
)
def test_other_types_are_carried_as_the_files_weights(quantized, file, kind, level) -> None:
    """Types without 4-bit blocks become int8 codes with their blocks' scales (and zeros), which
    give gguf's dequantized weights bit for bit; the C matmul multiplies by exactly those (read
    back through an identity matrix: in float32 as the head runs, rounded once to bf16 as a layer
    runs)."""
    tensors = GGUFTensors(quantized[file])
    name = next(n for n in tensors._tensors if tensors.type_name(n) == kind and "blk." in n)
    exact = gguf_dequantized(tensors, name)
    assert np.array_equal(tensors.dense(name), exact)
    assert np.array_equal(tensors.dense_rows(name, np.array([3, 1])), exact[[3, 1]])
    grouped = tensors.grouped_int8(name)
    assert grouped is not None and np.array_equal(grouped.dequantize(), exact)
    for other in (n for n in tensors._tensors if tensors.type_name(n) == kind and n != name):
        codes = tensors.grouped_int8(other)  # the codes as read from their bits, every tensor
        assert codes is not None and np.array_equal(
            codes.dequantize(), gguf_dequantized(tensors, other)
        ), other
    cols = exact.shape[1]
    with torch.inference_mode():
        linear = RowsLinear(grouped, float32_out=True, library=kernels(level))
        head = linear(torch.eye(cols))
        layer = RowsLinear(grouped, library=kernels(level))(torch.eye(cols, dtype=torch.bfloat16))
        dense = RowsLinear(exact, float32_out=True, library=kernels(level))(torch.eye(cols))
    assert torch.equal(dense.T, torch.from_numpy(exact))
    # x rounded to 8 bits: a one-hot row is exactly 127 times its scale 1/127, so each weight
    # comes back within a few float32 roundings of the file's (a zero's term is one more)
    assert linear.form == "int8"
    step = np.abs(grouped.scales).max()
    assert np.allclose(head.T.numpy(), exact, rtol=4e-7, atol=1e-6 * step)
    assert np.allclose(layer.T.float().numpy(), exact, rtol=2.0**-8, atol=1e-6 * step)


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K", "Q5_K"])
def test_k_quant_scales_read_as_the_file_stores_them_give_the_float32_scales_bits(
    quantized, kind
) -> None:
    """The K-quants' scales (and zeros) are read as the file stores them, a float16 factor per
    super-block times a small integer per group (a fifth fewer bytes a token at 1.7B): every
    level gives the bits the same weights give with float32 scales and zeros, for a slice of 37
    rows (a partial block of eight) and for each token alone or beside five others."""
    tensors = GGUFTensors(quantized["Q5_K_M" if kind == "Q5_K" else "Q4_K_M"])
    name = next(n for n in tensors._tensors if tensors.type_name(n) == kind and "blk." in n)
    rows = slice(0, 37)
    if kind == "Q4_K":
        full = tensors.int4_blocks(name).nibbles()
        plain = Nibbles(full.packed[rows], full.scales[rows], full.zeros[rows])
        factored = Nibbles(
            *dataclasses.astuple(plain)[:3], tuple(part_rows(f, rows) for f in full.factored)
        )
    else:
        full = tensors.grouped_int8(name)
        zeros = None if full.zeros is None else full.zeros[rows]
        plain = dataclasses.replace(
            full, codes=full.codes[rows], scales=full.scales[rows], zeros=zeros, factored=None
        )
        parts = tuple(None if f is None else part_rows(f, rows) for f in full.factored)
        factored = dataclasses.replace(plain, factored=parts)
    x = torch.from_numpy(np.random.default_rng(3).standard_normal((6, plain.shape[1])))
    x = x.to(torch.bfloat16)
    with torch.inference_mode():
        for level in LEVELS_HERE:
            as_stored = RowsLinear(factored, library=kernels(level))
            as_float32 = RowsLinear(plain, library=kernels(level))
            assert as_stored.scale_form > 1 and as_float32.scale_form == 0
            together = as_stored(x)
            assert together.shape == (6, 37)
            assert torch.equal(together, as_float32(x)), level
            alone = torch.cat([as_stored(x[i : i + 1]) for i in range(len(x))])
            assert torch.equal(together, alone), level


@pytest.mark.parametrize(
    "file,kind", [("Q4_K_M", "Q5_0"), ("Q5_1", "Q5_1"), ("Q5_K_M", "Q5_K")], ids=str
)
def test_five_bit_codes_give_the_int8_codes_bits_from_five_eighths_of_the_bytes(
    quantized, file, kind
) -> None:
    """Q5_0, Q5_1 and Q5_K run as 5-bit codes (the 4-bit tile and a plane of fifth bits), as
    llama.cpp reads them, where int8 codes took a byte a weight: for a slice of 37 rows (a partial
    block of eight), every level gives the plain C's bits, each token's the same alone or beside
    five others. Q5_1's and Q5_K's are the int8 codes' bits; Q5_0's codes shift by 16 and take a
    zero of -16 * scale (as Q4_0's -8 * scale), the same weights summed in another order."""
    tensors = GGUFTensors(quantized[file])
    name = next(n for n in tensors._tensors if tensors.type_name(n) == kind and "blk." in n)
    full = tensors.grouped_int8(name)
    rows = slice(0, 37)
    factored = full.factored and tuple(
        None if f is None else part_rows(f, rows) for f in full.factored
    )
    grouped = dataclasses.replace(
        full,
        codes=full.codes[rows],
        scales=full.scales[rows],
        zeros=None if full.zeros is None else full.zeros[rows],
        factored=factored,
    )
    x = torch.from_numpy(np.random.default_rng(5).standard_normal((6, grouped.shape[1])))
    x = x.to(torch.bfloat16)
    results = {}
    with torch.inference_mode():
        for level in LEVELS_HERE:
            five = RowsLinear(grouped.five_bits(), float32_out=True, library=kernels(level))
            int8 = RowsLinear(grouped, float32_out=True, library=kernels(level))
            assert (five.form, int8.form) == ("5-bit", "int8")
            assert five.codes.nbytes * 8 == int8.codes.nbytes * 5
            together = results[level] = five(x)
            if kind == "Q5_0":
                assert torch.allclose(together, int8(x), rtol=1e-5, atol=1e-4), level
            else:
                assert torch.equal(together, int8(x)), level
            alone = torch.cat([five(x[i : i + 1]) for i in range(len(x))])
            assert torch.equal(together, alone), level
    for level in LEVELS_HERE[1:]:
        assert torch.equal(results[level], results["generic"]), level


def test_five_bit_sums_at_their_largest_do_not_overflow() -> None:
    """Every code 31 against x at its largest (each rounds to 127): the sums the AVX2 tile
    holds in 16-bit lanes are at their largest. Every level gives the plain C's bits, and the
    rows their float64 values."""
    rng = np.random.default_rng(11)
    codes = np.full((16, 256), 31, dtype=np.int8)
    codes[8:] = rng.integers(0, 32, (8, 256))
    scales = rng.uniform(0.5, 1.0, (16, 8)).astype(np.float16).astype(np.float32)
    zeros = -(rng.uniform(0, 8, (16, 8)).astype(np.float16).astype(np.float32))
    grouped = GroupedInt8(codes, scales, zeros, 32)
    x = torch.ones((5, 256), dtype=torch.float32)
    x[1] = -1.0
    expected = x.double().numpy() @ grouped.dequantize().astype(np.float64).T
    results = {}
    with torch.inference_mode():
        for level in LEVELS_HERE:
            linear = RowsLinear(grouped.five_bits(), float32_out=True, library=kernels(level))
            results[level] = linear(x)
            assert np.allclose(results[level].numpy(), expected, rtol=1e-6), level
    for level in LEVELS_HERE[1:]:
        assert torch.equal(results[level], results["generic"]), level


def part_rows(factored: Factored, rows: slice) -> Factored:
    return Factored(factored.factors[rows], factored.multipliers[rows])


@pytest.mark.parametrize("rows", [None, 37])
@pytest.mark.parametrize("kind", ["Q6_K", "Q8_0"])
def test_int8_groups_of_16_and_32_give_the_same_bits_at_every_level_and_in_any_block(
    quantized, kind, rows
) -> None:
    """Q6_K's groups of 16 run the interleaved int8 kernel as Q8_0's groups of 32 do (two
    scales a group of 32): every level gives the plain C bits, and a token's row is the same
    whether it is computed alone or beside five others — for a whole weight (pairs of blocks of
    eight, as AVX-512 reads them) and for 37 rows (an odd last block, and a partial one)."""
    tensors = GGUFTensors(quantized["Q4_K_M" if kind == "Q6_K" else "Q8_0"])
    name = next(n for n in tensors._tensors if tensors.type_name(n) == kind and "blk." in n)
    grouped = tensors.grouped_int8(name)
    if rows is not None:
        part = slice(0, rows)
        grouped = dataclasses.replace(
            grouped,
            codes=grouped.codes[part],
            scales=grouped.scales[part],
            zeros=None if grouped.zeros is None else grouped.zeros[part],
            factored=grouped.factored
            and tuple(None if f is None else part_rows(f, part) for f in grouped.factored),
        )
    x = torch.from_numpy(np.random.default_rng(7).standard_normal((6, grouped.shape[1])))
    x = x.to(torch.bfloat16)
    results = {}
    with torch.inference_mode():
        for level in LEVELS_HERE:
            linear = RowsLinear(grouped, library=kernels(level))
            assert linear.form == "int8"
            together = linear(x)
            alone = torch.cat([linear(x[i : i + 1]) for i in range(len(x))])
            assert torch.equal(together, alone), level
            results[level] = together
    for level in LEVELS_HERE[1:]:
        assert torch.equal(results[level], results["generic"]), level


@pytest.mark.parametrize("threads", [1, 2])
def test_c_matmul_rows_do_not_depend_on_the_rows_beside_them(int4_backend, threads) -> None:
    """The bundled model's LM head (its tied Q8_0 embedding, as int8 codes and scales): each
    row's logits are the same bits in a call of 1 to 19 rows (chunks of 8 and their tails)."""
    head = int4_backend.model.head
    assert head.codes is not None and head.float32_out
    head.threads = threads
    x = torch.randn(19, head.in_features, generator=torch.Generator().manual_seed(0))
    try:
        with torch.inference_mode():
            alone = [head(x[i : i + 1])[0] for i in range(19)]
            for rows in (2, 5, 8, 9, 19):
                together = head(x[:rows])
                assert all(torch.equal(together[i], alone[i]) for i in range(rows)), rows
    finally:
        head.threads = int4_backend.model.threads


# -- the model ------------------------------------------------------------------------------------


def teacher_forced_disagreements(llama, int4, prompt: str, tokens: int) -> list[tuple[int, float]]:
    """llama.cpp's greedy answer, evaluated on int4 as one chain: (position, llama.cpp's top-two
    margin) wherever int4's top token differs."""
    ids = chat_prompt_ids(llama, [ChatMessage("user", prompt)])
    llama.rollback(0)
    llama.prefill(ids[:-1])
    answer, margins = [ids[-1]], []
    for _ in range(tokens):
        logits = llama.evaluate(Block.chain([answer[-1]]))[0]
        llama.commit([0])
        top_two = np.sort(logits)[-2:]
        margins.append(float(top_two[1] - top_two[0]))
        answer.append(int(np.argmax(logits)))
    int4.rollback(0)
    int4.prefill(ids[:-1])
    ours = int4.evaluate(Block.chain(answer[:-1])).argmax(axis=1)
    return [(i, margins[i]) for i in range(tokens) if ours[i] != answer[i + 1]]


@pytest.mark.parametrize(
    "file,carriers",
    [
        ("Q4_1", {"4-bit"}),
        ("Q4_0", {"4-bit"}),
        ("Q4_K_M", {"4-bit", "5-bit", "int8"}),
        ("Q8_0", {"int8"}),
        ("Q5_1", {"5-bit"}),
        ("Q5_K_M", {"5-bit", "int8"}),
    ],
)
def test_greedy_agrees_with_llama_cpp_outside_near_ties(
    bundled_gguf, quantized, int4_backend, file, carriers
) -> None:
    """At the machine's own level, each file's weights in the forms it stores them."""
    from specchat.backends.int4.backend import Int4Backend
    from specchat.backends.llama import LlamaBackend

    path = model_file(file, bundled_gguf, quantized)
    llama = LlamaBackend(path, n_ctx=512, max_branches=1, threads=1)
    int4 = int4_backend if file == "Q4_1" else Int4Backend(path, n_ctx=512, threads=1)
    try:
        assert set(int4.model.carriers()) == carriers
        assert int4.exactness().bitwise
        for prompt in ("Give me three tips for sleeping well.", "Write a haiku about autumn."):
            differ = teacher_forced_disagreements(llama, int4, prompt, 32)
            assert all(margin < NEAR_TIE for _, margin in differ), (prompt, differ)
    finally:
        llama.close()
        if int4 is not int4_backend:
            int4.close()
        int4_backend.rollback(0)


def test_rows_are_exact_whatever_shares_the_pass(int4_backend) -> None:
    """A wide tree (twelve children of one root) and a long chain, on two threads as well: each
    row equals its path evaluated alone, bit for bit."""
    backend = int4_backend
    ids = chat_prompt_ids(backend, [ChatMessage("user", "Name twelve colours.")])
    words = backend.tokenize(
        " red green blue yellow orange purple pink brown black white grey teal"
    )
    for threads in (1, 2):
        backend.model.threads = threads
        try:
            backend.rollback(0)
            backend.prefill(ids[:-1])
            n = backend.n_committed
            wide = Block((ids[-1], *words[:12]), (-1, *[0] * 12))
            tree = backend.evaluate(wide)
            for child in range(1, 13):
                backend.rollback(n)
                alone = backend.evaluate(Block.chain([ids[-1], wide.tokens[child]]))
                assert np.array_equal(alone[1], tree[child]), (threads, child)
                assert np.array_equal(alone[0], tree[0])
            backend.rollback(n)
            chain = [ids[-1], *(words * 3)[:40]]
            block = backend.evaluate(Block.chain(chain))
            backend.rollback(n)
            for i, token in enumerate(chain[:8]):
                one = backend.evaluate(Block.chain([token]))
                backend.commit([0])
                assert np.array_equal(one[0], block[i]), (threads, i)
        finally:
            backend.model.threads = 1
            backend.rollback(0)


# -- what it refuses ------------------------------------------------------------------------------


def test_another_architecture_is_one_line(tmp_path: Path) -> None:
    import gguf

    from specchat.backends.int4.backend import Int4Backend

    path = tmp_path / "gpt2.gguf"
    writer = gguf.GGUFWriter(str(path), "gpt2")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(SpecchatError) as error:
        Int4Backend(path, threads=1)
    message = str(error.value)
    assert "\n" not in message and "'gpt2'" in message and "llama, qwen2, qwen3, phi3" in message


def test_an_unsupported_quant_type_is_one_line(quantized) -> None:
    from specchat.backends.int4.backend import Int4Backend

    with pytest.raises(SpecchatError) as error:
        Int4Backend(quantized["Q2_K"], threads=1)
    message = str(error.value)
    assert "\n" not in message and "Q3_K" in message


def test_cpu_only(bundled_gguf) -> None:
    from specchat.backends.int4.backend import Int4Backend

    with pytest.raises(SpecchatError, match="CPU"):
        Int4Backend(bundled_gguf, device="cuda")


def test_load_model_offers_the_int4_runtime_for_a_gguf(tmp_path: Path) -> None:
    from specchat.models import LoadOptions, load_model

    backend = load_model(None, LoadOptions(backend="int4", threads=1, n_ctx=256))
    try:
        assert backend.name == "int4" and backend.n_ctx == 256
    finally:
        backend.close()
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SpecchatError, match="int4 backend needs a GGUF"):
        load_model(str(tmp_path), LoadOptions(backend="int4"))
