"""Random-weight GGUFs of a given shape and family (those `int4_families` declares), with the
bundled model's tokenizer and template.

A pass costs what its shapes cost, not what its weights say, and a parser meets the same bytes
whatever the weights are: so tests, the fuzzer (`benchmarks/fuzz_gguf.py`) and size benchmarks
use files written here instead of downloads. Weights are written as float32 and quantized by
llama.cpp's own quantizer, so the quant blocks are the ones real files carry.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specchat.errors import SpecchatError


@dataclass(frozen=True)
class RandomShape:
    layers: int = 2
    dim: int = 64
    ffn: int = 128
    heads: int = 4
    kv_heads: int = 2
    vocab: int | None = None  # None: the bundled tokenizer's size
    arch: str = "llama"  # a family of int4_families.FAMILIES
    head_dim: int | None = None  # None: dim / heads (qwen3's are wider)
    rope_scale: float = 0.0  # a RoPE scaling factor (0: none)
    rope_scaling: str = "linear"  # or "yarn" (original context: 2048)
    window: int = 0  # a declared sliding window (0: none)
    rope_freqs: bool = False  # Llama 3's per-pair frequency factors
    softcap: float = 0.0  # final logits soft-capped at this (gemma2/3 declare it; 0: none)
    attn_softcap: float = 0.0  # attention scores soft-capped at this (gemma2 declares it)


# llama.cpp's file types by the name people know them by
QUANT_TYPES = ("F32", "F16", "Q4_0", "Q4_1", "Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K")


def _tokenizer_fields(source: Path):
    """The bundled file's tokenizer and chat template, as (key, value, type, item type)."""
    import gguf

    reader = gguf.GGUFReader(source)
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            kind = field.types[0]
            item = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
            yield key, field.contents(), kind, item


def write_random_gguf(
    path: Path, shape: RandomShape = RandomShape(), quant: str = "Q4_0", seed: int = 0
) -> Path:
    """A GGUF of `shape` at `path` in `quant`. Matrices are drawn from N(0, 1/cols), so each
    layer's outputs keep the scale of its inputs and the logits spread as a trained model's do
    (a near tie is rare, so greedy comparisons say something); norms and biases vary around 1
    and 0, so a forward that skipped one would be caught."""
    import gguf

    if quant not in QUANT_TYPES:
        raise SpecchatError(f"unknown quant type {quant!r}: use one of {', '.join(QUANT_TYPES)}")
    rng = np.random.default_rng(seed)

    def tensor(name: str, dims: tuple[int, ...]) -> np.ndarray:
        if len(dims) == 2:
            return (rng.standard_normal(dims) / np.sqrt(dims[1])).astype(np.float32)
        spread = rng.standard_normal(dims) * 0.1
        return (spread if name.endswith(".bias") else 1.0 + spread).astype(np.float32)

    dense = Path(path).with_suffix(".f32.gguf") if quant != "F32" else Path(path)
    writer, vocab, parts = _started(dense, shape, gguf.LlamaFileType.ALL_F32)
    writer.add_tensor("token_embd.weight", rng.standard_normal((vocab, shape.dim), np.float32))
    if shape.rope_freqs:  # as Llama 3.1's: the low frequencies slowed down
        half = (shape.head_dim or shape.dim // shape.heads) // 2
        factors = np.where(np.arange(half) < half // 2, 1.0, 8.0)
        writer.add_tensor("rope_freqs.weight", factors.astype(np.float32))
    for i in range(shape.layers):
        for name, dims in parts.items():
            writer.add_tensor(f"blk.{i}.{name}", tensor(name, dims))
    writer.add_tensor("output_norm.weight", tensor("output_norm.weight", (shape.dim,)))
    if shape.arch == "phi3":  # llama.cpp's phi3 requires its own output weight
        writer.add_tensor("output.weight", tensor("output.weight", (vocab, shape.dim)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if quant == "F32":
        return dense
    try:
        quantize(dense, Path(path), quant)
    finally:
        dense.unlink(missing_ok=True)
    return Path(path)


def write_block_gguf(
    path: Path, shape: RandomShape, seed: int = 0, tokenizer: Path | None = None
) -> Path:
    """A GGUF of `shape` written straight in quant blocks, tensor by tensor, for sizes whose
    float32 weights would not fit in memory: random Q4_0 blocks in the layers and a Q8_0
    embedding (the tied head), as a Q4_0 file carries them. Only the pass costs mean anything.
    `tokenizer`: the GGUF whose tokenizer it takes (default: the bundled model's)."""
    import gguf

    rng = np.random.default_rng(seed)

    def blocks(rows: int, cols: int, codes: int, kind) -> np.ndarray:
        # a float16 scale of 1/sqrt(cols) / 8, then the codes: 16 nibble bytes or 32 int8s
        scale = np.full((rows, cols // 32, 1), 0.125 / np.sqrt(cols), np.float16).view(np.uint8)
        if kind == gguf.GGMLQuantizationType.Q8_0:  # -127..127, as llama.cpp's quantizer gives
            body = rng.integers(-127, 128, (rows, cols // 32, codes), np.int8).view(np.uint8)
        else:
            body = rng.integers(0, 256, (rows, cols // 32, codes), dtype=np.uint8)
        data = np.concatenate([scale, body], axis=2).reshape(rows, -1)
        return data, kind

    writer, vocab, parts = _started(Path(path), shape, gguf.LlamaFileType.MOSTLY_Q4_0, tokenizer)
    q8, q4 = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0
    data, kind = blocks(vocab, shape.dim, 32, q8)
    writer.add_tensor("token_embd.weight", data, raw_dtype=kind)
    for i in range(shape.layers):
        for name, dims in parts.items():
            if len(dims) == 1:
                writer.add_tensor(f"blk.{i}.{name}", np.ones(dims, np.float32))
            else:
                data, kind = blocks(*dims, 16, q4)
                writer.add_tensor(f"blk.{i}.{name}", data, raw_dtype=kind)
    writer.add_tensor("output_norm.weight", np.ones(shape.dim, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_vocab_gguf(path: Path, source: Path | None = None) -> Path:
    """A GGUF holding only `source`'s tokenizer and chat template (default: the bundled model's):
    a megabyte or two that travels where the model cannot (`benchmarks/gpu_check.py`), for
    `write_block_gguf` to give random weights real tokens."""
    import gguf

    from specchat.bundled import bundled_gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value, kind, item in _tokenizer_fields(source or bundled_gguf()):
        writer.add_key_value(key, value, kind, sub_type=item)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def _started(path: Path, shape: RandomShape, file_type, tokenizer: Path | None = None):
    """A writer for `path` with `shape`'s header and `tokenizer`'s tokens and template written
    (default: the bundled model's); the vocabulary size; each layer's tensors and their shapes
    (`int4_families.layer_tensors`)."""
    import gguf

    from specchat.backends.int4.families import FAMILIES, layer_tensors
    from specchat.bundled import bundled_gguf

    if shape.arch not in FAMILIES:
        raise SpecchatError(f"unknown family {shape.arch!r}: use one of {', '.join(FAMILIES)}")
    fields = list(_tokenizer_fields(tokenizer or bundled_gguf()))
    vocab = shape.vocab or next(len(v) for k, v, *_ in fields if k == "tokenizer.ggml.tokens")
    head_dim = shape.head_dim or shape.dim // shape.heads
    writer = gguf.GGUFWriter(str(path), shape.arch)
    writer.add_block_count(shape.layers)
    writer.add_context_length(2048)
    writer.add_embedding_length(shape.dim)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    if shape.head_dim:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    if shape.rope_scale:
        writer.add_rope_scaling_type(gguf.RopeScalingType(shape.rope_scaling))
        writer.add_rope_scaling_factor(shape.rope_scale)
        if shape.rope_scaling == "yarn":
            writer.add_rope_scaling_orig_ctx_len(2048)
    if shape.window:
        writer.add_sliding_window(shape.window)
    if shape.softcap:
        writer.add_final_logit_softcapping(shape.softcap)
    if shape.attn_softcap:
        writer.add_attn_logit_softcapping(shape.attn_softcap)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(file_type)
    for key, value, kind, item in fields:
        writer.add_key_value(key, value, kind, sub_type=item)
    parts = layer_tensors(
        FAMILIES[shape.arch], dim=shape.dim, ffn=shape.ffn, q=shape.heads * head_dim,
        kv=shape.kv_heads * head_dim, head_dim=head_dim,
    )  # fmt: skip
    return writer, vocab, parts


def quantize(source: Path, target: Path, quant: str) -> None:
    """`source` quantized by llama.cpp's own quantizer to `quant` (a requantized file too)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{quant}")
    params.allow_requantize = True
    rc = llama_cpp.llama_model_quantize(
        str(source).encode(), str(target).encode(), ctypes.byref(params)
    )
    if rc != 0:
        raise SpecchatError(f"llama.cpp could not quantize {source.name} to {quant}")


def field_spots(data: bytes) -> list[tuple[int, str]]:
    """Where a well-formed GGUF's parser-steering numbers sit, for mutating them: (offset, kind)
    of every count, length, dim, type and offset in the header and tensor table, kind u32 / u64 (a
    metadata count or length), name / ndims / dim / ttype / offset (a tensor's), type (a value
    type), v1..v8 (a scalar value of that many bytes); last, (the end of the tensors, "end")."""
    spots: list[tuple[int, str]] = [(4, "u32"), (8, "u64"), (16, "u64")]
    at = 24
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def value(kind: int, at: int, deep: bool) -> int:
        if kind in sizes:
            if deep:
                spots.append((at, f"v{sizes[kind]}"))
            return at + sizes[kind]
        if kind == 8:
            if deep:
                spots.append((at, "u64"))
            return at + 8 + struct.unpack_from("<Q", data, at)[0]
        if kind == 9:
            item, count = struct.unpack_from("<IQ", data, at)
            spots.extend([(at, "type"), (at + 4, "u64")])
            at += 12
            for index in range(count):
                at = value(item, at, deep and index < 4)
            return at
        raise ValueError(kind)

    for _ in range(n_kv):
        spots.append((at, "u64"))
        at += 8 + struct.unpack_from("<Q", data, at)[0]
        kind = struct.unpack_from("<I", data, at)[0]
        spots.append((at, "type"))
        at = value(kind, at + 4, True)
    for _ in range(n_tensors):
        spots.append((at, "name"))
        at += 8 + struct.unpack_from("<Q", data, at)[0]
        dims = struct.unpack_from("<I", data, at)[0]
        spots.append((at, "ndims"))
        at += 4
        for _ in range(dims):
            spots.append((at, "dim"))
            at += 8
        spots.extend([(at, "ttype"), (at + 4, "offset")])
        at += 12
    spots.append((at, "end"))  # where the tensor table ends
    return spots


SPOT_BYTES = {"u64": 8, "name": 8, "dim": 8, "offset": 8, "u32": 4, "ndims": 4, "type": 4}
SPOT_BYTES.update({"ttype": 4, "v1": 1, "v2": 2, "v4": 4, "v8": 8})
