"""A lean transformer forward (Llama and the families `families.py` declares) over a GGUF file's
own 4-bit weights, with a static KV cache.

Why it is shaped this way: on a CPU a speculative block is cheap only if the k-row matmuls cost
little more than 1-row ones, and a decoder stays exactly greedy only if a block's rows equal
one-token passes. Every kernel on the path computes an output row by one fixed sum whatever the
number of rows, so a block row equals the same token evaluated alone.

The whole forward (per layer four matmuls, attention, norms and the activation) is one C call (exact_kernels.c's `forward`) at every instruction-set level
(`specchat.cpu`): the file's nibbles (and Q8_0 codes) meet x rounded to 8 bits per 32 values,
summed in integers as llama.cpp does, each weight row read once for every token of the block
(AVX-512 VNNI, AVX2 and plain C compute the same bits). torch's int4 kernel carried the 4-bit
weights on AVX-512 until the VNNI kernel cost less at one token and much less at four
(docs/benchmarks.md); a Python loop over the layers cost more than a small layer's arithmetic.

Numbers: the residual stream is float32; matmul inputs and outputs are bf16 (the kernel's only
fast type); keys are cached after RoPE in float32 and values in bf16 (what the projection gave);
the LM head's output is float32, so logits are float32 too.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
import torch

from specchat.backends.gguf.tensors import (
    GROUP_SIZE,
    GGUFTensors,
    GroupedInt8,
    Int4Blocks,
    Nibbles,
)
from specchat.backends.int4.families import (
    FAMILIES,
    ROPE_SCALINGS,
    Family,
    gate_up_names,
    layer_tensors,
    qkv_names,
)
from specchat.backends.int4.kernels import Kernels, kernels
from specchat.errors import SpecchatError


@dataclass(frozen=True)
class ModelShape:
    """The hyper-parameters a GGUF of a family the runtime runs declares."""

    family: Family
    layers: int
    dim: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    rope_base: float
    rope_freq_scale: float  # 1 / a declared scaling factor
    rope_scaling: str  # "none", "linear" or "yarn"
    yarn_context: int  # YaRN's original context length
    norm_eps: float
    context_length: int
    window: int  # a declared sliding window (0: none); the context is held within it

    @classmethod
    def read(cls, tensors: GGUFTensors) -> ModelShape:
        arch = tensors.metadata("general.architecture", "unknown")
        if arch not in FAMILIES:
            raise SpecchatError(
                f"the int4 runtime runs {', '.join(FAMILIES)} models; {tensors.path.name} is "
                f"{arch!r} (use --backend llama)"
            )
        scaling = tensors.metadata(f"{arch}.rope.scaling.type", None)
        if scaling not in ROPE_SCALINGS:
            raise SpecchatError(
                f"{tensors.path.name} uses {scaling} RoPE scaling, which the int4 runtime does "
                "not implement (use --backend llama)"
            )

        def meta(key: str, default=None):
            value = tensors.metadata(f"{arch}.{key}", default)
            if value is None:
                raise SpecchatError(f"{tensors.path.name} lacks {arch}.{key}")
            return value

        dim = int(meta("embedding_length"))
        heads = int(meta("attention.head_count"))
        head_dim = int(meta("attention.key_length", dim // heads))
        vocab_rows = tensors.shape("token_embd.weight")[0]
        # llama.cpp reads the factor from either key and applies it whatever the type says
        factor = float(meta("rope.scaling.factor", meta("rope.scale_linear", 0.0)))
        shape = cls(
            family=FAMILIES[arch],
            layers=int(meta("block_count")),
            dim=dim,
            ffn=int(meta("feed_forward_length")),
            heads=heads,
            kv_heads=int(meta("attention.head_count_kv", heads)),
            head_dim=head_dim,
            vocab=vocab_rows,
            rope_base=float(meta("rope.freq_base", 10000.0)),
            rope_freq_scale=1.0 if factor == 0.0 else 1.0 / factor,
            rope_scaling=scaling or "none",
            yarn_context=int(
                meta("rope.scaling.original_context_length", meta("context_length", 4096))
            ),
            norm_eps=float(meta("attention.layer_norm_rms_epsilon", 1e-5)),
            context_length=int(meta("context_length", 4096)),
            window=int(meta("attention.sliding_window", 0)),
        )
        if int(meta("rope.dimension_count", head_dim)) != head_dim:
            raise SpecchatError(f"{tensors.path.name}: partial RoPE is not supported")
        if shape.layers < 1 or shape.ffn < 1:
            raise SpecchatError(f"{tensors.path.name}: {shape.layers} layers of width {shape.ffn}")
        if head_dim < 16 or head_dim % 16 or head_dim > 256 or heads % shape.kv_heads:
            raise SpecchatError(f"{tensors.path.name}: head layout {heads}x{head_dim} unsupported")
        if not (0.0 < shape.rope_freq_scale <= 1.0e6) or shape.window < 0 or shape.yarn_context < 1:
            raise SpecchatError(
                f"{tensors.path.name}: RoPE scaling (factor {factor}) or window unusable"
            )
        return shape

    def layer_tensors(self) -> dict[str, tuple[int, ...]]:
        """Each layer's tensors (named after `blk.N.`) and their shapes."""
        return layer_tensors(
            self.family, dim=self.dim, ffn=self.ffn, q=self.heads * self.head_dim,
            kv=self.kv_heads * self.head_dim, head_dim=self.head_dim,
        )  # fmt: skip


# -- linear layers -------------------------------------------------------------------------------


class RowsLinear:
    """y = x W^T in exact_kernels.c: 4-bit blocks as nibbles with a scale and zero per 32 (read
    eight rows at a time), Q8_0, Q5_x and Q6_K as int8 codes with their blocks' scales (exactly the file's
    weights, a byte each), anything else dequantized once to float32. Float32 sums whose order
    does not depend on how many rows share the call; bf16 in and out in the layers, float32 for
    the LM head.

    (oneDNN's prepacked bf16 linear was tried first: at 1536 inputs a row's bits changed with the
    number of rows in the call, and its bf16 weights rounded the file's.)"""

    def __init__(
        self,
        weight: GroupedInt8 | Nibbles | np.ndarray,
        *,
        float32_out: bool = False,
        library: Kernels | None = None,
    ) -> None:
        self._kernels = library or kernels()
        # x rounded to 8 bits for the 4-bit weights and Q8_0 / Q5_0: integer dot products, as
        # llama.cpp's
        self.int8_x = True
        self.code_bits = 8
        self.half_scales = False
        self.out_features, self.in_features = weight.shape
        if isinstance(weight, Nibbles):
            weight = weight.by_eight()  # as exact_kernels.c's matmul_nibbles8 reads them
            self.codes, self.scales, self.zeros = weight.packed, weight.scales, weight.zeros
            self.group, self.f32, self.code_bits = GROUP_SIZE, None, 4
            self._halve()
            # Q4_0's zeros (-8 * scale) are computed, not read
            if np.array_equal(
                np.float32(-8.0) * self.scales.astype(np.float32), self.zeros.astype(np.float32)
            ):
                self.zeros = None
        elif isinstance(weight, GroupedInt8):
            if weight.zeros is None:  # Q8_0, Q5_0 (groups of 32), Q6_K (16)
                weight = weight.by_eight()  # as exact_kernels.c's matmul_int8x8 reads them
            self.codes, self.scales, self.zeros = weight.codes, weight.scales, weight.zeros
            self.group, self.f32 = weight.group, None
            if weight.group == GROUP_SIZE and weight.zeros is None:
                self._halve()
        else:
            self.f32 = np.ascontiguousarray(weight, dtype=np.float32)
            self.codes = self.scales = self.zeros = None
            self.group = 0
        if self.in_features % 32 or self.group not in (0, 16, 32):
            raise SpecchatError(f"a weight of {self.in_features} columns (not a multiple of 32)")
        self.float32_out = float32_out
        self.threads = 1

    def _halve(self) -> None:
        """Scales and zeros as float16 where that is exactly the file's (Q4_0, Q4_1, Q8_0,
        Q5_0 store float16): fewer bytes to read a token."""
        kept = [v for v in (self.scales, self.zeros) if v is not None]
        halves = [v.astype(np.float16) for v in kept]
        if all(np.array_equal(h.astype(np.float32), v) for h, v in zip(halves, kept)):
            self.scales = halves[0]
            self.zeros = halves[1] if len(halves) > 1 else None
            self.half_scales = True

    @property
    def form(self) -> str:
        """How the weights are held: "4-bit" nibbles, "int8" codes or "float32"."""
        return "float32" if self.f32 is not None else "4-bit" if self.code_bits == 4 else "int8"

    @staticmethod
    def _pointer(array: np.ndarray | None) -> int | None:
        return None if array is None else array.ctypes.data

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out_type = torch.float32 if self.float32_out else torch.bfloat16
        out = torch.empty((x.shape[0], self.out_features), dtype=out_type)
        self._kernels.matmul_rows(
            self._pointer(self.f32), self._pointer(self.codes), self._pointer(self.scales),
            self._pointer(self.zeros), self.group, self.code_bits, self.half_scales, self.int8_x,
            self.out_features, self.in_features,
            x.data_ptr(), x.dtype == torch.bfloat16, x.shape[0], out.data_ptr(),
            out_type == torch.bfloat16, self.threads,
        )  # fmt: skip
        return out


def four_bit_linear(blocks: Int4Blocks, library: Kernels) -> RowsLinear:
    return RowsLinear(blocks.nibbles(), library=library)


def rows_linear(
    tensors: GGUFTensors, name: str, library: Kernels, *, float32_out: bool = False
) -> RowsLinear:
    grouped = tensors.grouped_int8(name)
    weight = grouped if grouped is not None else tensors.dense(name)
    return RowsLinear(weight, float32_out=float32_out, library=library)


def check_shapes(tensors: GGUFTensors, shape: ModelShape, head_name: str) -> None:
    """Every tensor the forward reads has the shape the header's hyper-parameters give it: the C
    kernels size their buffers by those, so a crafted file must stop here, in one line."""
    wanted = {"token_embd.weight": (shape.vocab, shape.dim), head_name: (shape.vocab, shape.dim)}
    wanted["output_norm.weight"] = (shape.dim,)
    if "rope_freqs.weight" in tensors:
        wanted["rope_freqs.weight"] = (shape.head_dim // 2,)
    per_layer = shape.layer_tensors()
    for i in range(shape.layers):
        wanted.update({f"blk.{i}.{part}": dims for part, dims in per_layer.items()})
    tensors.check_readable(list(wanted))
    unread = sorted(set(tensors.header.tensors) - set(wanted))
    if unread:  # a part of the model this forward would skip: the answer would be wrong
        raise SpecchatError(
            f"{tensors.path.name}: the int4 runtime does not implement {unread[0]}"
            + (f" (and {len(unread) - 1} more tensors)" if len(unread) > 1 else "")
            + " (use --backend llama)"
        )
    for name, dims in wanted.items():
        if tensors.shape(name) != dims:
            raise SpecchatError(
                f"{tensors.path.name}: tensor {name} is {list(tensors.shape(name))}, where the "
                f"header's sizes make it {list(dims)}"
            )


class Projection:
    """Several weights that read the same input (q, k, v; gate, up): one call when they share a
    carrier (4-bit blocks concatenated), one call each otherwise."""

    def __init__(self, tensors: GGUFTensors, names: list[str], library: Kernels) -> None:
        if all(tensors.is_int4(name) for name in names):
            blocks = Int4Blocks.concat([tensors.int4_blocks(n) for n in names])
            self.linears = [four_bit_linear(blocks, library)]
        else:
            self.linears = [_linear(tensors, name, library) for name in names]


def _linear(tensors: GGUFTensors, name: str, library: Kernels) -> RowsLinear:
    if tensors.is_int4(name):
        return four_bit_linear(tensors.int4_blocks(name), library)
    return rows_linear(tensors, name, library)


class _HeadOps(ctypes.Structure):
    """exact_kernels.c's head_ops: what a family does to q and k before the cache."""

    _fields_ = [
        ("bias", ctypes.c_void_p), ("q_norm", ctypes.c_void_p), ("k_norm", ctypes.c_void_p),
        ("eps", ctypes.c_float), ("neox", ctypes.c_int32),
    ]  # fmt: skip


@dataclass
class Layer:
    attn_norm: torch.Tensor
    qkv: Projection
    output: RowsLinear
    ffn_norm: torch.Tensor
    gate_up: Projection
    down: RowsLinear
    ops: _HeadOps
    held: list[np.ndarray]  # the arrays `ops` points into

    @classmethod
    def read(cls, tensors: GGUFTensors, shape: ModelShape, i: int, library: Kernels) -> Layer:
        blk, family = f"blk.{i}.", shape.family
        held = []

        def vector(name: str) -> int:
            held.append(np.ascontiguousarray(tensors.dense(blk + name), dtype=np.float32))
            return held[-1].ctypes.data

        bias = None
        if family.qkv_bias:
            parts = [tensors.dense(blk + f"attn_{p}.bias") for p in "qkv"]
            held.append(np.ascontiguousarray(np.concatenate(parts), dtype=np.float32))
            bias = held[-1].ctypes.data
        norms = (None, None)
        if family.qk_norm:
            norms = (vector("attn_q_norm.weight"), vector("attn_k_norm.weight"))
        ops = _HeadOps(bias, *norms, shape.norm_eps, int(family.neox_rope))
        qkv = [blk + name for name in qkv_names(family)]
        gate_up = [blk + name for name in gate_up_names(family)]
        return cls(
            attn_norm=torch.from_numpy(tensors.dense(blk + "attn_norm.weight")),
            qkv=Projection(tensors, qkv, library),
            output=_linear(tensors, blk + "attn_output.weight", library),
            ffn_norm=torch.from_numpy(tensors.dense(blk + "ffn_norm.weight")),
            gate_up=Projection(tensors, gate_up, library),
            down=_linear(tensors, blk + "ffn_down.weight", library),
            ops=ops,
            held=held,
        )


def rope_tables(shape: ModelShape, positions: int, freq_factors: np.ndarray | None):
    """cos and sin [positions, head_dim / 2] of each pair's angle, computed as llama.cpp does
    (float32, the angle multiplied pair by pair by base^(-2/head_dim), divided by the file's
    frequency factors, then scaled by a linear RoPE factor), so both rotate alike."""
    half = shape.head_dim // 2
    theta_scale = np.float32(
        np.power(np.float32(shape.rope_base), np.float32(-2.0 / shape.head_dim))
    )
    theta = np.empty((positions, half), dtype=np.float32)
    theta[:, 0] = np.arange(positions, dtype=np.float32)
    for j in range(1, half):
        theta[:, j] = theta[:, j - 1] * theta_scale
    if freq_factors is not None:
        theta = theta / freq_factors.astype(np.float32)
    magnitude = np.float32(1.0)
    if shape.rope_freq_scale != 1.0:
        scale = np.float32(shape.rope_freq_scale)
        interpolated = scale * theta
        if shape.rope_scaling == "yarn":  # ggml's rope_yarn, beta_fast 32, beta_slow 1
            low, high = _yarn_corr_dims(shape, 32.0, 1.0)
            pair = np.arange(half, dtype=np.float32)
            ramp = 1 - np.clip((pair - low) / max(np.float32(0.001), high - low), 0, 1)
            mix = ramp.astype(np.float32)
            theta = interpolated * (1 - mix) + theta * mix
            magnitude = np.float32(1.0) + np.float32(0.1) * np.log(np.float32(1.0) / scale)
        else:
            theta = interpolated
    angles = theta.astype(np.float64)
    cos = torch.from_numpy(np.cos(angles).astype(np.float32) * magnitude)
    sin = torch.from_numpy(np.sin(angles).astype(np.float32) * magnitude)
    return cos, sin


def _yarn_corr_dims(shape: ModelShape, beta_fast: float, beta_slow: float):
    """The pairs YaRN leaves unscaled below and scales fully above, as ggml computes them."""
    dims, base = np.float32(shape.head_dim), np.float32(shape.rope_base)
    orig = np.float32(shape.yarn_context)

    def corr_dim(rotations: float) -> np.float32:
        two_pi = np.float32(2 * np.pi)
        return dims * np.log(orig / (np.float32(rotations) * two_pi)) / (2 * np.log(base))

    low = max(np.float32(0), np.floor(corr_dim(beta_fast)))
    high = min(dims - 1, np.ceil(corr_dim(beta_slow)))
    return np.float32(low), np.float32(high)


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
        self.layers: list[Layer] = []
        for i in range(shape.layers):
            if progress and i % 10 == 0:
                progress(f"packing layer {i + 1} of {shape.layers}")
            self.layers.append(Layer.read(tensors, shape, i, library))
        self.final_norm = torch.from_numpy(tensors.dense("output_norm.weight"))
        if progress:
            progress("preparing the output layer")
        # the LM head in float32 on the file's exact weights: float32 logits
        self.head = rows_linear(tensors, self.head_name, library, float32_out=True)
        factors = tensors.dense("rope_freqs.weight") if "rope_freqs.weight" in tensors else None
        self.cos, self.sin = rope_tables(shape, n_ctx, factors)
        self.slots = n_ctx + max_block
        # keys transposed ([.., head_dim, slots]) so that scores vectorise over keys
        kv = (shape.layers, shape.kv_heads)
        self.k_cache = torch.zeros((*kv, shape.head_dim, self.slots), dtype=torch.float32)
        self.v_cache = torch.zeros((*kv, self.slots, shape.head_dim), dtype=torch.bfloat16)
        self._scale = float(shape.head_dim**-0.5)
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
        """Threads of the C kernels (the int4 kernel follows torch's own setting)."""
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

    def embed(self, tokens: list[int]) -> torch.Tensor:
        rows = self.tensors.dense_rows("token_embd.weight", np.asarray(tokens, dtype=np.int64))
        return torch.from_numpy(np.array(rows, dtype=np.float32, copy=True))

    @torch.inference_mode()
    def forward(
        self,
        tokens: list[int],
        depths: list[int] | tuple[int, ...],
        seen: np.ndarray,
        n_prefix: int,
        *,
        logits: bool,
    ) -> torch.Tensor | None:
        """Evaluate a block of tokens behind the `n_prefix` cached ones, writing their keys and
        values to slots n_prefix + i. Row i sits at position n_prefix + depths[i] and attends to
        the prefix and to the block rows seen[i, :depths[i] + 1] (its ancestors, then itself).
        Float32 logits [rows, vocab] when `logits`, else None."""
        shape, lib = self.shape, self._kernels
        rows = len(tokens)
        seen = np.ascontiguousarray(seen, dtype=np.int32)
        n_seen = np.asarray(depths, dtype=np.int32) + 1
        positions = n_seen + np.int32(n_prefix - 1)
        x = self.embed(tokens)
        out = torch.empty((rows, shape.vocab), dtype=torch.float32) if logits else None
        lib.forward(
            ctypes.byref(self._whole), x.data_ptr(), rows, positions.ctypes.data, n_prefix,
            seen.ctypes.data, seen.shape[1], n_seen.ctypes.data,
            None if out is None else out.data_ptr(), self.threads,
        )  # fmt: skip
        return out

    def move(self, n_prefix: int, block_rows: list[int]) -> None:
        """Put the keys and values of block rows `block_rows` (a root-to-node path) right behind
        the prefix, in that order: what committing the path means for the cache."""
        if block_rows == list(range(len(block_rows))):
            return
        source = torch.tensor([n_prefix + row for row in block_rows])
        target = slice(n_prefix, n_prefix + len(block_rows))
        self.k_cache[..., target] = self.k_cache[..., source]
        self.v_cache[:, :, target] = self.v_cache[:, :, source]


# -- the whole forward in C ------------------------------------------------------------------------


class _Linear(ctypes.Structure):
    _fields_ = [
        ("f32", ctypes.c_void_p), ("codes", ctypes.c_void_p), ("scales", ctypes.c_void_p),
        ("zeros", ctypes.c_void_p), ("group", ctypes.c_int32), ("code_bits", ctypes.c_int32),
        ("half_scales", ctypes.c_int32), ("int8_x", ctypes.c_int32), ("rows", ctypes.c_int64),
        ("cols", ctypes.c_int64),
    ]  # fmt: skip


class _Layer(ctypes.Structure):
    _fields_ = [
        ("attn_norm", ctypes.c_void_p), ("ffn_norm", ctypes.c_void_p),
        ("qkv", _Linear * 3), ("qkv_parts", ctypes.c_int32), ("output", _Linear),
        ("gate_up", _Linear * 2), ("gate_up_parts", ctypes.c_int32), ("down", _Linear),
        ("ops", _HeadOps),
    ]  # fmt: skip


class _Model(ctypes.Structure):
    _fields_ = [
        ("layers", ctypes.c_int32), ("dim", ctypes.c_int32), ("ffn", ctypes.c_int32),
        ("heads", ctypes.c_int32), ("kv_heads", ctypes.c_int32), ("head_dim", ctypes.c_int32),
        ("eps", ctypes.c_float), ("scale", ctypes.c_float), ("layer", ctypes.POINTER(_Layer)),
        ("final_norm", ctypes.c_void_p), ("head", _Linear), ("cos_table", ctypes.c_void_p),
        ("sin_table", ctypes.c_void_p), ("k_cache", ctypes.c_void_p), ("v_cache", ctypes.c_void_p),
        ("slots", ctypes.c_int64),
    ]  # fmt: skip


def _linear_weights(linear: RowsLinear) -> _Linear:
    return _Linear(
        RowsLinear._pointer(linear.f32), RowsLinear._pointer(linear.codes),
        RowsLinear._pointer(linear.scales), RowsLinear._pointer(linear.zeros), linear.group,
        linear.code_bits, linear.half_scales, linear.int8_x, linear.out_features,
        linear.in_features,
    )  # fmt: skip


def whole_model(model: Int4Model) -> _Model:
    """The model as exact_kernels.c's `forward` reads it. The structure points into the model's
    own arrays, which live as long as it does."""
    shape = model.shape
    layers = (_Layer * shape.layers)()
    for index, layer in enumerate(model.layers):
        target = layers[index]
        target.attn_norm, target.ffn_norm = layer.attn_norm.data_ptr(), layer.ffn_norm.data_ptr()
        target.qkv_parts, target.gate_up_parts = len(layer.qkv.linears), len(layer.gate_up.linears)
        for part, linear in enumerate(layer.qkv.linears):
            target.qkv[part] = _linear_weights(linear)
        for part, linear in enumerate(layer.gate_up.linears):
            target.gate_up[part] = _linear_weights(linear)
        target.output, target.down = _linear_weights(layer.output), _linear_weights(layer.down)
        target.ops = layer.ops
    whole = _Model(
        shape.layers, shape.dim, shape.ffn, shape.heads, shape.kv_heads, shape.head_dim,
        shape.norm_eps, model._scale, layers, model.final_norm.data_ptr(),
        _linear_weights(model.head), model.cos.data_ptr(), model.sin.data_ptr(),
        model.k_cache.data_ptr(), model.v_cache.data_ptr(), model.slots,
    )  # fmt: skip
    whole._keep = layers  # the array the pointer points into
    return whole
