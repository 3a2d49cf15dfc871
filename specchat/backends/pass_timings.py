"""What passes cost as decoding meets them: a larger pass's own time plus what it slows the plain
passes after it, over a settled plain pass.

The table measured at load (`block_cost.py`) prices a draft from a few passes timed in a row on a
cache it rolls back. In use a larger pass also slows the next few plain passes (on llama.cpp the
graph is rebuilt for the new shape, and the effect fades over two or three passes), and a draft
that looks a quarter of a pass dearer than it is gets made where it loses. So every pass the
backend runs is timed here too: a plain pass counts as settled once `SETTLE` plain passes followed
the last larger one, and a larger pass is charged its own seconds plus the excess of the `SETTLE`
plain passes after it over the settled median. Medians over a recent window keep a busy minute
from moving the ratios much: load slows plain and larger passes alike.
"""

from __future__ import annotations

import statistics
from collections import deque

SETTLE = 3  # plain passes a larger one is charged for; after them a plain pass is settled
WINDOW = 64  # recent samples kept per size
MIN_SAMPLES = 8  # samples of a size (and of settled plain passes) before its ratio counts


class PassTimings:
    """Pass times in use, reported as ratios to a settled one-token pass."""

    def __init__(self) -> None:
        self._plain: deque[float] = deque(maxlen=WINDOW)
        self._plain_median: float | None = None
        self._settled = 0  # settled plain passes seen
        self._by_size: dict[int, deque[float]] = {}
        self._open: list | None = None  # [size, seconds charged so far, plain passes to charge]
        self._since_larger = SETTLE
        self.closed = 0  # larger passes fully charged so far

    def observe(self, k: int, seconds: float, chain: bool = True) -> bool:
        """Record one pass of `k` tokens (`chain`: one branch; a tree's passes are not priced
        here but unsettle the plain passes after them). True when a larger pass's charge closed."""
        if k > 1:
            closed = self._close()
            self._open = [k, seconds, SETTLE] if chain else None
            self._since_larger = 0
            return closed
        self._since_larger += 1
        if self._open is not None:
            if self._plain_median is None:
                self._open = None  # nothing settled to compare with yet
                return False
            self._open[1] += seconds - self._plain_median
            self._open[2] -= 1
            return self._close() if self._open[2] == 0 else False
        if self._since_larger > SETTLE:
            self._plain.append(seconds)
            self._settled += 1
            if self._settled >= MIN_SAMPLES and self._settled % 4 == 0:
                self._plain_median = statistics.median(self._plain)
        return False

    def _close(self) -> bool:
        if self._open is None:
            return False
        k, seconds, _ = self._open
        self._by_size.setdefault(k, deque(maxlen=WINDOW)).append(seconds)
        self._open = None
        self.closed += 1
        return True

    def ratios(self) -> dict[int, float]:
        """A k-token pass over a settled plain pass, for every size seen often enough."""
        if self._plain_median is None:
            return {}
        return {
            k: statistics.median(samples) / self._plain_median
            for k, samples in sorted(self._by_size.items())
            if len(samples) >= MIN_SAMPLES
        }
