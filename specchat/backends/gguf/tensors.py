"""A GGUF file's tensors in the forms the int4 runtime computes with.

The file's own 4-bit blocks (Q4_0, Q4_1, and Q4_K's 32-weight sub-blocks) are all one form: 32
codes q in 0..15 and a weight w = (q - 8) * scale + zero, exact in float64, so they are repacked
(`Nibbles`, then eight rows interleaved for the int4 kernels) without dequantizing: no float32 copy
of the model is ever made, and the kernels multiply by the file's own weights.

The other block types a file mixes in (a Q4_K_M file falls back to Q5_0, Q6_K or Q8_0 wherever a
row is not a multiple of 256) are int8 codes with a scale (and zero) per 16 or 32 weights: they
become exactly that (`GroupedInt8`: the codes read from their bits, and rows spread over every
tensor checked against the gguf package's own dequantizer), a byte a weight for the int4 kernels
to multiply by. Float tensors, and anything that check refuses, are dequantized once to float32
by the gguf package.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specchat.backends.gguf.header import read_header
from specchat.errors import SpecchatError

GROUP_SIZE = 32  # weights per int4 group: Q4_0/Q4_1 blocks and Q4_K sub-blocks alike
_LOW_NIBBLES = np.uint32(0x0F0F0F0F)  # each byte's low nibble, in a word of four bytes
_ROWS_AT_ONCE = 4096  # rows converted per step, bounding the temporary copies
_ROWS_CHECKED = 64  # rows of an int8-coded tensor compared with the gguf package's weights


def _gguf():
    try:
        import gguf
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SpecchatError("the int4 runtime needs the gguf package: pip install gguf") from exc
    return gguf


def int4_types() -> frozenset[str]:
    """Quant types repacked straight into int4 groups."""
    return frozenset({"Q4_0", "Q4_1", "Q4_K"})


def dense_types() -> frozenset[str]:
    """Types dequantized once (each checked against the gguf package's dequantizer in the tests)."""
    return frozenset({"F32", "F16", "BF16", "Q8_0", "Q5_0", "Q5_1", "Q5_K", "Q6_K"})


@dataclass(frozen=True)
class Factored:
    """Scales (or zeros) as a K-quant super-block stores them: a float16 factor per row and
    super-block and an int8 multiplier per group, value = factor * multiplier. The product is exact
    in float32 (11 by at most 8 significant bits), so a kernel that multiplies them as it reads
    gets the float32 scale bit for bit, from 2.5 bytes a group of 8 rows' where float32 takes 32:
    a Q4_K weight held in 4.6 bits, not 6 (at 8B about a gigabyte less memory). At 1.7B a pass
    measured as fast as with float32 scales, within 3%: the decode costs what the bytes save."""

    factors: np.ndarray  # float16 [rows, super-blocks]
    multipliers: np.ndarray  # int8 [rows, groups]

    @property
    def units(self) -> int:
        """Groups to a factor: 8 for Q4_K's groups of 32, 16 for Q6_K's groups of 16."""
        return self.multipliers.shape[1] // self.factors.shape[1]

    def values(self) -> np.ndarray:
        """float64 [rows, groups], exact."""
        factors = np.repeat(self.factors.astype(np.float64), self.units, axis=1)
        return factors * self.multipliers

    @staticmethod
    def concat(parts: list[Factored | None]) -> Factored | None:
        if any(p is None for p in parts) or len({p.units for p in parts}) != 1:
            return None
        return Factored(
            np.concatenate([p.factors for p in parts]),
            np.concatenate([p.multipliers for p in parts]),
        )

    def by_eight(self) -> np.ndarray:
        """The bytes the kernels read (int4/c/rows8.h): per block of 8 rows (padded with zeros)
        and super-block, the 8 rows' float16 factors, then per group its 8 rows' multipliers."""
        rows, supers = self.factors.shape
        blocks, units = -(-rows // 8), self.units
        pad = blocks * 8 - rows
        factors = _rows_padded(self.factors, pad).reshape(blocks, 8, supers).transpose(0, 2, 1)
        multipliers = _rows_padded(self.multipliers, pad).reshape(blocks, 8, supers, units)
        parts = [
            np.ascontiguousarray(factors).view(np.uint8).reshape(blocks, supers, 16),
            np.ascontiguousarray(multipliers.transpose(0, 2, 3, 1))
            .view(np.uint8)
            .reshape(blocks, supers, 8 * units),
        ]
        return np.ascontiguousarray(np.concatenate(parts, axis=2)).reshape(blocks, -1)


@dataclass(frozen=True)
class Int4Blocks:
    """A [rows, cols] weight as 4-bit codes and one (scale, zero) per 32 weights of a row:
    w = (code - 8) * scale + zero. Scales and zeros are float64 and exact: evaluated in float64
    and rounded once to float32, they give the gguf package's dequantized weights bit for bit.
    The codes stay two a byte as Q4_0 and Q4_1 store them (Q4_K's brought to that order): a byte
    a code, then packed again, took most of a 1.7B Q4_K_M file's 13 s load."""

    packed: np.ndarray  # uint8 [rows, cols // 2]: a group's byte i holds code i low, i + 16 high
    scales: np.ndarray  # float64 [rows, cols // 32]
    zeros: np.ndarray  # float64 [rows, cols // 32]
    # Q4_K: the nibbles' scales and zeros (w = code * scale + zero) as the file stores them
    factored: tuple[Factored, Factored] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        rows, half = self.packed.shape
        return rows, 2 * half

    @property
    def codes(self) -> np.ndarray:
        """uint8 [rows, cols], values 0..15 (for checks: the runtime reads `packed`)."""
        rows, cols = self.shape
        return _nibbles(self.packed.reshape(rows, cols // GROUP_SIZE, 16)).reshape(rows, cols)

    def dequantize(self) -> np.ndarray:
        """The weights in float32, as exact as the file's (for checks; the runtime never needs
        them)."""
        rows, cols = self.codes.shape
        codes = self.codes.reshape(rows, cols // GROUP_SIZE, GROUP_SIZE).astype(np.float64)
        weights = (codes - 8.0) * self.scales[..., None] + self.zeros[..., None]
        return weights.reshape(rows, cols).astype(np.float32)

    def nibbles(self) -> Nibbles:
        """The same weights as two codes a byte with w = code * scale + zero (float32, exact:
        the zeros are Q4_1's minimum, Q4_0's -8 * scale and Q4_K's -dmin * m, each exact in
        float32), for the int4 kernels (int4/c/dense.c). A group's 16 bytes hold weight j low and j + 16 high,
        ggml's own order."""
        return Nibbles(
            self.packed,
            self.scales.astype(np.float32),
            (self.zeros - 8.0 * self.scales).astype(np.float32),
            self.factored,
        )

    @staticmethod
    def concat(parts: list[Int4Blocks]) -> Int4Blocks:
        """Rows of several weights stacked: one kernel call for q, k and v (or gate and up)."""
        factored = [p.factored or (None, None) for p in parts]
        scales = Factored.concat([f[0] for f in factored])
        zeros = Factored.concat([f[1] for f in factored])
        return Int4Blocks(
            np.concatenate([p.packed for p in parts]),
            np.concatenate([p.scales for p in parts]),
            np.concatenate([p.zeros for p in parts]),
            (scales, zeros) if scales and zeros else None,
        )


@dataclass(frozen=True)
class Nibbles:
    """A [rows, cols] weight as 4-bit codes two a byte and a float32 scale and zero per 32
    weights of a row: w = code * scale + zero, one fused multiply-add (see Int4Blocks.nibbles).
    5-bit codes (Q5_0, Q5_1, Q5_K: `GroupedInt8.five_bits`) are the same with each code's fifth
    bit (16) beside it in `high`."""

    packed: np.ndarray  # uint8 [rows, cols // 2]; by eight: the bytes q4_rows8.c reads
    scales: np.ndarray  # float32 [rows, cols // 32]; by eight: the bytes of `form`
    zeros: np.ndarray  # float32 [rows, cols // 32]; by eight: the bytes of `form`
    factored: tuple[Factored, Factored] | None = None  # the same scales and zeros, where so
    form: int = 0  # by eight: 0 float32 scales and zeros, else Factored bytes, `form` units
    high: np.ndarray | None = None  # 5-bit codes: uint8 [rows, cols], each code's bit 16 (0/1)
    bits: int = 4  # bits a code: 4, or 5 with `high` (by eight: in the packed bytes)

    @property
    def shape(self) -> tuple[int, int]:
        held = 4 if self.high is not None else self.bits  # bits a code in `packed`
        return self.packed.shape[0], self.packed.shape[1] * 8 // held

    def by_eight(self) -> Nibbles:
        """The same weights interleaved by eight rows, as int4/c/q4_rows8.c reads
        them (rows padded with zeros to a multiple of 8): per block of 8 rows and group of 32,
        chunk c holds row j's weights 8c..8c+3 in the low nibbles of bytes 4j.., 8c+4..8c+7 in
        the high ones; 5-bit codes then their group's plane of fifth bits; scales and zeros
        [block][group][8]."""
        rows, cols = self.shape
        groups, blocks = cols // 32, -(-rows // 8)
        pad = blocks * 8 - rows
        packed = _four_bits_by_eight(_rows_padded(self.packed, pad), blocks, groups)
        if self.high is not None:
            fifth = _rows_padded(self.high.reshape(rows, groups, 32), pad)
            packed = np.concatenate([packed, _fifth_bit_plane(fifth, blocks, groups)], axis=2)

        def lanes(values: np.ndarray) -> np.ndarray:
            values = _rows_padded(values, pad)
            return np.ascontiguousarray(values.reshape(blocks, 8, groups).transpose(0, 2, 1))

        packed = np.ascontiguousarray(packed).reshape(blocks * 8, -1)
        if self.factored is not None:
            scales, zeros = self.factored
            laid = (scales.by_eight(), zeros.by_eight(), None, scales.units)
            return Nibbles(packed, *laid, bits=self.bits)
        return Nibbles(
            packed,
            lanes(self.scales).reshape(blocks * 8, groups),
            lanes(self.zeros).reshape(blocks * 8, groups),
            bits=self.bits,
        )


def _four_bits_by_eight(packed: np.ndarray, blocks: int, groups: int) -> np.ndarray:
    """Nibbles in ggml's order (a group's byte i: weight i low, i + 16 high), rows a multiple
    of 8, laid as `Nibbles.by_eight` says — chunk c's byte 4j + b holds row j's weights
    8c + b (low) and 8c + 4 + b (high): chunks 0 and 1 take the low nibbles of the group's
    bytes 8c + b and 8c + 4 + b, chunks 2 and 3 their high ones. Four bytes a word (each byte's
    nibbles stay in their byte), a quarter of the elements bytes were."""
    # [block, row, group, word]: word w holds the group's bytes 4w .. 4w + 3
    words = np.ascontiguousarray(packed).view(np.uint32).reshape(blocks, 8, groups, 4)
    chunks = _paired_nibbles(words[..., 0::2], words[..., 1::2])  # [.., (low, high), pair]
    # [block, group, chunk, row]: a chunk is its 8 rows' words
    laid = chunks.reshape(blocks, 8, groups, 4).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(laid).view(np.uint8).reshape(blocks, groups, 128)


def _paired_nibbles(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """For words of bytes `first` and `second` (same shape), byte by byte: first's low nibble
    with second's low nibble above it, then first's high nibble with second's high nibble above
    it, stacked on a new second-to-last axis."""
    low = (first & _LOW_NIBBLES) | ((second & _LOW_NIBBLES) << 4)
    high = ((first >> 4) & _LOW_NIBBLES) | (second & ~_LOW_NIBBLES)
    return np.stack([low, high], axis=-2)


def _rows_padded(values: np.ndarray, pad: int) -> np.ndarray:
    """`values` with `pad` rows of zeros below (itself where none are needed: np.pad copies a
    whole model's codes even then, seconds at 1.7B)."""
    if not pad:
        return values
    return np.pad(values, ((0, pad),) + ((0, 0),) * (values.ndim - 1))


def _fifth_bit_plane(fifth: np.ndarray, blocks: int, groups: int) -> np.ndarray:
    """5-bit codes' bit 16 as q4_rows8.c reads it, from each code's fifth bit (0/1, [rows,
    groups, 32] in order, rows a multiple of 8): per group 32 bytes, byte i holding at bit 2c + h
    the bit of chunk c's byte i, nibble h (`Nibbles.by_eight`'s chunks)."""
    # [block, group, chunk, row, 4 bytes, low/high nibble]
    halves = fifth.reshape(blocks, 8, groups, 4, 2, 4).transpose(0, 2, 3, 1, 5, 4)
    bits = halves.astype(np.uint8).reshape(blocks, groups, 4, 32, 2)
    place = np.arange(8, dtype=np.uint8).reshape(4, 1, 2)  # bit 2c + h
    return (bits << place).sum(axis=(2, 4), dtype=np.uint8)  # bits apart: the sum is their or


def _halves(raw: np.ndarray) -> np.ndarray:
    """float16 stored little-endian in the last axis (2 bytes), as float64."""
    return _stored_halves(raw).astype(np.float64)


def _stored_halves(raw: np.ndarray) -> np.ndarray:
    """float16 stored little-endian in the last axis (2 bytes), as float16."""
    return np.ascontiguousarray(raw).view(np.float16)[..., 0]


def _packed_nibbles(codes: np.ndarray) -> np.ndarray:
    """[rows, cols] codes 0..15 two a byte in ggml's order (`_nibbles` reads them back)."""
    rows, cols = codes.shape
    halves = codes.reshape(rows, cols // GROUP_SIZE, 2, GROUP_SIZE // 2)
    return (halves[:, :, 0] | (halves[:, :, 1] << 4)).astype(np.uint8).reshape(rows, -1)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """ggml's nibble order: byte j holds weight j in its low and weight j + 16 (of 32) in its
    high nibble, so a block's 16 bytes give [low nibbles..., high nibbles...]."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _q4_0(raw: np.ndarray, rows: int, cols: int) -> Int4Blocks:
    # block: float16 d, 16 bytes of codes; w = d * (q - 8)
    blocks = raw.reshape(rows, cols // 32, 18)
    scale = _halves(blocks[..., 0:2])
    packed = np.ascontiguousarray(blocks[..., 2:18]).reshape(rows, cols // 2)
    return Int4Blocks(packed, scale, np.zeros_like(scale))


def _q4_1(raw: np.ndarray, rows: int, cols: int) -> Int4Blocks:
    # block: float16 d, float16 m, 16 bytes of codes; w = d * q + m = d * (q - 8) + (m + 8d)
    blocks = raw.reshape(rows, cols // 32, 20)
    scale = _halves(blocks[..., 0:2])
    minimum = _halves(blocks[..., 2:4])
    packed = np.ascontiguousarray(blocks[..., 4:20]).reshape(rows, cols // 2)
    return Int4Blocks(packed, scale, minimum + 8.0 * scale)


def _q4_k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit (scale, min) pairs of a Q4_K super-block, from its 12 packed bytes:
    pairs 0-3 sit in the low 6 bits of bytes 0-3 / 4-7; pairs 4-7 take their low 4 bits from bytes
    8-11 and their top 2 bits from the high bits of bytes 0-3 / 4-7."""
    packed = packed.astype(np.uint16)
    low, mid, high = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
    scales = np.concatenate([low & 63, (high & 0x0F) | ((low >> 6) << 4)], axis=-1)
    mins = np.concatenate([mid & 63, (high >> 4) | ((mid >> 6) << 4)], axis=-1)
    return scales, mins


def _q4_k(raw: np.ndarray, rows: int, cols: int) -> Int4Blocks:
    # super-block of 256: float16 d, float16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of
    # codes; sub-block s (32 weights): w = d * sc[s] * q - dmin * m[s]. The codes come in four
    # 32-byte runs; run r holds sub-block 2r in its low and 2r + 1 in its high nibbles.
    blocks = raw.reshape(rows, cols // 256, 144)
    d = _halves(blocks[..., 0:2])[..., None]
    dmin = _halves(blocks[..., 2:4])[..., None]
    sc, m = _q4_k_scales(blocks[..., 4:16])
    # run r's words: bytes 0-15 and 16-31 paired give ggml's order for sub-blocks 2r and 2r + 1
    runs = np.ascontiguousarray(blocks[..., 16:144]).view(np.uint32)
    runs = runs.reshape(rows, cols // 256, 4, 2, 4)
    packed = _paired_nibbles(runs[..., 0, :], runs[..., 1, :]).view(np.uint8)
    scale = (d * sc).reshape(rows, cols // 32)
    offset = (dmin * m).reshape(rows, cols // 32)
    packed = packed.reshape(rows, cols // 2)
    return Int4Blocks(packed, scale, 8.0 * scale - offset, _k_factors(blocks))


def _k_factors(blocks: np.ndarray) -> tuple[Factored, Factored]:
    """Q4_K's and Q5_K's scales d * sc and zeros -dmin * m per 32, as they store them."""
    rows = len(blocks)
    sc, m = _q4_k_scales(blocks[..., 4:16])
    return (
        Factored(_stored_halves(blocks[..., 0:2]), sc.reshape(rows, -1).astype(np.int8)),
        Factored(-_stored_halves(blocks[..., 2:4]), m.reshape(rows, -1).astype(np.int8)),
    )


_INT4_READERS = {"Q4_0": _q4_0, "Q4_1": _q4_1, "Q4_K": _q4_k}


@dataclass(frozen=True)
class GroupedInt8:
    """A [rows, cols] weight as int8 codes and a float32 scale (and zero) per `group` weights of
    a row: w = code * scale (+ zero, in one fused multiply-add), which is exactly how gguf
    dequantizes Q8_0, Q5_0, Q5_1, Q5_K and Q6_K (their products are exact in float32, the one
    addition rounds once), so a kernel reading this form multiplies by the file's weights."""

    codes: np.ndarray  # int8 [rows, cols]
    scales: np.ndarray  # float32 [rows, cols // group]
    zeros: np.ndarray | None  # float32 [rows, cols // group], or None for pure scales
    group: int
    # Q5_K, Q6_K: the same scales (and zeros) as the file stores them
    factored: tuple[Factored, Factored | None] | None = None
    form: int = 0  # by eight: 0 float32 scales and zeros, else Factored bytes, `form` units

    @property
    def shape(self) -> tuple[int, int]:
        return self.codes.shape

    def by_eight(self) -> GroupedInt8:
        """The same codes interleaved by eight rows, as int4/c/q8_rows8.c reads them (groups of
        32, or of 16 without zeros; rows padded with zeros to a multiple of 8): per block of 8
        rows and group of 32, chunk c holds row j's codes 4c..4c+3 at bytes 4j..; scales and
        zeros [block][group of 32][its groups of `group`][8], or the factored bytes."""
        rows, cols = self.shape
        groups, blocks, sub = cols // 32, -(-rows // 8), 32 // self.group
        pad = blocks * 8 - rows
        codes = _rows_padded(self.codes, pad).reshape(blocks, 8, groups, 8, 4)
        codes = np.ascontiguousarray(codes.transpose(0, 2, 3, 1, 4)).reshape(blocks * 8, cols)
        if self.factored is not None:
            scales, zeros = self.factored
            laid = None if zeros is None else zeros.by_eight()
            return GroupedInt8(codes, scales.by_eight(), laid, self.group, None, scales.units)

        def lanes(values: np.ndarray | None) -> np.ndarray | None:
            if values is None:
                return None
            values = _rows_padded(values, pad).reshape(blocks, 8, groups, sub)
            laid = np.ascontiguousarray(values.transpose(0, 2, 3, 1))
            return laid.reshape(blocks * 8, groups * sub)

        return GroupedInt8(codes, lanes(self.scales), lanes(self.zeros), self.group)

    def five_bits(self) -> Nibbles | None:
        """The same weights as 5-bit codes (Q5_0, Q5_1, Q5_K: 5 bits a weight where int8 codes
        take 8, as llama.cpp reads them), or None where the codes need more. Q5_1's and
        Q5_K's codes are 0..31 with their own zeros, so the kernel sums the same integers;
        Q5_0's are -16..15, stored as code + 16 with zero -16 * scale (exact in float32)."""
        if self.group != GROUP_SIZE or self.codes.size == 0:
            return None
        low, high = int(self.codes.min()), int(self.codes.max())
        if self.zeros is not None and low >= 0 and high <= 31:
            codes, zeros, factored = self.codes.astype(np.uint8), self.zeros, self.factored
        elif self.zeros is None and low >= -16 and high <= 15 and self.factored is None:
            codes = (self.codes.astype(np.int16) + 16).astype(np.uint8)
            zeros, factored = np.float32(-16.0) * self.scales, None
        else:
            return None
        low_four = _packed_nibbles(codes & 15)
        return Nibbles(low_four, self.scales, zeros, factored, high=codes >> 4, bits=5)

    def dequantize(self) -> np.ndarray:
        rows, cols = self.codes.shape
        codes = self.codes.reshape(rows, -1, self.group).astype(np.float64)
        weights = codes * self.scales[..., None].astype(np.float64)
        if self.zeros is not None:
            weights = weights + self.zeros[..., None]
        return weights.reshape(rows, cols).astype(np.float32)


def _grouped_codes(kind: str, blocks: np.ndarray) -> np.ndarray:
    """The int8 codes of [rows, blocks per row, block bytes], in the row's weight order, read
    from their bits as ggml lays them (each form's dequantizer in the gguf package says the
    same: the tests compare every type's weights with it)."""
    rows = len(blocks)
    if kind == "Q8_0":  # float16 d, 32 int8 codes
        return np.ascontiguousarray(blocks[..., 2:34]).view(np.int8).reshape(rows, -1)
    if kind in ("Q5_0", "Q5_1"):  # d (and m), 32 fifth bits, 16 bytes of nibbles (ggml order)
        start = 2 if kind == "Q5_0" else 4
        field = np.ascontiguousarray(blocks[..., start : start + 4])  # bit i: weight i's
        fifth = np.unpackbits(field, axis=-1, bitorder="little")
        codes = _nibbles(blocks[..., start + 4 : start + 20]) | (fifth << 4)
        offset = 16 if kind == "Q5_0" else 0  # Q5_0's codes are -16..15
        return (codes.astype(np.int8) - np.int8(offset)).reshape(rows, -1)
    if kind == "Q5_K":  # d, dmin, 12 bytes of scales, 32 bytes of fifth bits, 128 of nibbles:
        # sub-block 2r in run r's low nibbles, 2r + 1 in its high ones; its fifth bits are bit s
        # of the 32 bytes
        supers = blocks.shape[1]
        qs = blocks[..., 48:176].reshape(rows, supers, 4, 1, 32)
        low = np.concatenate([qs & 0x0F, qs >> 4], axis=3).reshape(rows, supers, 8, 32)
        qh = blocks[..., 16:48].reshape(rows, supers, 1, 32)
        fifth = (qh >> np.arange(8, dtype=np.uint8).reshape(8, 1)) & 1
        return (low | (fifth << 4)).astype(np.int8).reshape(rows, -1)
    if kind == "Q6_K":  # 128 bytes of nibbles, 64 of bit pairs, 16 int8 scales, d: each half
        # of 256 weights is four runs of 32, run 2h + c the low (h = 0) or high nibbles of its
        # 64 bytes' c-th 32, and run r's top two bits bits 2r, 2r + 1 of its 32 bytes of pairs
        supers = blocks.shape[1]
        ql = blocks[..., 0:128].reshape(rows, supers, 2, 1, 64)
        low = np.concatenate([ql & 0x0F, ql >> 4], axis=3).reshape(rows, supers, 2, 4, 32)
        qh = blocks[..., 128:192].reshape(rows, supers, 2, 1, 32)
        high = (qh >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(4, 1)) & 3
        return ((low | (high << 4)).astype(np.int8) - np.int8(32)).reshape(rows, -1)
    raise KeyError(kind)


def _grouped_scales(kind: str, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, int]:
    """(scale, zero or None, group) per group of a row's blocks, read from the block headers
    (the codes from their bits: `_grouped_codes`)."""
    if kind in ("Q8_0", "Q5_0"):
        return _halves(blocks[..., 0:2]), None, 32
    if kind == "Q5_1":
        return _halves(blocks[..., 0:2]), _halves(blocks[..., 2:4]), 32
    if kind == "Q5_K":
        d = _halves(blocks[..., 0:2])[..., None]
        dmin = _halves(blocks[..., 2:4])[..., None]
        sc, m = _q4_k_scales(blocks[..., 4:16])
        return (d * sc).reshape(len(blocks), -1), -(dmin * m).reshape(len(blocks), -1), 32
    if kind == "Q6_K":  # 16 int8 scales at bytes 192-207, float16 d at 208
        d = _halves(blocks[..., 208:210])[..., None]
        sc = blocks[..., 192:208].view(np.int8).astype(np.float64)
        return (d * sc).reshape(len(blocks), -1), None, 16
    raise KeyError(kind)


def _factored_scales(kind: str, blocks: np.ndarray) -> tuple[Factored, Factored | None] | None:
    """The K-quants' scales (and zeros) as they store them: Q6_K a float16 d per super-block and
    int8 scales per 16; Q5_K Q4_K's d, dmin and 6-bit scales and mins per 32."""
    if kind == "Q6_K":
        sc = np.ascontiguousarray(blocks[..., 192:208]).view(np.int8)
        return Factored(_stored_halves(blocks[..., 208:210]), sc.reshape(len(blocks), -1)), None
    return _k_factors(blocks) if kind == "Q5_K" else None


_BLOCK_BYTES = {
    "Q8_0": (32, 34),
    "Q5_0": (32, 22),
    "Q5_1": (32, 24),
    "Q5_K": (256, 176),
    "Q6_K": (256, 210),
}


@dataclass(frozen=True)
class _Tensor:
    """A tensor as the gguf package's reader describes one: type, dims as stored, data."""

    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType
    shape: tuple[int, ...]
    data: np.ndarray


class GGUFTensors:
    """The tensors and metadata of one GGUF file, memory-mapped; each read converts one tensor."""

    def __init__(self, path: str | Path) -> None:
        gguf = _gguf()
        self.path = Path(path)
        self.header = read_header(self.path).mapped_anew()  # its pages go with these tensors
        self._tensors = {
            name: _Tensor(
                name,
                gguf.GGMLQuantizationType(info.type_id),
                info.dims,
                self.header.data(name),
            )
            for name, info in self.header.tensors.items()
        }

    def metadata(self, key: str, default: Any = None) -> Any:
        value = self.header.metadata.get(key)
        return default if value is None else value

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def type_name(self, name: str) -> str:
        return self._tensor(name).tensor_type.name

    def shape(self, name: str) -> tuple[int, ...]:
        """Shape as torch orders it: [rows (out features), cols (in features)]."""
        return tuple(int(n) for n in reversed(self._tensor(name).shape))

    def _tensor(self, name: str):
        try:
            return self._tensors[name]
        except KeyError:
            raise SpecchatError(f"{self.path.name} has no tensor {name}") from None

    def is_int4(self, name: str) -> bool:
        tensor = self._tensor(name)
        return tensor.tensor_type.name in _INT4_READERS and len(tensor.shape) == 2

    def int4_blocks(self, name: str) -> Int4Blocks:
        """A Q4_0 / Q4_1 / Q4_K weight as codes, scales and zeros, without dequantizing it."""
        tensor = self._tensor(name)
        rows, cols = self.shape(name)
        raw = np.asarray(tensor.data, dtype=np.uint8)
        return _INT4_READERS[tensor.tensor_type.name](raw, rows, cols)

    def dense(self, name: str) -> np.ndarray:
        """The tensor dequantized to float32, [rows, cols] (or 1-D), exactly as the gguf package
        dequantizes it."""
        tensor = self._tensor(name)
        kind = tensor.tensor_type.name
        if kind not in dense_types() | int4_types():
            raise SpecchatError(
                f"{self.path.name}: tensor {name} is {kind}, which the int4 runtime does not "
                f"read (it reads {', '.join(sorted(dense_types() | int4_types()))})"
            )
        gguf = _gguf()
        values = gguf.quants.dequantize(np.asarray(tensor.data), tensor.tensor_type)
        return np.array(values.reshape(self.shape(name)), dtype=np.float32)  # writable, owned

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as stored, [rows, bytes per row] (memory-mapped)."""
        return np.asarray(self._tensor(name).data, dtype=np.uint8)

    def grouped_int8(self, name: str) -> GroupedInt8 | None:
        """A Q8_0 / Q5_0 / Q5_1 / Q5_K / Q6_K weight as int8 codes with per-group scales (and
        zeros), or None when it is not one, or when the codes fail to give back gguf's
        dequantized weights exactly (then it is carried in float32 instead)."""
        tensor = self._tensor(name)
        kind = tensor.tensor_type.name
        if kind not in _BLOCK_BYTES or len(tensor.shape) != 2:
            return None
        rows, cols = self.shape(name)
        per_block, block_bytes = _BLOCK_BYTES[kind]
        raw = self.raw(name).reshape(rows, cols // per_block, block_bytes)
        scale, zero, group = _grouped_scales(kind, raw)
        codes = np.empty((rows, cols), dtype=np.int8)
        # a few thousand rows at a time: an embedding-sized tensor needs no temporaries whole
        for start in range(0, rows, _ROWS_AT_ONCE):
            part = slice(start, min(rows, start + _ROWS_AT_ONCE))
            codes[part] = _grouped_codes(kind, raw[part])
        if kind == "Q8_0" and (codes == -128).any():  # the kernels' codes are -127..127
            return None
        # rows spread over the tensor checked against the gguf package's own weights: a file
        # whose scales do not give them (NaN, say) is carried in float32 as gguf reads it
        sample = np.unique(np.linspace(0, rows - 1, min(rows, _ROWS_CHECKED)).astype(int))
        exact = _gguf().quants.dequantize(np.asarray(tensor.data[sample]), tensor.tensor_type)
        check = GroupedInt8(
            codes[sample],
            scale[sample].astype(np.float32),
            None if zero is None else zero[sample].astype(np.float32),
            group,
        )
        if not np.array_equal(check.dequantize(), exact.reshape(len(sample), cols)):
            return None
        return GroupedInt8(
            codes,
            scale.astype(np.float32),
            None if zero is None else zero.astype(np.float32),
            group,
            _factored_scales(kind, raw),
        )

    def dense_rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Some rows of a 2-D tensor dequantized (an embedding lookup), float32 [len(rows), cols]."""
        tensor = self._tensor(name)
        gguf = _gguf()
        raw = np.asarray(tensor.data[rows])
        if tensor.tensor_type == gguf.GGMLQuantizationType.Q8_0:
            # gguf's own dequantization of the same blocks, without its generic calls: a decoding
            # step's new token's row took it 0.1 ms
            blocks = raw.reshape(-1, _BLOCK_BYTES["Q8_0"][1])
            values = blocks[:, 2:].view(np.int8).astype(np.float32)
            values *= _stored_halves(blocks[:, :2]).astype(np.float32)[:, None]
        else:
            values = gguf.quants.dequantize(raw, tensor.tensor_type)
        return values.reshape(len(rows), -1).astype(np.float32, copy=False)

    def check_readable(self, names: list[str]) -> None:
        """One line naming the first tensor of a type this runtime cannot carry."""
        readable = dense_types() | int4_types()
        for name in names:
            kind = self.type_name(name)
            if kind not in readable:
                raise SpecchatError(
                    f"{self.path.name}: tensor {name} is {kind}; the int4 runtime reads "
                    f"{', '.join(sorted(readable))}"
                )
