"""Whether a model's weights stream from main memory or sit in the CPU's last cache, measured.

Why a speed figure needs it: a one-token pass reads every weight once, so on a CPU it runs at the
speed weights reach the cores, while a drafted token's extra cost is arithmetic. Where a cache
holds the weights (a server's L3 of hundreds of MB, shared with other machines' guests), the
one-token pass runs fast and drafts look dear; where they stream from memory (a laptop's 8-36 MB
L3 against the bundled model's 94 MB) the same drafts pay much more. On one Xeon VM the bundled
model's one-token int4 pass took 3.3 ms on hours the host's 480 MB L3 held its weights and 5.5 ms
on hours it did not, with a drafted row's cost the same in milliseconds, and the default's speedup
on code edits read 1.88x and 2.15x (docs/bench-log.md, session 55). So figures say which it was.

The probe reads a buffer of the weights' size over and over, and one larger than the last-level
cache (which no cache holds), and compares their read rates: about equal, the weights stream from
memory. It takes one to two seconds (most of it faulting in the larger buffer) and holds its
buffers only while it reads them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_MB = 1024 * 1024
# a cache is taken to hold the weights when they read this much faster than main memory
_CACHED_RATIO = 1.3
_FALLBACK_CACHE = 512 * _MB  # where the last-level cache's size cannot be read


@dataclass(frozen=True)
class MemoryReading:
    weights_mb: float  # the working set read: the model file's size
    weights_gbps: float  # its read rate, read over and over
    memory_gbps: float  # a buffer larger than the last-level cache
    last_cache_mb: float | None  # the last-level cache's size, where the system says
    read: bool = True  # False: weights larger than any cache, not read (main memory's rate)

    @property
    def cached(self) -> bool:
        """The weights read clearly faster than main memory: a cache holds them."""
        return self.weights_gbps >= _CACHED_RATIO * self.memory_gbps

    def describe(self) -> str:
        where = "cache-resident" if self.cached else "from memory"
        how = f"read at {self.weights_gbps:.0f} GB/s" if self.read else "larger than the cache"
        return (
            f"weights {where}: {self.weights_mb:.0f} MB {how}, memory {self.memory_gbps:.0f} GB/s"
        )

    def as_dict(self) -> dict:
        return {
            "weights_mb": round(self.weights_mb, 1),
            "weights_gbps": round(self.weights_gbps, 1),
            "memory_gbps": round(self.memory_gbps, 1),
            "last_cache_mb": self.last_cache_mb,
            "cached": self.cached,
            "read": self.read,
        }


def last_cache_bytes() -> int | None:
    """The largest cache of CPU 0, as Linux lists it (None elsewhere)."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = entry.read_text().strip().upper()
        except OSError:
            continue
        unit = {"K": 1024, "M": _MB, "G": 1024 * _MB}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes) if sizes else None


def read_rate(nbytes: int, rounds: int) -> float:
    """GB/s of one core reading `nbytes` over and over (the median round after a first read)."""
    buffer = np.ones(max(nbytes, 64), dtype=np.uint8)
    buffer.max()  # the pages in, and the cache warm with what fits
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        buffer.max()  # a vectorised scan: it reads as fast as the data arrives
        seconds.append(time.perf_counter() - start)
    return buffer.nbytes / sorted(seconds)[len(seconds) // 2] / 1e9


def probe(weights_bytes: int) -> MemoryReading:
    """Read rates of the weights' working set and of main memory, now. Weights as large as the
    buffer that stands for main memory are not read (no cache holds them; an 8B model's would
    be gigabytes): their rate is main memory's."""
    cache = last_cache_bytes()
    large = max(3 * (cache or _FALLBACK_CACHE) // 2, 64 * _MB)
    memory = read_rate(large, 3)
    read = weights_bytes < large
    return MemoryReading(
        weights_mb=weights_bytes / _MB,
        weights_gbps=read_rate(weights_bytes, 15) if read else memory,
        memory_gbps=memory,
        last_cache_mb=cache / _MB if cache else None,
        read=read,
    )
