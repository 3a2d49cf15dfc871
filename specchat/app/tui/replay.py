"""A race replayed at its measured pace: the decoders run one after another (sharing the cores
would make every figure lie), then their panes replay side by side from one start, each step
appearing at the moment it was produced in its own run — so the faster decoder visibly wins.

A step's moment is the engine's own measurement: the run's prefill, then every step's seconds,
summed. The tok/s figures are computed from the same numbers, so what the eye sees and what the
table says cannot disagree. The screen reads time from a clock it is handed, so a test drives a
replay through virtual time.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from specchat.engine.events import StepEvent

REPLAY_FRAME_SECONDS = 1 / 30


@dataclass(frozen=True)
class Timeline:
    """One run's step events and when each appeared, in seconds from the start of the run."""

    steps: tuple[StepEvent, ...]
    times: tuple[float, ...]

    @classmethod
    def of_run(cls, steps: Sequence[StepEvent], prefill_seconds: float) -> Timeline:
        times = []
        moment = prefill_seconds
        for step in steps:
            moment += step.seconds  # a tail (text released at the end) takes no time
            times.append(moment)
        return cls(tuple(steps), tuple(times))

    @property
    def end(self) -> float:
        """When the run's last step appeared (its prefill when it made none)."""
        return self.times[-1] if self.times else 0.0

    def shown_at(self, seconds: float) -> int:
        """How many steps are on screen `seconds` into the replay."""
        return bisect_right(self.times, seconds)


def finishing_places(ends: Sequence[float | None]) -> list[int | None]:
    """1 for the run that finished first, 2 for the next…; None for a pane with no run."""
    order = sorted((end, i) for i, end in enumerate(ends) if end is not None)
    places: list[int | None] = [None] * len(ends)
    for place, (_, index) in enumerate(order, start=1):
        places[index] = place
    return places
