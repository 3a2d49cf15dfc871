"""The thread count a runtime's passes run with, chosen by their measured time as the load on the
machine changes.

Why: a pass's threads meet at a barrier after every matmul. Beside a busy process, one of two
threads on two cores shares its core and every barrier waits for it, so each pass takes several
times what it takes alone (measured: greedy at a quarter of its idle speed with one busy shell
loop beside it) — while one thread alone keeps a whole core. So when passes run much slower than
they do alone, the next passes try fewer threads and keep them where they are faster; now and
then a few passes try the full count again, and it comes back when the load has gone.

A pass's result does not depend on its thread count (each output row is one thread's fixed sum),
so this changes speed only, never an answer.
"""

from __future__ import annotations

import contextlib
import os
import statistics
from collections import deque
from collections.abc import Iterator

SLOW = 1.6  # a pass this many times slower than the same size alone: the machine is busy
WINDOW = 6  # passes judged together
SETTLE = 2  # passes after a change of count that are not judged (the threads' caches refill)
PROBE_EVERY = 48  # passes on fewer threads between two tries of the full count
RETRY_AFTER = 400  # passes before fewer threads are tried again, where they did not help
SWITCH = "SPECCHAT_ADAPT_THREADS"  # "1": the count follows the load; else always the full count


def adapting() -> bool:
    """Off unless asked for: measured end to end (`benchmarks/measure_busy.py`), answers beside a
    busy process were no faster with it yet, though single passes were (docs/benchmarks.md)."""
    return os.environ.get(SWITCH, "0") == "1"


def held_threads(backend) -> contextlib.AbstractContextManager:
    """`backend`'s passes on its full thread count while the context lasts, where its count
    follows the load (a measurement of its pass costs must time the count it is kept for)."""
    by_load = getattr(backend, "threads_by_load", None)
    return by_load.held() if by_load is not None else contextlib.nullcontext()


class ThreadsByLoad:
    """Watches pass times (`observe`) and says the thread count for the next pass (`threads`).

    Each pass is compared with the fastest pass of its size seen on the full count (the machine
    alone, as near as this process has seen it). On the full count: a window whose median pass
    is SLOW × that or slower moves to half the threads. On fewer: after a window, kept if it took
    less time than the full count's last window, else back to the full count (and not tried
    again for a while); every PROBE_EVERY passes a window runs on the full count again, and stays
    there when it is no longer slow."""

    def __init__(self, full: int) -> None:
        self.full = max(1, full)
        self.threads = self.full
        self._fastest: dict[int, float] = {}  # seconds of a k-token pass on the full count
        self._window: deque[float] = deque(maxlen=WINDOW)
        self._busy_ratio = 0.0  # the full count's last slow window
        self._passes_on_fewer = 0
        self._settling = 0
        self._probing = False
        self._confirming = False
        self._wait = 0  # passes before fewer threads may be tried again
        self._held = 0

    @property
    def reduced(self) -> bool:
        """Whether passes now run on fewer threads than the full count."""
        return self.threads < self.full

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Passes on the full count, unjudged (a measurement of the pass costs)."""
        self._held += 1
        self._set(self.full)
        try:
            yield
        finally:
            self._held -= 1

    def observe(self, k: int, seconds: float) -> None:
        if self._held or self.full == 1 or seconds <= 0:
            return
        if self._settling:
            self._settling -= 1
            if self.threads < self.full:
                self._passes_on_fewer += 1
            return
        if self.threads == self.full:
            fastest = self._fastest.get(k)
            if fastest is None or seconds < fastest:
                self._fastest[k] = fastest = seconds
            self._window.append(seconds / fastest)
            self._on_full()
        else:
            fastest = self._fastest.get(k)
            if fastest is None:  # a size never timed on the full count: no judgement
                return
            self._window.append(seconds / fastest)
            self._on_fewer()

    def _on_full(self) -> None:
        if self._wait:
            self._wait -= 1
        if len(self._window) < WINDOW:
            return
        slow = statistics.median(self._window) >= SLOW  # most passes slow: not one stray pass
        if self._probing:  # a try of the full count while on fewer threads
            self._probing = False
            if not slow:
                self._window.clear()  # the load has gone: stay
                return
            self._busy_ratio = statistics.fmean(self._window)
            self._set(max(1, self.full // 2))
        elif slow and not self._wait and not self._confirming:
            self._confirming = True  # this window may have begun before the load: one more
            self._window.clear()
        elif self._confirming:
            self._confirming = False
            if slow:
                self._busy_ratio = statistics.fmean(self._window)
                self._set(max(1, self.full // 2))
            else:
                self._window.clear()

    def _on_fewer(self) -> None:
        self._passes_on_fewer += 1
        judged = len(self._window) == WINDOW and self._passes_on_fewer == SETTLE + WINDOW
        # judged by the mean: time is what a window costs, and a thread that waits for a core
        # makes a few passes very slow rather than every pass a little
        if judged and statistics.fmean(self._window) >= self._busy_ratio:  # fewer did not help
            self._wait = RETRY_AFTER
            self._set(self.full)
            return
        if self._passes_on_fewer >= PROBE_EVERY:
            self._probing = True
            self._set(self.full)

    def _set(self, threads: int) -> None:
        self.threads = threads
        self._window.clear()
        self._passes_on_fewer = 0
        self._settling = SETTLE
