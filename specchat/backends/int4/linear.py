"""The int4 runtime's linear layers: a GGUF weight laid out once, at load, as the C kernels (c/)
reads it, and called alone or from the whole forward."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from specchat.backends.gguf.tensors import (
    GROUP_SIZE,
    GGUFTensors,
    GroupedInt8,
    Int4Blocks,
    Nibbles,
)
from specchat.backends.int4.kernels import Kernels, kernels
from specchat.errors import SpecchatError

# -- linear layers -------------------------------------------------------------------------------


class RowsLinear:
    """y = x W^T in the C kernels: 4-bit blocks as nibbles with a scale and zero per 32 (read
    eight rows at a time; Q5_x's 5-bit codes the same with a plane of fifth bits), Q8_0 and Q6_K
    as int8 codes with their blocks' scales (exactly the file's weights, a byte each), anything
    else dequantized once to float32. Float32 sums whose order
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
        # x rounded to 8 bits for the 4- and 5-bit weights and the int8 codes (Q8_0, Q6_K):
        # integer dot products, as llama.cpp's
        self.int8_x = True
        self.code_bits = 8
        # how the kernels read scales and zeros (c/rows8.h): 0 float32, 1 float16, F > 1 as a
        # K-quant stores them (`Factored`, F groups to a float16 factor)
        self.scale_form = 0
        self.out_features, self.in_features = weight.shape
        if isinstance(weight, Nibbles):
            weight = weight.by_eight()  # as c/q4_rows8.c reads them
            self.codes, self.scales, self.zeros = weight.packed, weight.scales, weight.zeros
            self.group, self.f32, self.code_bits = GROUP_SIZE, None, weight.bits
            self.scale_form = weight.form
            if not self.scale_form:
                self._halve()
                # Q4_0's zeros (-8 * scale) are computed, not read
                if self.code_bits == 4 and np.array_equal(
                    np.float32(-8.0) * self.scales.astype(np.float32),
                    self.zeros.astype(np.float32),
                ):
                    self.zeros = None
        elif isinstance(weight, GroupedInt8):
            if weight.zeros is None or weight.group == GROUP_SIZE:  # all but zeros a 16
                weight = weight.by_eight()  # as c/q8_rows8.c reads them
            self.codes, self.scales, self.zeros = weight.codes, weight.scales, weight.zeros
            self.group, self.f32, self.scale_form = weight.group, None, weight.form
            if weight.group == GROUP_SIZE and not self.scale_form:
                self._halve()
        else:
            self.f32 = np.ascontiguousarray(weight, dtype=np.float32)
            self.codes = self.scales = self.zeros = None
            self.group = 0
        if self.in_features % 32 or self.group not in (0, 16, 32):
            raise SpecchatError(f"a weight of {self.in_features} columns (not a multiple of 32)")
        if self._interleaved and self._kernels.tile_blocks == 2:
            self.codes = join_pairs(self.codes, self.out_features)
        self.float32_out = float32_out
        self.threads = 1

    def _halve(self) -> None:
        """Scales and zeros as float16 where that is exactly the file's (Q4_0, Q4_1, Q8_0,
        Q5_0, Q5_1 store float16): fewer bytes to read a token."""
        kept = [v for v in (self.scales, self.zeros) if v is not None]
        halves = [v.astype(np.float16) for v in kept]
        if all(np.array_equal(h.astype(np.float32), v) for h, v in zip(halves, kept)):
            self.scales = halves[0]
            self.zeros = halves[1] if len(halves) > 1 else None
            self.scale_form = 1

    @property
    def _interleaved(self) -> bool:
        """Whether the codes are laid by eight rows: what c/matmul.c hands the interleaved
        kernels (4- and 5-bit codes; int8 codes in groups of 32, or of 16 without zeros)."""
        if self.codes is None:
            return False
        return self.code_bits != 8 or self.group == 32 or (self.group == 16 and self.zeros is None)

    @property
    def form(self) -> str:
        """How the weights are held: "4-bit" or "5-bit" codes, "int8" codes or "float32"."""
        if self.f32 is not None:
            return "float32"
        return "int8" if self.code_bits == 8 else f"{self.code_bits}-bit"

    _LAYOUT_ARRAYS = ("f32", "codes", "scales", "zeros")
    _LAYOUT_SCALARS = (
        "int8_x", "code_bits", "scale_form", "out_features", "in_features", "group",
        "float32_out",
    )  # fmt: skip

    def layout(self) -> tuple[dict[str, object], dict[str, np.ndarray | None]]:
        """What the kernels read, as `of_layout` takes it back (packed.py keeps it on disk)."""
        scalars = {name: getattr(self, name) for name in self._LAYOUT_SCALARS}
        return scalars, {name: getattr(self, name) for name in self._LAYOUT_ARRAYS}

    @classmethod
    def of_layout(
        cls, scalars: dict[str, object], arrays: dict[str, np.ndarray | None], library: Kernels
    ) -> RowsLinear:
        """The linear whose `layout` this was, on `library`'s kernels, laid out already."""
        linear = cls.__new__(cls)
        linear._kernels = library
        for name in cls._LAYOUT_SCALARS:
            setattr(linear, name, scalars[name])
        for name in cls._LAYOUT_ARRAYS:
            setattr(linear, name, arrays[name])
        linear.threads = 1
        return linear

    @staticmethod
    def _pointer(array: np.ndarray | None) -> int | None:
        return None if array is None else array.ctypes.data

    def __call__(self, x):
        """x W^T for a torch tensor x (float32 or bfloat16): the checks' way in (the forward
        calls the kernels itself, so decoding never imports torch)."""
        import torch

        x = x.contiguous()
        out_type = torch.float32 if self.float32_out else torch.bfloat16
        out = torch.empty((x.shape[0], self.out_features), dtype=out_type)
        self._kernels.matmul_rows(
            self._pointer(self.f32), self._pointer(self.codes), self._pointer(self.scales),
            self._pointer(self.zeros), self.group, self.code_bits, self.scale_form, self.int8_x,
            self.out_features, self.in_features,
            x.data_ptr(), x.dtype == torch.bfloat16, x.shape[0], out.data_ptr(),
            out_type == torch.bfloat16, self.threads,
        )  # fmt: skip
        return out


def join_pairs(codes: np.ndarray, rows: int) -> np.ndarray:
    """Codes laid by eight rows (c/q4_rows8.c, c/q8_rows8.c) with each pair of blocks' 32-byte
    chunks side by side (a's chunk, then b's), as AVX-512's tiles read them (c/rows8.h): one
    64-byte load feeds both, and the bytes stay one stream. A last odd block stays as it was."""
    blocks = -(-rows // 8)
    flat = codes.reshape(blocks, -1)
    pairs = blocks // 2
    joined = flat[: 2 * pairs].reshape(pairs, 2, -1, 32).transpose(0, 2, 1, 3)
    return np.concatenate([joined.reshape(-1), flat[2 * pairs :].reshape(-1)]).reshape(codes.shape)


def four_bit_linear(blocks: Int4Blocks, library: Kernels) -> RowsLinear:
    return RowsLinear(blocks.nibbles(), library=library)


def rows_linear(
    tensors: GGUFTensors, name: str, library: Kernels, *, float32_out: bool = False
) -> RowsLinear:
    grouped = tensors.grouped_int8(name)
    if grouped is None:
        return RowsLinear(tensors.dense(name), float32_out=float32_out, library=library)
    five = grouped.five_bits()  # Q5_x: fewer bytes than int8 codes for the same weights
    return RowsLinear(five or grouped, float32_out=float32_out, library=library)


# a weight by name, laid out by the callable unless it was kept (packed.PackedWeights.linear)
LaidOut = Callable[[str, Callable[[], "RowsLinear"]], "RowsLinear"]


class Projection:
    """Several weights that read the same input (q, k, v; gate, up): one call when they share a
    carrier (4-bit blocks concatenated), one call each otherwise."""

    def __init__(
        self, tensors: GGUFTensors, names: list[str], library: Kernels, laid: LaidOut
    ) -> None:
        if all(tensors.is_int4(name) for name in names):

            def joined() -> RowsLinear:
                blocks = Int4Blocks.concat([tensors.int4_blocks(n) for n in names])
                return four_bit_linear(blocks, library)

            self.linears = [laid("+".join(names), joined)]
        else:
            self.linears = [
                laid(name, functools.partial(linear_for, tensors, name, library)) for name in names
            ]


def linear_for(tensors: GGUFTensors, name: str, library: Kernels) -> RowsLinear:
    if tensors.is_int4(name):
        return four_bit_linear(tensors.int4_blocks(name), library)
    return rows_linear(tensors, name, library)
