"""The figures module and the typed stats, on known numbers."""

from __future__ import annotations

import pytest

from specchat.decoding.registry import baseline_name
from specchat.engine.events import StepEvent
from specchat.engine.stats import GenerationStats
from specchat.metrics.figures import race_rows, speedup


def _stats(tokens: int, steps: int, seconds: float, drafted: int = 0, accepted: int = 0):
    return GenerationStats(
        generated_tokens=tokens,
        steps=steps,
        decode_seconds=seconds,
        drafted=drafted,
        accepted=accepted,
    )


def test_with_step_counts_steps_and_not_the_tail():
    stats = GenerationStats()
    stats = stats.with_step(StepEvent((1, 2, 3), "abc", 4, 2, "pld", 0.5))
    stats = stats.with_step(StepEvent((), "", 3, 0, "pld", 0.25))  # only EOS: still a step
    stats = stats.with_step(StepEvent((), "d", 0, 0, "pld", 0.0, tail=True))
    assert (stats.steps, stats.generated_tokens, stats.drafted, stats.accepted) == (2, 3, 7, 2)
    assert stats.tokens_per_step == 1.5 and stats.tokens_per_second == 4.0
    assert stats.acceptance_rate == pytest.approx(2 / 7)


def test_stats_json_round_trip_and_old_rows():
    stats = _stats(5, 2, 0.125, 4, 3).with_decoder("pld", {"max_ngram": 3})
    data = stats.as_dict()
    assert data["tokens_per_second"] == 40.0 and data["target_passes"] == 2
    assert GenerationStats.from_dict(data) == stats
    assert GenerationStats.from_dict({"generated_tokens": 3}) == GenerationStats(generated_tokens=3)


def test_race_rows_take_medians_and_measure_against_the_baseline():
    base = baseline_name()
    rows = race_rows(
        [
            (
                "pld",
                [_stats(10, 5, 0.1, 8, 5), _stats(10, 4, 0.05, 8, 6), _stats(10, 5, 0.2, 8, 5)],
            ),
            (base, [_stats(10, 10, 0.2), _stats(10, 10, 0.1), _stats(10, 10, 0.2)]),
        ],
        base,
    )
    pld, greedy = rows
    assert pld.tokens_per_second == 100.0 and greedy.tokens_per_second == 50.0
    assert pld.speedup == 2.0 and greedy.speedup == 1.0
    assert pld.tokens_per_step == 2.0 and pld.acceptance_rate == 0.625 and pld.drafted == 8
    assert greedy.drafted == 0
    # without the baseline, the first decoder is the reference
    alone = race_rows([("pld", [_stats(10, 5, 0.1)]), ("x", [_stats(10, 5, 0.2)])], "greedy")
    assert [r.speedup for r in alone] == [1.0, 0.5]
    assert speedup(10.0, 0.0) is None and race_rows([], "greedy") == []
