"""A model's weights as the int4 kernels read them, kept on disk so that a later load reads them.

Laying a GGUF file's weights out for the kernels (nibbles by eight rows, K-quant scales
factored, pairs of blocks joined) is numpy over every weight: 1.0 s of the bundled model's
start and 11 s of a 1.7B Q4_K_M file's, at every start. The laid-out weights are written once,
under the cache dir, as one file of arrays and a manifest naming them; a later load reads that
file whole (a sequential read where laying out was numpy over every weight).

An entry is keyed by the model file (path, size, modification time), the kernels' build (its
level, and with it how blocks are paired) and the Python that lays weights out, so a change to
any of them lays them out again. Each entry is about its model's size: an older entry of the
same file is removed when a new one is written, only the `_KEPT` most recently used are kept,
and none is written where the disk would be left with less free space than the entry takes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from specchat import locations
from specchat.backends.int4.kernels import Kernels
from specchat.backends.int4.linear import RowsLinear
from specchat.json_tables import read_table, write_table

_KEPT = 3  # models whose laid-out weights stay on disk
_ALIGN = 64  # each array starts on a cache line
_FORMAT = 1
# the code that lays weights out: a change to it is a new entry
_LAYOUT_SOURCES = [
    *(Path(__file__).with_name(name) for name in ("linear.py", "model.py", "families.py")),
    Path(__file__).parent.parent / "gguf" / "tensors.py",
]


def folder() -> Path:
    return locations.cache_dir() / "int4-packed"


class PackedWeights:
    """The laid-out weights of one model file: those kept on disk, or those laid out this load
    (`linear`), written once the whole model is (`keep`)."""

    def __init__(self, model_path: Path, library: Kernels) -> None:
        where = str(model_path.resolve())
        stat = model_path.stat()
        identity = [where, str(stat.st_size), str(stat.st_mtime_ns), library.key, str(_FORMAT)]
        identity += [hashlib.sha256(source.read_bytes()).hexdigest() for source in _LAYOUT_SOURCES]
        self._prefix = f"{model_path.stem[:40]}-{_digest([where])[:8]}"
        self._base = folder() / f"{self._prefix}-{_digest(identity)[:16]}"
        self._library = library
        self._laid: dict[str, RowsLinear] = {}
        self.found = self._read()  # {} where none is kept, or it cannot be read whole

    def linear(self, name: str, lay_out: Callable[[], RowsLinear]) -> RowsLinear:
        """Weight `name` as kept, else laid out now (and kept by `keep`)."""
        kept = self.found.get(name)
        if kept is not None:
            return kept
        self._laid[name] = laid = lay_out()
        return laid

    def keep(self) -> None:
        """Write this load's laid-out weights where none were found: best effort, since a load
        that cannot keep them still runs."""
        if self.found or not self._laid:
            return
        try:
            self._write()
        except OSError:
            for partial in self._base.parent.glob(f".{self._base.name}.*"):
                partial.unlink(missing_ok=True)

    def _read(self) -> dict[str, RowsLinear]:
        manifest_path, data_path = _named(self._base, ".json"), _named(self._base, ".bin")
        manifest = read_table(manifest_path)
        try:
            if manifest.get("format") != _FORMAT or data_path.stat().st_size != manifest["size"]:
                return {}
            data = _read_whole(data_path, manifest["size"])
            found = {}
            for name, entry in manifest["linears"].items():
                arrays = {
                    field: _view(data, *laid) if laid else None
                    for field, laid in entry["arrays"].items()
                }
                found[name] = RowsLinear.of_layout(entry["scalars"], arrays, self._library)
            os.utime(manifest_path)  # most recently used
            return found
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    def _write(self) -> None:
        manifest: dict[str, object] = {"format": _FORMAT, "linears": {}}
        size, chunks = 0, []
        for name, linear in self._laid.items():
            scalars, arrays = linear.layout()
            laid_arrays: dict[str, list | None] = {}
            for field, array in arrays.items():
                if array is None:
                    laid_arrays[field] = None
                    continue
                size += -size % _ALIGN
                laid_arrays[field] = [array.dtype.str, list(array.shape), size]
                chunks.append((size, array))
                size += array.nbytes
            manifest["linears"][name] = {"scalars": scalars, "arrays": laid_arrays}
        manifest["size"] = size
        target = self._base.parent
        target.mkdir(parents=True, exist_ok=True)
        if shutil.disk_usage(target).free < 2 * size:
            return
        partial = target / f".{self._base.name}.{os.getpid()}"
        with open(_named(partial, ".bin"), "wb") as out:
            for offset, array in chunks:
                out.write(b"\0" * (offset - out.tell()))
                out.write(np.ascontiguousarray(array).data)  # no copy
            # on disk before the load goes on: written back later, by the kernel's flusher, it
            # took CPU time from the passes the cost sweeps time after the first answers
            out.flush()
            os.fsync(out.fileno())
        os.replace(_named(partial, ".bin"), _named(self._base, ".bin"))
        write_table(_named(self._base, ".json"), manifest, indent=None)  # the entry whole now
        _prune(self._prefix, self._base)


def _read_whole(path: Path, size: int) -> np.ndarray:
    """The file read into memory of the process's own, not mapped: numpy asks the kernel for huge
    pages for an array this large, and a page cache's 4 KiB pages made every 4-token pass 5%
    slower (the hardware prefetcher stops at each page's end: passes of 4 and more tokens lean on
    it, passes of one and two ask for their codes ahead). Reading it costs what copying does: a
    twentieth of a second for the bundled model, under a second for a 1.7B file."""
    data = np.empty(size, dtype=np.uint8)
    view, done = memoryview(data), 0
    with open(path, "rb", buffering=0) as source:
        while done < size:  # a read returns at most 2 GiB
            got = source.readinto(view[done : done + (1 << 28)])
            if not got:
                raise ValueError("the file ended early")
            done += got
    data.flags.writeable = False
    return data


def _view(data: np.ndarray, dtype: str, shape: list[int], offset: int) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(data, dtype=np.dtype(dtype), count=count, offset=offset).reshape(shape)


def _named(base: Path, suffix: str) -> Path:
    """`base` with `suffix` added (a model's stem has dots of its own: Q4_1, 1.7B)."""
    return base.with_name(base.name + suffix)


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _prune(prefix: str, kept: Path) -> None:
    """Remove the same file's older entries, then all but the `_KEPT` most recently used."""
    entries = sorted(
        folder().glob("*.json"), key=lambda path: path.stat().st_mtime_ns, reverse=True
    )
    others = [e for e in entries if e.name != kept.name + ".json"]
    stale = [e for e in others if e.name.startswith(prefix + "-")]
    rest = [e for e in others if e not in stale]
    for entry in stale + rest[_KEPT - 1 :]:
        entry.unlink(missing_ok=True)  # the manifest first: a reader never reads a half entry
        entry.with_name(entry.name.removesuffix(".json") + ".bin").unlink(missing_ok=True)
