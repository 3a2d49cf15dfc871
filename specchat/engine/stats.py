"""One answer's counts: what the done event carries and the TUI's status bar shows live.

`GenerationStats` is a frozen value. The engine starts one per answer and adds each step event it
sends (`with_step`); the status bar adds the same events as they arrive, so live and final figures
follow one rule. Its figures (tok/s, tok/step, acceptance) come from `figures`. Dicts exist only at
the edges: `as_dict` for JSON and the history database, `from_dict` to read a stored answer back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from specchat.metrics import figures


class CountedStep(Protocol):
    """What the stats count of a step event (`events.StepEvent`, which carries these stats in
    its done event)."""

    tokens: tuple[int, ...]
    drafted: int
    accepted: int
    seconds: float
    tail: bool
    distance: float | None
    ending: int


@dataclass(frozen=True)
class GenerationStats:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    steps: int = 0  # target passes
    drafted: int = 0
    accepted: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    time_to_first_token: float | None = None
    decoders: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    # steps whose tokens were not drawn from the target's distribution (soft matching), and the
    # total variation from it summed over their positions
    inexact_steps: int = 0
    distance: float = 0.0
    # end-of-sequence tokens steps produced (StepEvent.ending): counted per step, not generated
    ending_tokens: int = 0

    def with_step(self, event: CountedStep) -> GenerationStats:
        """These stats plus one step event; a tail (text released at the end) is no step."""
        if event.tail:
            return self
        return replace(
            self,
            steps=self.steps + 1,
            generated_tokens=self.generated_tokens + len(event.tokens),
            drafted=self.drafted + event.drafted,
            accepted=self.accepted + event.accepted,
            decode_seconds=self.decode_seconds + event.seconds,
            inexact_steps=self.inexact_steps + (event.distance is not None),
            distance=self.distance + (event.distance or 0.0),
            ending_tokens=self.ending_tokens + event.ending,
        )

    def with_decoder(self, name: str, values: Mapping[str, object]) -> GenerationStats:
        """Record the parameters of a decoder the answer used (the first time it is seen)."""
        if name in self.decoders:
            return self
        return replace(self, decoders={**self.decoders, name: dict(values)})

    @property
    def tokens_per_second(self) -> float:
        return figures.tokens_per_second(self.generated_tokens, self.decode_seconds)

    @property
    def tokens_per_step(self) -> float:
        return figures.tokens_per_step(self.generated_tokens + self.ending_tokens, self.steps)

    @property
    def acceptance_rate(self) -> float:
        return figures.acceptance_rate(self.accepted, self.drafted)

    @property
    def target_distribution(self) -> bool:
        """Whether every token was drawn from the target's distribution (greedy counts: its
        tokens are the target's own choice); False once soft matching verified a step."""
        return self.inexact_steps == 0

    @property
    def distance_per_token(self) -> float | None:
        """Mean total variation from the target's distribution per generated token (None:
        exact)."""
        if self.target_distribution:
            return None
        return self.distance / max(1, self.generated_tokens)

    def as_dict(self) -> dict[str, object]:
        """The JSON form (`ask --json`, the history database), figures rounded."""
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
            "decoders": {name: dict(values) for name, values in self.decoders.items()},
            "target_distribution": self.target_distribution,
            "total_variation_per_token": None
            if self.distance_per_token is None
            else round(self.distance_per_token, 6),
            "inexact_steps": self.inexact_steps,
            "distance": round(self.distance, 6),
            "ending_tokens": self.ending_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> GenerationStats:
        """Stats from their JSON form; missing counts are 0 (rows stored by older versions), and
        derived figures are recomputed, not read."""
        ttft = data.get("time_to_first_token")
        return cls(
            prompt_tokens=int(data.get("prompt_tokens", 0)),
            generated_tokens=int(data.get("generated_tokens", 0)),
            steps=int(data.get("steps", 0)),
            drafted=int(data.get("drafted", 0)),
            accepted=int(data.get("accepted", 0)),
            prefill_seconds=float(data.get("prefill_seconds", 0.0)),
            decode_seconds=float(data.get("decode_seconds", 0.0)),
            time_to_first_token=None if ttft is None else float(ttft),
            decoders={
                str(name): dict(values) for name, values in dict(data.get("decoders", {})).items()
            },
            inexact_steps=int(data.get("inexact_steps", 0)),
            distance=float(data.get("distance", 0.0)),
            ending_tokens=int(data.get("ending_tokens", 0)),
        )
