"""A GGUF file's header: its metadata and where each tensor lies, read without touching the data.

The gguf package's reader turns every metadata array (a vocabulary of 49,152 strings, its scores
and types) into numpy objects before anything else: about two seconds for the bundled model. The
int4 runtime needs the model's hyper-parameters and its tensors' types, shapes and offsets, and
the runtime choice needs them to know whether the int4 runtime can run a file at all; this reads
them in milliseconds, skipping large arrays. Tensor data is memory-mapped, in the shapes the gguf
package gives them (float arrays for F32/F16, bytes per row for block-quantized types), so its
dequantizer reads them as it reads its own.
"""

from __future__ import annotations

import copy
import hashlib
import os
import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from specchat.errors import SpecchatError

_MAGIC = b"GGUF"
_ALIGNMENT_KEY = "general.alignment"
_KEPT_ARRAY = 64  # metadata arrays up to this long are read; longer ones are skipped
_MAX_DIMS = 4  # GGML_MAX_DIMS
# what llama.cpp sizes a model by, under {arch}.; and which of them it divides by
_SIZES = (
    "block_count", "context_length", "embedding_length", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "attention.key_length",
    "attention.value_length", "rope.dimension_count", "vocab_size",
)  # fmt: skip
_ABOVE_ZERO = (
    "block_count", "embedding_length", "attention.head_count", "attention.key_length",
    "attention.value_length", "rope.dimension_count",
)  # fmt: skip
_MAX_LAYERS = 512  # LLAMA_MAX_LAYERS
# RoPE over the whole head, keys = values
_WHOLE_HEAD_ROPE = ("llama", "smollm3", "qwen2", "qwen3", "phi3")
_EPSILONS = ("attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon")
_WHOLE_NUMBER_TYPES = {24, 25, 26, 27}  # I8, I16, I32, I64: never a weight

# GGUF metadata value types: (struct format, size) for scalars
_SCALARS = {
    0: ("<B", 1),
    1: ("<b", 1),
    2: ("<H", 2),
    3: ("<h", 2),
    4: ("<I", 4),
    5: ("<i", 4),
    6: ("<f", 4),
    7: ("<?", 1),
    10: ("<Q", 8),
    11: ("<q", 8),
    12: ("<d", 8),
}
_STRING, _ARRAY = 8, 9
_FLOAT_TYPES = {0: np.float32, 1: np.float16}  # GGML_TYPE_F32, GGML_TYPE_F16
_VECTOR_TYPES = {0, 1, 30}  # what a norm or bias may be: F32, F16, BF16


class InvalidModel(SpecchatError):
    """A file no runtime can load, and why (`why`: the listing of models says it alone)."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"cannot load {name}: not a valid GGUF model ({why})")
        self.why = why


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # as stored: innermost first
    type_id: int
    offset: int  # from the start of the data section


class _Cursor:
    def __init__(self, data: memoryview) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str, size: int) -> Any:
        value = struct.unpack_from(fmt, self.data, self.at)[0]
        self.at += size
        return value

    def u32(self) -> int:
        return self.take("<I", 4)

    def u64(self) -> int:
        return self.take("<Q", 8)

    def need(self, size: int) -> None:
        """A count or length from the file must fit in what is left of it."""
        if size > len(self.data) - self.at:
            raise ValueError(f"a length of {size} bytes runs past the end at byte {self.at}")

    def raw_string(self) -> memoryview:
        length = self.u64()
        self.need(length)
        self.at += length
        return self.data[self.at - length : self.at]

    def string(self) -> str:
        """A key, a name or a value as llama.cpp reads it: as a C string (`as_c_string`)."""
        return as_c_string(self.raw_string()).decode("utf-8", "replace")

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.take(*_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.u32(), self.u64()
            self.need(count * (_SCALARS[item][1] if item in _SCALARS else 8))  # 8: a length
            if count > _KEPT_ARRAY:
                self.skip(item, count)
                return None
            return [self.value(item) for _ in range(count)]
        raise ValueError(f"unknown metadata type {kind}")

    def skip(self, kind: int, count: int) -> None:
        if kind in _SCALARS:
            self.at += _SCALARS[kind][1] * count
        elif kind == _STRING:
            self.at = _string_ends(self.data, self.at, count)[-1]
        else:
            for _ in range(count):
                self.value(kind)


def read_header(path: str | Path) -> GGUFHeader:
    """`path`'s header, parsed once in a process while the file's header bytes stay the same: a
    start reads it to choose the runtime, to check it for llama.cpp and to load it, and a parse
    walks the vocabulary's arrays (13.5 ms of the bundled model's; digesting its header bytes
    again, to know it is the same, 1.5 ms). A file written over in place within the clock's
    tick (the same inode, size and mtime: a test's crafted files) still reads anew."""
    path = Path(path)
    where = os.path.realpath(path)
    kept = _HEADERS.pop(where, None)
    if kept is None or not kept.reads_as_parsed():
        kept = GGUFHeader(path)
    _HEADERS[where] = kept  # the latest last
    while len(_HEADERS) > _HEADERS_KEPT:
        del _HEADERS[next(iter(_HEADERS))]
    return kept


_HEADERS: dict[str, GGUFHeader] = {}  # by real path, the least recently read first
_HEADERS_KEPT = 4


def _string_ends(data: memoryview, at: int, count: int) -> list[int]:
    """Where each of `count` strings from `at` on ends (`at` first): a vocabulary's arrays hold
    50,000-150,000, walked in one tight loop (a cursor's calls took 3x as long)."""
    length_at, size = struct.Struct("<Q").unpack_from, len(data)
    ends = [at]
    for _ in range(count):
        at += 8 + length_at(data, at)[0]
        if at > size:
            raise ValueError(f"a string runs past the end at byte {ends[-1]}")
        ends.append(at)
    return ends


def as_c_string(raw: memoryview | bytes) -> bytes:
    """A GGUF string as llama.cpp reads it where it takes a C string: up to its first NUL byte."""
    return bytes(raw).split(b"\0", 1)[0]


class GGUFHeader:
    """The metadata and tensor table of one GGUF file (`SpecchatError` if it is not one)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
            cursor = _Cursor(memoryview(self._map))
            if bytes(self._map[:4]) != _MAGIC:
                raise ValueError("no GGUF magic")
            cursor.at = 4
            version = cursor.u32()
            if version < 2:
                raise ValueError(f"GGUF version {version} is too old")
            n_tensors, n_fields = cursor.u64(), cursor.u64()
            if max(n_tensors, n_fields) > len(self._map):  # each needs a byte at least
                raise ValueError(f"{n_tensors} tensors and {n_fields} fields cannot fit")
            self.metadata: dict[str, Any] = {}
            self._arrays: dict[str, tuple[int, int, int]] = {}  # key: item type, count, offset
            for _ in range(n_fields):
                key = cursor.string()
                kind = cursor.u32()
                if key in self.metadata:  # llama.cpp finds the first of keys alike as C strings
                    cursor.value(kind)
                    continue
                if kind == _ARRAY:
                    item, count = struct.unpack_from("<IQ", cursor.data, cursor.at)
                    self._arrays[key] = (item, count, cursor.at + 12)
                self.metadata[key] = cursor.value(kind)
            self.tensors: dict[str, TensorInfo] = {}
            for _ in range(n_tensors):
                name = cursor.string()
                n_dims = cursor.u32()
                if not 1 <= n_dims <= _MAX_DIMS:
                    raise ValueError(f"tensor {name} has {n_dims} dimensions")
                dims = tuple(cursor.u64() for _ in range(n_dims))
                if min(dims) < 1 or int(np.prod(dims, dtype=object)) >= 2**48:
                    raise ValueError(f"tensor {name} has dimensions {dims}")
                if name in self.tensors:
                    raise ValueError(f"tensor {name} appears twice")
                type_id, offset = cursor.u32(), cursor.u64()
                self.tensors[name] = TensorInfo(name, dims, type_id, offset)
            alignment = self.metadata.get(_ALIGNMENT_KEY, 32)
            if type(alignment) is not int or alignment < 1 or alignment & (alignment - 1):
                raise ValueError(f"alignment {alignment!r} is not a power of two")
            for info in self.tensors.values():
                if info.offset % alignment:
                    raise ValueError(f"tensor {info.name} is not aligned to {alignment} bytes")
        except (ValueError, OSError, OverflowError, MemoryError, struct.error, IndexError) as exc:
            raise self._invalid(str(exc)) from None
        except RecursionError:
            raise self._invalid("metadata arrays nested too deep") from None
        self._data_start = -(-cursor.at // alignment) * alignment
        end = max(
            (self._data_start + t.offset + self._size(t) for t in self.tensors.values()), default=0
        )
        if end > len(self._map):
            raise self._invalid(f"{len(self._map)} bytes where its tensors need {end}: truncated?")
        self._parsed_as = self._header_digest()

    def _header_digest(self) -> tuple[int, int, bytes]:
        """The file's size, its inode and a digest of its bytes up to the tensors' data, read
        from the file now."""
        with self.path.open("rb") as file:
            stat = os.fstat(file.fileno())
            head = file.read(self._data_start)
        return stat.st_size, stat.st_ino, hashlib.blake2b(head, digest_size=16).digest()

    def mapped_anew(self) -> GGUFHeader:
        """This header over a mapping of the file of its own: what reads tensors through it (a
        runtime's weights) lets go of the pages it read when it goes, not when the header kept
        for the path does (kept, a closed runtime's 94 MB of the bundled model's pages stayed in
        the process's memory)."""
        other = copy.copy(self)
        other._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        return other

    def reads_as_parsed(self) -> bool:
        """Whether the file still holds the header this parsed (`read_header`)."""
        try:
            return self._header_digest() == self._parsed_as
        except OSError:
            return False

    def check_llama(self) -> None:
        """Refuse in one line what llama.cpp would meet with an assertion that ends the process:
        the hyper-parameters it sizes buffers by and divides by (whole numbers, or per-layer lists
        of them; a layer count, width and head count above zero) and a vocabulary to tokenize
        with. llama.cpp checks the rest (tensor shapes, a missing key) and fails the load."""
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str) or not arch:
            raise self._invalid("no general.architecture")
        for key in _SIZES:
            value = self.metadata.get(f"{arch}.{key}")
            if value is None:
                continue
            values = value if isinstance(value, list) else [value]
            if not values or any(type(v) is not int or not 0 <= v < 2**24 for v in values):
                raise self._invalid(f"{arch}.{key} is {value!r}")
            if key in _ABOVE_ZERO and not isinstance(value, list) and value == 0:
                raise self._invalid(f"{arch}.{key} is 0")
            if key == "block_count" and max(values) > _MAX_LAYERS:
                raise self._invalid(f"{max(values)} layers (llama.cpp runs {_MAX_LAYERS} at most)")
        if arch in _WHOLE_HEAD_ROPE:
            self._check_head(arch)
        for key in _EPSILONS:
            eps = self.metadata.get(f"{arch}.{key}")
            if eps is not None and not (isinstance(eps, float) and 0.0 <= eps < 1.0):
                raise self._invalid(f"{arch}.{key} is {eps!r}")
        for info in self.tensors.values():
            if info.type_id in _WHOLE_NUMBER_TYPES:
                raise self._invalid(f"tensor {info.name} holds integers, not weights")
            if len(info.dims) == 1 and info.type_id not in _VECTOR_TYPES:
                raise self._invalid(f"vector {info.name} is {self.type_name(info.name)}")
        if "tokenizer.ggml.model" in self.metadata and not isinstance(
            self.metadata["tokenizer.ggml.model"], str
        ):
            raise self._invalid("tokenizer.ggml.model is not a name")
        self._check_vocabulary()

    def _check_head(self, arch: str) -> None:
        """These architectures' graph builders assert (abort) that keys, values and RoPE all span
        the whole head."""
        meta = self.metadata
        heads = meta.get(f"{arch}.attention.head_count")
        width = meta.get(f"{arch}.embedding_length")
        if not isinstance(heads, int) or not isinstance(width, int) or heads <= 0:
            return  # llama.cpp refuses a missing or per-layer count itself
        head = meta.get(f"{arch}.attention.key_length", width // heads)
        for key in ("attention.value_length", "rope.dimension_count"):
            value = meta.get(f"{arch}.{key}", head)
            if value != head:
                raise self._invalid(f"{arch}.{key} is {value!r} for heads of {head}")

    def _check_vocabulary(self) -> None:
        """llama.cpp indexes the scores and token types by token id, unchecked, and asserts
        that no two tokens are spelled alike — spelled as it reads them: a token string is a C
        string to it, so a NUL byte ends it ("Ġc\\0author" is "Ġc")."""
        if "tokenizer.ggml.tokens" not in self._arrays:
            return
        item, count, at = self._arrays["tokenizer.ggml.tokens"]
        if item != _STRING:
            raise self._invalid("tokenizer.ggml.tokens are not strings")
        for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
            if key in self._arrays and self._arrays[key][1] != count:
                raise self._invalid(f"{self._arrays[key][1]} {key} for {count} tokens")
        ends = _string_ends(memoryview(self._map), at, count)
        blob = self._map[at : ends[-1]].tobytes()
        spellings = {
            blob[start + 8 - at : end - at].partition(b"\0")[0]
            for start, end in zip(ends, ends[1:], strict=False)
        }
        if len(spellings) != count:
            raise self._invalid(
                f"{count - len(spellings)} tokens spelled as another is, as llama.cpp reads "
                "them (a NUL byte ends a token)"
            )

    def vocabulary_key(self) -> str:
        """A digest of the tokenizer's model and its tokens, in id order ("" without tokens):
        two files with the same key mean the same thing by every token id, so one can draft for
        the other."""
        if "tokenizer.ggml.tokens" not in self._arrays:
            return ""
        item, count, at = self._arrays["tokenizer.ggml.tokens"]
        if item != _STRING:
            return ""
        end = _string_ends(memoryview(self._map), at, count)[-1]
        digest = hashlib.sha256(str(self.metadata.get("tokenizer.ggml.model", "")).encode())
        digest.update(self._map[at:end].tobytes())
        return digest.hexdigest()

    def _invalid(self, why: str) -> InvalidModel:
        return InvalidModel(self.path.name, why)

    def _size(self, info: TensorInfo) -> int:
        """The bytes tensor `info` takes in the file."""
        count = int(np.prod(info.dims)) if info.dims else 1
        if info.type_id in _FLOAT_TYPES:
            return count * np.dtype(_FLOAT_TYPES[info.type_id]).itemsize
        gguf = self._gguf
        try:
            block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(info.type_id)]
        except (ValueError, KeyError):
            raise self._invalid(f"tensor {info.name} has unknown type {info.type_id}") from None
        if info.dims[0] % block:
            raise self._invalid(f"tensor {info.name}'s rows are not whole blocks of {block}")
        return count // block * size

    @cached_property
    def _gguf(self):
        import gguf

        return gguf

    def type_name(self, name: str) -> str:
        return self._gguf.GGMLQuantizationType(self.tensors[name].type_id).name

    def data(self, name: str) -> np.ndarray:
        """The tensor as the gguf package's reader gives it: float32/float16 values in their
        shape, or for block types the bytes of each row (memory-mapped, read-only)."""
        gguf = self._gguf
        info = self.tensors[name]
        shape = tuple(reversed(info.dims))
        count = int(np.prod(shape)) if shape else 1
        start = self._data_start + info.offset
        if info.type_id in _FLOAT_TYPES:
            kind = np.dtype(_FLOAT_TYPES[info.type_id])
            flat = self._map[start : start + count * kind.itemsize].view(kind)
            return flat.reshape(shape)
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(info.type_id)]
        row_bytes = shape[-1] // block * size
        flat = self._map[start : start + count // shape[-1] * row_bytes]
        return flat.reshape((*shape[:-1], row_bytes))
