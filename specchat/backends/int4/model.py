"""A lean transformer forward (Llama and the families `families.py` declares) over a GGUF file's
own 4-bit weights, with a static KV cache.

Why it is shaped this way: on a CPU a speculative block is cheap only if the k-row matmuls cost
little more than 1-row ones, and a decoder stays exactly greedy only if a block's rows equal
one-token passes. Every kernel on the path computes an output row by one fixed sum whatever the
number of rows, so a block row equals the same token evaluated alone.

The whole forward (per layer four matmuls, attention, norms and the activation) is one C call (`forward`, c/forward.c) at every instruction-set level
(`specchat.cpu`): the file's nibbles (and Q8_0 codes) meet x rounded to 8 bits per 32 values,
summed in integers as llama.cpp does, each weight row read once for every token of the block
(AVX-512 VNNI, AVX2 and plain C compute the same bits). torch's int4 kernel carried the 4-bit
weights on AVX-512 until the VNNI kernel cost less at one token and much less at four
(docs/bench-log.md); a Python loop over the layers cost more than a small layer's arithmetic.

Numbers: the residual stream is float32; matmul inputs and outputs are bf16 (the kernel's only
fast type); keys are cached after RoPE in float32 and values in bf16 (what the projection gave);
the LM head's output is float32, so logits are float32 too.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, replace

import numpy as np

from specchat.backends.gguf.tensors import (
    GGUFTensors,
)
from specchat.backends.int4.c_structs import (
    CLayer,
    CModel,
    CPassGuesses,
    HeadOps,
    linear_weights,
)
from specchat.backends.int4.families import (
    gate_up_names,
    qkv_names,
)
from specchat.backends.int4.kernels import Kernels, kernels
from specchat.backends.int4.linear import (
    LaidOut,
    Projection,
    RowsLinear,
    linear_for,
    rows_linear,
)
from specchat.backends.int4.packed import PackedWeights
from specchat.backends.int4.rope import rope_tables
from specchat.backends.int4.shape import ModelShape, check_shapes
from specchat.heap import give_back_freed

# A decoding step's embedding rows come from a cache this large (blocks this wide or narrower);
# a prompt's hundreds of rows are dequantized at once.
_EMBED_CACHE_BYTES = 64 << 20
_EMBED_CACHED_BELOW = 64


# values are cached in bf16, which numpy lacks: the C reads and writes their bits
_BFLOAT16_BITS = np.uint16


def _float32(values: np.ndarray) -> np.ndarray:
    """A norm's weights (or a bias) as the C reads them."""
    return np.ascontiguousarray(values, dtype=np.float32)


@functools.lru_cache(maxsize=64)
def _seen_counts(depths: tuple[int, ...]) -> np.ndarray:
    """How many block rows each row attends to (its depth + 1), kept for the blocks decoding
    meets again and again (read-only)."""
    counts = np.asarray(depths, dtype=np.int32) + 1
    counts.flags.writeable = False
    return counts


@dataclass
class Layer:
    attn_norm: np.ndarray
    qkv: Projection
    output: RowsLinear
    ffn_norm: np.ndarray
    gate_up: Projection
    down: RowsLinear
    ops: HeadOps
    held: list[np.ndarray]  # the arrays `ops` and the post norms point into
    post_norms: tuple[int | None, int | None] = (None, None)  # Gemma's, after the sublayers
    local: bool = False  # Gemma 3's local layers: a sliding window and the local RoPE
    rope: bool = True  # False: q and k unrotated (SmolLM3's every fourth layer)

    @classmethod
    def read(
        cls, tensors: GGUFTensors, shape: ModelShape, i: int, library: Kernels, laid: LaidOut
    ) -> Layer:
        blk, family = f"blk.{i}.", shape.family
        held = []

        def vector(name: str) -> int:
            held.append(_float32(tensors.dense(blk + name)))
            return held[-1].ctypes.data

        bias = None
        if family.qkv_bias:
            parts = [tensors.dense(blk + f"attn_{p}.bias") for p in "qkv"]
            held.append(_float32(np.concatenate(parts)))
            bias = held[-1].ctypes.data
        norms = (None, None)
        if family.qk_norm:
            norms = (vector("attn_q_norm.weight"), vector("attn_k_norm.weight"))
        ops = HeadOps(bias, *norms, shape.norm_eps, int(family.neox_rope))
        post_norms = (None, None)
        if family.post_norms:
            post_norms = (vector("post_attention_norm.weight"), vector("post_ffw_norm.weight"))
        qkv = [blk + name for name in qkv_names(family)]
        gate_up = [blk + name for name in gate_up_names(family)]
        output, down = blk + "attn_output.weight", blk + "ffn_down.weight"
        return cls(
            attn_norm=_float32(tensors.dense(blk + "attn_norm.weight")),
            qkv=Projection(tensors, qkv, library, laid),
            output=laid(output, functools.partial(linear_for, tensors, output, library)),
            ffn_norm=_float32(tensors.dense(blk + "ffn_norm.weight")),
            gate_up=Projection(tensors, gate_up, library, laid),
            down=laid(down, functools.partial(linear_for, tensors, down, library)),
            ops=ops,
            held=held,
            post_norms=post_norms,
            local=shape.is_local(i),
            rope=family.uses_rope(i),
        )


class Int4Model:
    """The model, its static KV cache ([layers, kv_heads, slots, head_dim]) and one forward.

    Cache slots: the committed prefix from 0, then the rows of the block being evaluated, so a
    block may be wider than the room left for its depth; `max_block` bounds its width.
    """

    def __init__(
        self,
        tensors: GGUFTensors,
        *,
        n_ctx: int,
        max_block: int = 512,
        threads: int = 2,
        level: str | None = None,
        progress=None,
    ) -> None:
        shape = ModelShape.read(tensors)
        self._kernels = library = kernels(level)
        self.shape = shape
        self.tensors = tensors
        self.n_ctx = n_ctx
        self.max_block = max_block
        self._threads = threads
        self.head_name = "output.weight" if "output.weight" in tensors else "token_embd.weight"
        check_shapes(tensors, shape, self.head_name)
        packed = PackedWeights(tensors.path, library)
        self.layers: list[Layer] = []
        for i in range(shape.layers):
            if progress and i % 10 == 0 and not packed.found:
                progress(f"packing layer {i + 1} of {shape.layers}")
            self.layers.append(Layer.read(tensors, shape, i, library, packed.linear))
        self.final_norm = _float32(tensors.dense("output_norm.weight"))
        if progress and not packed.found:
            progress("preparing the output layer")
        # the LM head in float32 on the file's exact weights: float32 logits
        self.head = packed.linear(
            self.head_name,
            functools.partial(rows_linear, tensors, self.head_name, library, float32_out=True),
        )
        if not packed.found:
            if progress:
                progress("keeping the packed weights for the next start")
            packed.keep()
            give_back_freed()  # what laying them out took and freed
        factors = tensors.dense("rope_freqs.weight") if "rope_freqs.weight" in tensors else None
        self.cos, self.sin = rope_tables(shape, n_ctx, factors)
        self.local_cos, self.local_sin = self.cos, self.sin
        if shape.local_window and shape.local_rope_base:  # Gemma 3's: their own base, unscaled
            local = replace(shape, rope_base=shape.local_rope_base, rope_freq_scale=1.0)
            self.local_cos, self.local_sin = rope_tables(
                replace(local, rope_scaling="none"), n_ctx, None
            )
        self.slots = n_ctx + max_block
        # keys transposed ([.., head_dim, slots]) so that scores vectorise over keys, in float16
        # as llama.cpp keeps them: float32 keys were a third of what a pass read behind 768 tokens
        kv = (shape.layers, shape.kv_heads)
        self.k_cache = np.zeros((*kv, shape.head_dim, self.slots), dtype=np.float16)
        self.v_cache = np.zeros((*kv, self.slots, shape.head_dim), dtype=_BFLOAT16_BITS)
        self._scale = shape.scale
        self._embedding_rows: dict[int, np.ndarray] = {}
        self._embedding_rows_kept = max(1, _EMBED_CACHE_BYTES // (4 * shape.dim))
        # the residual stream after the last layer, per row of the last pass with logits: the
        # head's input before its norm (what a draft head reads: Int4Backend.draft_features)
        self.last_residual: np.ndarray | None = None
        # a draft head riding the next pass with logits (`ride`), and what the last pass guessed
        # for its first `guessed_rows` rows: each row's greedy token, the guess after it, and
        # how sure the head was
        self._rider: CPassGuesses | None = None
        self._riding = False
        self.guessed_rows = 0
        self.guess_tokens = np.zeros(max_block, dtype=np.int32)
        self._chain_next = np.zeros(max_block, dtype=np.int32)
        self.guesses = np.zeros(max_block, dtype=np.int32)
        self.guess_sure = np.zeros(max_block, dtype=np.float32)
        self.threads = threads
        self._whole = whole_model(self)

    @property
    def level(self) -> str:
        """The instruction-set level the kernels were built for."""
        return self._kernels.level

    @property
    def threads(self) -> int:
        return self._threads

    @threads.setter
    def threads(self, threads: int) -> None:
        """Threads of the C kernels."""
        self._threads = threads
        for linear in self._rows_linears():
            linear.threads = threads

    def _rows_linears(self) -> list[RowsLinear]:
        found = [self.head] if hasattr(self, "head") else []
        for layer in self.layers:
            for linear in [*layer.qkv.linears, layer.output, *layer.gate_up.linears, layer.down]:
                if isinstance(linear, RowsLinear):
                    found.append(linear)
        return found

    def carriers(self) -> dict[str, int]:
        """How many layer weights each form holds ("4-bit", "int8", "float32"): what a file's
        types came to."""
        counts: dict[str, int] = {}
        for layer in self.layers:
            for linear in [*layer.qkv.linears, layer.output, *layer.gate_up.linears, layer.down]:
                counts[linear.form] = counts.get(linear.form, 0) + 1
        return counts

    def embedded(self, tokens: list[int]) -> np.ndarray:
        """The tokens' embedding rows. A decoding step's few rows come from a cache of the rows
        met before: gguf's dequantization runs a few hundred Python lines a call, which after
        a pass has swept the caches cost ~140 µs, 4% of the bundled model's one-token pass
        (docs/bench-log.md); a long prompt's rows are dequantized together and not kept."""
        if len(tokens) > _EMBED_CACHED_BELOW:
            ids = np.asarray(tokens, dtype=np.int64)
            x = np.array(self.tensors.dense_rows("token_embd.weight", ids), dtype=np.float32)
        else:  # (row by row: np.stack's own Python took 30 µs a step after a pass)
            x = np.empty((len(tokens), self.shape.dim), dtype=np.float32)
            for i, token in enumerate(tokens):
                x[i] = self._embedding_row(token)
        if self.shape.family.scaled_embeddings:  # as llama.cpp's ggml_scale by sqrtf(n_embd)
            x *= np.float32(np.sqrt(np.float32(self.shape.dim)))
        return x

    def _embedding_row(self, token: int) -> np.ndarray:
        row = self._embedding_rows.get(token)
        if row is None:
            if len(self._embedding_rows) >= self._embedding_rows_kept:
                self._embedding_rows.clear()  # a bound, rarely met: a chat uses few tokens
            ids = np.asarray([token], dtype=np.int64)
            row = self.tensors.dense_rows("token_embd.weight", ids)[0].astype(np.float32)
            self._embedding_rows[token] = row
        return row

    def ride(self, head_pointer: int) -> bool:
        """Have the next pass with logits guess with the draft head at `head_pointer` (a
        c_structs.CDraftHead of this model's width) the token after each row's greedy token.
        Only where the C reads the pending token's embedding as the file stores it and the
        greedy token is the logits' own: a Q8_0 embedding neither scaled nor soft-capped."""
        if self._rider is None:
            if (
                self.tensors.type_name("token_embd.weight") != "Q8_0"
                or self.shape.family.scaled_embeddings
                or self.shape.logit_softcap
            ):
                return False
            self._embedding_blocks = np.ascontiguousarray(self.tensors.raw("token_embd.weight"))
            self._rider = CPassGuesses(
                None, self._embedding_blocks.ctypes.data, None, self.guess_tokens.ctypes.data,
                self.guesses.ctypes.data, self.guess_sure.ctypes.data,
            )  # fmt: skip
        self._rider.head = head_pointer
        self._riding = True
        return True

    def forward(
        self,
        tokens: list[int],
        depths: list[int] | tuple[int, ...],
        seen: np.ndarray,
        n_prefix: int,
        *,
        logits: bool,
        first_row: int = 0,
    ) -> np.ndarray | None:
        """Evaluate a block of tokens behind the `n_prefix` cached ones, writing their keys and
        values to slots n_prefix + first_row + i. Row i sits at position n_prefix + depths[i] and
        attends to the prefix and to the tree rows seen[i, :depths[i] + 1] (its ancestors, then
        itself; tree row r in slot n_prefix + r, those before `first_row` an earlier block's).
        Float32 logits [rows, vocab] when `logits`, else None."""
        shape, lib = self.shape, self._kernels
        rows = len(tokens)
        seen = np.ascontiguousarray(seen, dtype=np.int32)
        n_seen = _seen_counts(tuple(depths))
        positions = n_seen + np.int32(n_prefix - 1)
        x = self.embedded(tokens)
        # (numpy's: torch's empty and then .numpy() took 40 µs a step after a pass)
        out = np.empty((rows, shape.vocab), dtype=np.float32) if logits else None
        riding = logits and self._riding
        self._riding, self.guessed_rows = False, rows if riding else 0  # one pass a ride
        if riding:  # a chain: only the row verification stops at (c/kernels.h)
            chain = all(depth == row for row, depth in enumerate(depths))
            self._chain_next[: rows - 1], self._chain_next[rows - 1] = tokens[1:], -1
            self._rider.next = self._chain_next.ctypes.data if chain else None
        lib.forward(
            ctypes.byref(self._whole), x.ctypes.data, rows, positions.ctypes.data, n_prefix,
            first_row, seen.ctypes.data, seen.shape[1], n_seen.ctypes.data,
            None if out is None else out.ctypes.data,
            ctypes.byref(self._rider) if riding else None, self.threads,
        )  # fmt: skip
        self.last_residual = x if logits else None  # the C wrote the last layer's sum into x
        if out is not None and shape.logit_softcap:  # as llama.cpp: scale, tanh, scale back
            cap = np.float32(shape.logit_softcap)
            out = np.tanh(out * (np.float32(1.0) / cap)) * cap
        return out

    def move(self, n_prefix: int, block_rows: list[int]) -> None:
        """Put the keys and values of block rows `block_rows` (a root-to-node path) right behind
        the prefix, in that order: what committing the path means for the cache."""
        if block_rows == list(range(len(block_rows))):
            return
        source = np.asarray([n_prefix + row for row in block_rows], dtype=np.int64)
        target = slice(n_prefix, n_prefix + len(block_rows))
        self.k_cache[..., target] = self.k_cache[..., source]
        self.v_cache[:, :, target] = self.v_cache[:, :, source]


def whole_model(model: Int4Model) -> CModel:
    """The model as the C `forward` (c/forward.c) reads it. The structure points into the model's
    own arrays, which live as long as it does."""
    shape = model.shape
    layers = (CLayer * shape.layers)()
    for index, layer in enumerate(model.layers):
        target = layers[index]
        target.attn_norm, target.ffn_norm = layer.attn_norm.ctypes.data, layer.ffn_norm.ctypes.data
        target.attn_post_norm, target.ffn_post_norm = layer.post_norms
        cos, sin = (model.local_cos, model.local_sin) if layer.local else (model.cos, model.sin)
        if layer.rope:  # no tables: the forward leaves q and k as they are
            target.cos_table, target.sin_table = cos.ctypes.data, sin.ctypes.data
        target.window = shape.local_window if layer.local else 0
        target.qkv_parts, target.gate_up_parts = len(layer.qkv.linears), len(layer.gate_up.linears)
        for part, linear in enumerate(layer.qkv.linears):
            target.qkv[part] = linear_weights(linear)
        for part, linear in enumerate(layer.gate_up.linears):
            target.gate_up[part] = linear_weights(linear)
        target.output, target.down = linear_weights(layer.output), linear_weights(layer.down)
        target.ops = layer.ops
    whole = CModel(
        shape.layers, shape.dim, shape.ffn, shape.heads, shape.kv_heads, shape.head_dim,
        shape.norm_eps, model._scale, shape.attn_softcap, int(shape.family.gelu), layers,
        model.final_norm.ctypes.data,
        linear_weights(model.head), model.k_cache.ctypes.data, model.v_cache.ctypes.data,
        model.slots,
    )  # fmt: skip
    whole._keep = layers  # the array the pointer points into
    return whole
