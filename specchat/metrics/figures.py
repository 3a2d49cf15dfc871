"""Every speed figure specchat shows, computed one way: tokens per second, tokens per step,
acceptance, speedup over the registry's baseline, and the rows of a race.

The engine's stats, the TUI's status bar and race summary, and `compare` all read them from here,
so a figure never means two things.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


def tokens_per_second(tokens: int, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else 0.0


def tokens_per_step(tokens: int, steps: int) -> float:
    """Mean accepted length per target pass, counting the target's own token."""
    return tokens / steps if steps else 0.0


def acceptance_rate(accepted: int, drafted: int) -> float:
    """The share of drafted tokens the target kept (0 when nothing was drafted)."""
    return accepted / drafted if drafted else 0.0


def not_target_distribution(distance_per_token: float | None) -> str | None:
    """What the status line, `--json`, race summaries and bench rows say of an answer that soft
    matching verified: it is not sampled from the target's distribution, and by how far it moved
    (mean total variation per token). None: drawn as the target draws."""
    if distance_per_token is None:
        return None
    return (
        "soft matching: NOT sampled from the target's distribution "
        f"(TV {distance_per_token:.3f}/token)"
    )


def speedup(tokens_per_second: float, baseline_tokens_per_second: float) -> float | None:
    """How many times the baseline's speed; None when the baseline has no speed."""
    if baseline_tokens_per_second <= 0:
        return None
    return tokens_per_second / baseline_tokens_per_second


class RunStats(Protocol):
    """What a race row reads from one run (`stats.GenerationStats` has it)."""

    @property
    def generated_tokens(self) -> int: ...
    @property
    def drafted(self) -> int: ...
    @property
    def tokens_per_second(self) -> float: ...
    @property
    def tokens_per_step(self) -> float: ...
    @property
    def acceptance_rate(self) -> float: ...


@dataclass(frozen=True)
class RaceRow:
    """One decoder in a race: medians over its runs, tokens and drafted of its last run."""

    decoder: str
    tokens: int
    tokens_per_second: float
    speedup: float | None
    tokens_per_step: float
    acceptance_rate: float
    drafted: int  # 0: it drafted nothing, acceptance does not apply


def race_rows(runs: Sequence[tuple[str, Sequence[RunStats]]], baseline: str) -> list[RaceRow]:
    """A row per (decoder, its runs), in order; speedup against `baseline` (the registry's) when
    it ran, else against the first decoder. A single run gives its own figures."""
    medians = [
        (
            name,
            statistics.median(r.tokens_per_second for r in stats),
            statistics.median(r.tokens_per_step for r in stats),
            statistics.median(r.acceptance_rate for r in stats),
            stats[-1],
        )
        for name, stats in runs
    ]
    if not medians:
        return []
    base_speed = next((m[1] for m in medians if m[0] == baseline), medians[0][1])
    return [
        RaceRow(
            decoder=name,
            tokens=last.generated_tokens,
            tokens_per_second=speed,
            speedup=speedup(speed, base_speed),
            tokens_per_step=per_step,
            acceptance_rate=acceptance,
            drafted=last.drafted,
        )
        for name, speed, per_step, acceptance, last in medians
    ]
