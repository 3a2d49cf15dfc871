"""What a k-token forward pass costs on one backend, measured once and kept on disk.

Speculative decoders choose their draft length from it: on a compute-bound CPU a block of 8 costs
several single-token passes, on an overhead-bound runtime about one, and the best draft length
differs by that much.
"""

from __future__ import annotations

import json
import os
import statistics
import time

from specchat import locations
from specchat.backends.base import Block

_REPEATS = 5
_FILLER_TOKEN = 198


class BlockCostTable:
    """Lazy per-k cost of a chain pass for one backend, cached per model, device and threads."""

    def __init__(self, backend, key: str) -> None:
        self._backend = backend
        self._key = f"{key}|{backend.device}|threads={getattr(backend, 'threads', '')}"
        self._costs: dict[int, float] = {}
        self._loaded = False

    def _path(self):
        return locations.cache_dir() / "block_costs.json"

    def _load(self) -> None:
        self._loaded = True
        try:
            table = json.loads(self._path().read_text()).get(self._key, {})
            self._costs.update({int(k): float(v) for k, v in table.items()})
        except (OSError, ValueError, AttributeError):
            pass

    def _save(self) -> None:
        path = self._path()
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                data = {}
        except (OSError, ValueError):
            data = {}
        data[self._key] = {str(k): v for k, v in sorted(self._costs.items())}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)

    def cost(self, k: int) -> float:
        if not self._loaded:
            self._load()
        if k not in self._costs:
            self._costs[k] = self._measure(k)
            self._save()
        return self._costs[k]

    def _measure(self, k: int) -> float:
        backend = self._backend
        n = backend.n_committed
        block = Block.chain([_FILLER_TOKEN] * k)
        times = []
        for _ in range(_REPEATS + 1):
            start = time.perf_counter()
            backend.evaluate(block)
            times.append(time.perf_counter() - start)
            backend.rollback(n)
        return statistics.median(times[1:])
