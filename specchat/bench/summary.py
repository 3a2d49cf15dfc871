"""Benchmark arithmetic, kept pure so it can be tested on known numbers.

Spec-Bench's definitions: a question's speed is its generated tokens over its decoding seconds; a
method's speed in a category is the mean of its questions' speeds; speedup is that mean over the
baseline's mean on the same questions.
"""

from __future__ import annotations

from dataclasses import dataclass

from specchat.metrics import figures
from specchat.metrics.oracle import efficiency

OVERALL = "overall"


@dataclass(frozen=True)
class QuestionRow:
    question_id: int | str
    category: str
    decoder: str
    tokens: int
    seconds: float
    steps: int
    drafted: int
    accepted: int
    identical_to_greedy: bool | None
    first_divergence: dict | None = None
    # the oracle over the drafter's own proposals (decoding.oracle), in pass-cost seconds
    oracle_seconds: float | None = None
    plain_seconds: float | None = None
    # soft matching: steps not sampled from the target's distribution, and their summed total
    # variation from it (GenerationStats.inexact_steps / distance)
    inexact_steps: int = 0
    distance: float = 0.0
    ending_tokens: int = 0  # end-of-sequence tokens: tokens of their steps, not generated

    @property
    def tokens_per_second(self) -> float:
        return figures.tokens_per_second(self.tokens, self.seconds)


def summarize(rows: list[QuestionRow], baseline: str) -> dict[str, dict[str, dict[str, object]]]:
    """decoder -> category (and "overall") -> figures."""
    decoders = list(dict.fromkeys(r.decoder for r in rows))
    categories = list(dict.fromkeys(r.category for r in rows))
    summary: dict[str, dict[str, dict[str, object]]] = {}
    base_speed = {
        cat: _mean_speed([r for r in rows if r.decoder == baseline and _in(r, cat)])
        for cat in [*categories, OVERALL]
    }
    for decoder in decoders:
        summary[decoder] = {}
        for cat in [*categories, OVERALL]:
            mine = [r for r in rows if r.decoder == decoder and _in(r, cat)]
            if not mine:
                continue
            speed = _mean_speed(mine)
            ratio = figures.speedup(speed, base_speed[cat])
            steps = sum(r.steps for r in mine)
            drafted = sum(r.drafted for r in mine)
            accepted = sum(r.accepted for r in mine)
            judged = [r for r in mine if r.identical_to_greedy is not None]
            summary[decoder][cat] = {
                "tokens_per_second": round(speed, 3),
                "speedup": None if ratio is None else round(ratio, 4),
                # None where a method reports no steps (a library's own generate)
                "mean_accepted_tokens": round(
                    figures.tokens_per_step(sum(r.tokens + r.ending_tokens for r in mine), steps), 4
                )
                if steps
                else None,
                "acceptance_rate": round(figures.acceptance_rate(accepted, drafted), 4)
                if steps
                else None,
                "exact_rate": round(
                    sum(bool(r.identical_to_greedy) for r in judged) / len(judged), 4
                )
                if judged
                else None,
                **_oracle(mine, ratio),
                "total_variation_per_token": _distance(mine),
                "questions": len(mine),
            }
    return summary


def _oracle(rows: list[QuestionRow], speedup: float | None) -> dict[str, object]:
    """The oracle's speedup, computed like the measured one (mean of per-question speeds over the
    plain loop's, both at the measured pass costs), and the share of it realised."""
    judged = [r for r in rows if r.oracle_seconds and r.plain_seconds]
    if not judged:
        return {"oracle": None, "efficiency": None}
    oracle = figures.speedup(
        sum(figures.tokens_per_second(r.tokens, r.oracle_seconds) for r in judged),
        sum(figures.tokens_per_second(r.tokens, r.plain_seconds) for r in judged),
    )
    share = efficiency(speedup, oracle)
    return {"oracle": round(oracle, 4), "efficiency": None if share is None else round(share, 4)}


def _distance(rows: list[QuestionRow]) -> float | None:
    """Mean total variation from the target's distribution per generated token; None where
    every token was drawn from it."""
    if not any(r.inexact_steps for r in rows):
        return None
    return round(sum(r.distance for r in rows) / max(1, sum(r.tokens for r in rows)), 6)


def _in(row: QuestionRow, category: str) -> bool:
    return category == OVERALL or row.category == category


def _mean_speed(rows: list[QuestionRow]) -> float:
    speeds = [r.tokens_per_second for r in rows if r.seconds > 0]
    return sum(speeds) / len(speeds) if speeds else 0.0
