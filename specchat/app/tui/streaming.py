"""How an answer's steps reach the screen without costing the engine: the worker drops each step
event into the `AnswerStream` and goes on at once; the screen takes everything put since the last
flush and repaints once for the lot, at a pace its `FlushPacer` sets.

A message per step would wake the event loop on every step (hundreds of times a second with a
speculative decoder), and each wake takes the GIL and a core from the model; a repaint per step
would also lay the transcript out again. Batched, the UI's work per second is bounded by the
flush rate, whatever the decoder's speed, and the worker never waits on the UI.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from specchat.engine.events import StepEvent

# Flushes come at most 20 a second (smooth to the eye) and at least 4 (never looks stalled).
FASTEST_FLUSH = 1 / 20
SLOWEST_FLUSH = 1 / 4
# The UI thread's share of one core while an answer streams (benchmarks/measure_ui_cost.py): a
# flush and the repaint it causes take the UI thread long enough that flushing at the fastest rate
# throughout slowed the model measurably; every point the UI takes comes out of the model's
# spinning threads and more (their barriers stall when one is preempted).
UI_SHARE = 0.05


class FlushPacer:
    """How long to wait before the next flush: long enough that the UI thread's own CPU time
    since the last flush (the flush, its repaint, whatever else the loop did) stays within
    `share` of a core — so a terminal or machine where repaints are dear gets fewer of them,
    and one where they are cheap gets 20 a second."""

    def __init__(
        self,
        share: float = UI_SHARE,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self._share = share
        self._clock = cpu_clock
        self._last = cpu_clock()
        self.interval = FASTEST_FLUSH

    def next_interval(self) -> float:
        """Call from the UI thread at each flush: the seconds until the next one."""
        now = self._clock()
        used, self._last = now - self._last, now
        wanted = used / self._share
        # halfway towards what the last flush asked for: one slow repaint does not stall the text
        self.interval = min(SLOWEST_FLUSH, max(FASTEST_FLUSH, (self.interval + wanted) / 2))
        return self.interval


class AnswerStream:
    """One answer's step events handed from the worker thread to the event loop, and the pace at
    which the screen flushes them. `put` and `take` may run at the same time from the two
    threads (deque appends and pops are atomic)."""

    def __init__(self, pacer: FlushPacer | None = None) -> None:
        self._events: deque[StepEvent] = deque()
        self.pacer = pacer or FlushPacer()

    def put(self, event: StepEvent) -> None:
        self._events.append(event)

    def take(self) -> list[StepEvent]:
        """Every step put since the last take, in order."""
        taken = []
        while True:
            try:
                taken.append(self._events.popleft())
            except IndexError:
                return taken
