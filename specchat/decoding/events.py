"""What the engine tells the world: small immutable events, safe to pass between threads."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepEvent:
    """One decoding step: the tokens it appended and the text that became final."""

    tokens: tuple[int, ...]
    text: str
    drafted: int
    accepted: int
    decoder: str
    seconds: float


@dataclass(frozen=True)
class DoneEvent:
    """The answer ended. `token_ids` excludes the prompt and the EOS that ended it."""

    finish_reason: str  # eos | max_tokens | stop | context_full | cancelled
    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    text: str
    stats: dict[str, object] = field(default_factory=dict)


Event = StepEvent | DoneEvent
