"""The contract between the engine and a decoder.

Before and after every step the backend has committed every context token but the last, which is
"pending": the next pass evaluates it first (as the root of the block) and so yields the logits of
the token after it. Decoders know nothing of threads, widgets or how a backend lays out its cache.
"""

from __future__ import annotations

from typing import Protocol

from specchat.backends.base import Backend
from specchat.decoding.sampling import Sampler
from specchat.decoding.step import Step


class Decoder(Protocol):
    name: str

    def reset(self, context: list[int]) -> None:
        """(Re)build internal state (indexes, pools, draft caches) from the committed context."""

    def step(self, target: Backend, context: list[int], sampler: Sampler, room: int) -> Step:
        """One target pass; yields at most `room` tokens (what max tokens and the context allow)."""

    def prepare(self, target: Backend) -> None:
        """Optional: one-off measurements (block costs) the engine runs before timing starts."""

    def params(self) -> dict[str, object]:
        """The parameters in use, as shown in stats and the status bar."""
