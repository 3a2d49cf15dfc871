"""How an answer's steps reach the screen without costing the engine: the worker drops each step
event into a `StepBuffer` and goes on at once; the screen takes everything buffered at most
`FLUSH_SECONDS` apart and repaints once for the lot.

A message per step would wake the event loop on every step (hundreds of times a second with a
speculative decoder), and each wake takes the GIL and a core from the model; a repaint per step
would also lay the transcript out again. Batched, the UI's work per second is bounded by the
flush rate, whatever the decoder's speed, and the worker never waits on the UI.
"""

from __future__ import annotations

from collections import deque

from specchat.decoding.events import StepEvent

# 20 repaints a second: smooth to the eye. Each costs the UI thread about 2–4 ms on a 2-core
# machine (one frame of the answer's live tail and the status bar), so the UI takes well under a
# tenth of one core while the model streams, whatever the model's pace.
FLUSH_SECONDS = 1 / 20


class StepBuffer:
    """Step events handed from one worker thread to the event loop. `put` and `take` may run
    at the same time from the two threads (deque appends and pops are atomic)."""

    def __init__(self) -> None:
        self._events: deque[StepEvent] = deque()

    def put(self, event: StepEvent) -> None:
        self._events.append(event)

    def take(self) -> list[StepEvent]:
        """Everything put since the last take, in order."""
        taken = []
        while True:
            try:
                taken.append(self._events.popleft())
            except IndexError:
                return taken
