"""Running generation figures, shared by the engine's done event and the live status bar."""

from __future__ import annotations

from dataclasses import dataclass, field


def tokens_per_second(tokens: int, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else 0.0


def tokens_per_step(tokens: int, steps: int) -> float:
    """Mean accepted length per target pass, counting the target's own token."""
    return tokens / steps if steps else 0.0


def acceptance_rate(accepted: int, drafted: int) -> float:
    return accepted / drafted if drafted else 0.0


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    time_to_first_token: float | None = None
    decoders: dict[str, dict[str, object]] = field(default_factory=dict)

    def add_step(self, tokens: int, drafted: int, accepted: int, seconds: float) -> None:
        self.steps += 1
        self.generated_tokens += tokens
        self.drafted += drafted
        self.accepted += accepted
        self.decode_seconds += seconds

    @property
    def tokens_per_second(self) -> float:
        return tokens_per_second(self.generated_tokens, self.decode_seconds)

    @property
    def tokens_per_step(self) -> float:
        return tokens_per_step(self.generated_tokens, self.steps)

    @property
    def acceptance_rate(self) -> float:
        return acceptance_rate(self.accepted, self.drafted)

    def as_dict(self) -> dict[str, object]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "steps": self.steps,
            "target_passes": self.steps,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "tokens_per_step": round(self.tokens_per_step, 4),
            "prefill_seconds": round(self.prefill_seconds, 6),
            "decode_seconds": round(self.decode_seconds, 6),
            "time_to_first_token": None
            if self.time_to_first_token is None
            else round(self.time_to_first_token, 6),
            "tokens_per_second": round(self.tokens_per_second, 3),
            "decoders": self.decoders,
        }
