"""A safety net under every speculative decoder: measure what speculation really earns.

Cost models predict; this measures. It keeps a decaying average of tokens and seconds for the
decoder's own steps and for plain one-token steps, runs whichever is faster, and probes the other
now and then, since text and load change. Both kinds of step are exact, so any mix of them is too.
"""

from __future__ import annotations

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
    """Says whether the next step should speculate, from the measured rates of both kinds."""

    def __init__(self, warmup: int = 4) -> None:
        self._warmup = warmup
        self._spec = _Rate()
        self._plain = _Rate()
        self._since_probe = 0

    def speculate(self) -> bool:
        if self._spec.samples < self._warmup:
            return True
        if self._plain.samples < 2:
            return False
        self._since_probe += 1
        if self._since_probe >= _PROBE_EVERY:
            self._since_probe = 0
            return self._spec.value < self._plain.value  # probe the one not in use
        return self._spec.value >= self._plain.value

    def record(self, speculated: bool, tokens: int, seconds: float) -> None:
        (self._spec if speculated else self._plain).add(tokens, seconds)
