"""A safety net under every speculative decoder: measure what speculation really earns.

Cost models predict; this measures. It keeps a decaying average of tokens and seconds for the
decoder's own steps and for plain one-token steps, runs whichever is faster, and probes the other
now and then, since text and load change. Both kinds of step are exact, so any mix of them is too.
"""

from __future__ import annotations

import time

from specchat.backends.base import Backend
from specchat.decoding.plain import PlainDecoder
from specchat.decoding.sampling import Sampler
from specchat.decoding.step import Step

_DECAY = 0.85
_PROBE_EVERY = 12


class _Rate:
    def __init__(self) -> None:
        self.tokens = 0.0
        self.seconds = 0.0
        self.samples = 0

    def add(self, tokens: int, seconds: float) -> None:
        self.tokens = _DECAY * self.tokens + tokens
        self.seconds = _DECAY * self.seconds + seconds
        self.samples += 1

    @property
    def value(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class PayoffGuard:
    """Wraps a speculative decoder; falls back to plain steps while speculation does not pay."""

    def __init__(self, inner, warmup: int = 4) -> None:
        self.inner = inner
        self.name = inner.name
        self._warmup = warmup
        self._spec = _Rate()
        self._plain = _Rate()
        self._since_probe = 0
        self._plain_decoder = PlainDecoder(inner.name)

    def params(self) -> dict[str, object]:
        return self.inner.params()

    def prepare(self, target: Backend) -> None:
        prepare = getattr(self.inner, "prepare", None)
        if prepare is not None:
            prepare(target)

    def reset(self, context: list[int]) -> None:
        self.inner.reset(context)

    def _use_speculation(self) -> bool:
        if self._spec.samples < self._warmup:
            return True
        if self._plain.samples < 2:
            return False
        self._since_probe += 1
        if self._since_probe >= _PROBE_EVERY:
            self._since_probe = 0
            return self._spec.value < self._plain.value  # probe the one not in use
        return self._spec.value >= self._plain.value

    def step(self, target: Backend, context: list[int], sampler: Sampler, room: int) -> Step:
        speculate = self._use_speculation()
        start = time.perf_counter()
        step = (self.inner if speculate else self._plain_decoder).step(
            target, context, sampler, room
        )
        (self._spec if speculate else self._plain).add(
            len(step.tokens), time.perf_counter() - start
        )
        return step
