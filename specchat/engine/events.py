"""What the engine tells the world: small immutable events, safe to pass between threads."""

from __future__ import annotations

from dataclasses import dataclass, field

from specchat.engine.stats import GenerationStats


@dataclass(frozen=True)
class StepEvent:
    """One decoding step as the engine reports it: the tokens it appended (after EOS and limits
    were applied: possibly none) and the text that became final, with the step's counts and time.

    The engine sends one per decoder step, also a step that only produced EOS, so figures summed
    from the events equal the engine's own. The one exception is `tail`: text the detokenizer held
    back (a possible stop string, a split character) and released when the answer ended; it is no
    step and carries no tokens.
    """

    tokens: tuple[int, ...]
    text: str
    drafted: int
    accepted: int
    decoder: str
    seconds: float
    tail: bool = False
    source: str = ""  # where the step's draft came from (Step.source)
    rejected: tuple[int, ...] = ()  # drafted, not taken (Step.rejected)
    depth: int = 0  # the draft length the policy chose
    pass_seconds: float = 0.0  # what the target pass cost
    distance: float | None = None  # not drawn from the target's distribution (Step.distance)
    # an end-of-sequence token the step's pass produced: a token of the step (never shown), so
    # that a one-token-a-step method reads 1.00 tokens a step on an answer that ended
    ending: int = 0


@dataclass(frozen=True)
class DoneEvent:
    """The answer ended. `token_ids` excludes the prompt and the EOS that ended it."""

    finish_reason: str  # eos | max_tokens | stop | context_full | repeating | cancelled | error
    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    text: str
    stats: GenerationStats = field(default_factory=GenerationStats)
    error: str | None = None  # finish "error": why a remote server's answer broke off (one line)


Event = StepEvent | DoneEvent
