"""What the engine tells the world: small immutable events, safe to pass between threads."""

from __future__ import annotations

from dataclasses import dataclass, field

from specchat.decoding.stats import GenerationStats
from specchat.decoding.step import StepEvent

__all__ = ["DoneEvent", "Event", "StepEvent"]


@dataclass(frozen=True)
class DoneEvent:
    """The answer ended. `token_ids` excludes the prompt and the EOS that ended it."""

    finish_reason: str  # eos | max_tokens | stop | context_full | cancelled | error
    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    text: str
    stats: GenerationStats = field(default_factory=GenerationStats)
    error: str | None = None  # finish "error": why a remote server's answer broke off (one line)


Event = StepEvent | DoneEvent
