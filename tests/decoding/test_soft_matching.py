"""Soft matching (the draft decoder's opt-in `soft_match` β): never on by default, labelled as
not sampled from the target's distribution wherever its answers show, with its distance from
that distribution measured right, and keeping at least what exact rejection sampling keeps on the
same random numbers."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from specchat.app.tui.figures import Figures, status_text
from specchat.bench.report import soft_matching_lines
from specchat.bench.summary import QuestionRow, summarize
from specchat.decoding.draft_model import DraftModelDecoder
from specchat.decoding.sampling import Sampler, SamplingParams, soft_distance, verify_tree
from specchat.decoding.speculative import Draft
from specchat.engine.local import Engine
from specchat.engine.protocol import GenerationRequest
from tests.cli import run_cli
from tests.tiny_models import tiny_backend

BETA = 0.5


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def _chain_case(rng: np.random.Generator, vocab: int = 12, depth: int = 4):
    """Target logits for a chain of `depth` drafted tokens, the draft's q and its draws."""
    logits = (rng.normal(size=(depth + 1, vocab)) * 2).astype(np.float32)
    q = [_softmax(rng.normal(size=vocab) * 2) for _ in range(depth)]
    tokens = [int(rng.choice(vocab, p=row)) for row in q]
    return logits, Draft.chain(0, tokens, q)


def test_soft_matching_is_off_by_default():
    assert DraftModelDecoder.defaults()["soft_match"] == 0.0
    assert DraftModelDecoder.param("soft_match").help.count("NOT") == 1


def test_soft_keeps_at_least_what_exact_keeps_on_the_same_random_numbers():
    rng = np.random.default_rng(0)
    more = 0
    for seed in range(400):
        logits, chain = _chain_case(rng)
        exact = verify_tree(
            logits, chain.children, Sampler(SamplingParams(1.0, seed=seed)), chain.q
        )
        soft = verify_tree(
            logits, chain.children, Sampler(SamplingParams(1.0, seed=seed)), chain.q, BETA
        )
        assert len(soft.accepted) >= len(exact.accepted)
        assert exact.distance is None and soft.distance is not None and soft.distance >= 0
        more += len(soft.accepted) > len(exact.accepted)
    assert more > 5  # and sometimes more


def _soft_output(p: np.ndarray, q: np.ndarray, beta: float) -> np.ndarray:
    """Soft matching's distribution of the token at one position, by its definition: x ~ q kept
    with probability 1 where 1 − p/q ≤ β (or p ≥ q), else p/q; else a draw from max(0, p − q)."""
    keep = np.where(p >= (1 - beta) * q, 1.0, p / q)
    residual = np.maximum(p - q, 0)
    return q * keep + (1 - (q * keep).sum()) * residual / residual.sum()


def test_the_measured_distance_is_the_total_variation_of_what_soft_matching_draws():
    p = np.array([0.3, 0.25, 0.2, 0.1, 0.1, 0.05])
    q = np.array([0.4, 0.3, 0.1, 0.1, 0.05, 0.05])
    vocab = len(p)
    logits = np.log(np.stack([p, p])).astype(np.float32)
    p = Sampler(SamplingParams(1.0)).probs(logits[0])
    drawn = _soft_output(p, q, BETA)
    tv = 0.5 * np.abs(drawn - p).sum()
    assert tv > 0.02  # the case moves the distribution
    assert soft_distance(p, q, BETA) == pytest.approx(tv, abs=1e-12)
    # and verify_tree draws from it: the first token of 20000 one-token soft verifications
    sampler = Sampler(SamplingParams(1.0, seed=11))
    counts: Counter = Counter()
    n = 20000
    for _ in range(n):
        token = int(sampler.rng.choice(vocab, p=q))
        chain = Draft.chain(0, [token], [q])
        verdict = verify_tree(logits, chain.children, sampler, chain.q, BETA)
        counts[verdict.accepted[0] if verdict.accepted else verdict.next_token] += 1
        assert verdict.distance == pytest.approx(tv)
    observed = np.array([counts[t] / n for t in range(vocab)])
    assert np.abs(observed - drawn).max() < 0.015
    assert np.abs(observed - p).max() > 0.015 or tv < 0.03


@pytest.fixture(scope="module")
def tiny_pair():
    target = tiny_backend("tiny8-target", vocab_size=8, peaked=2.0, seed=3)
    draft = tiny_backend("tiny8-draft", vocab_size=8, peaked=2.0, seed=3, noise=0.3)
    return target, draft


def _answer(target, draft, seed: int, temperature: float = 1.0, **values):
    decoder = DraftModelDecoder(
        draft_model=draft,
        **DraftModelDecoder.validate({"fixed_draft": 3, "copies": False, **values}),
    )
    target.rollback(0)
    request = GenerationRequest(
        (2, 3, 4, 2, 3, 4, 2, 3), 12, (), SamplingParams(temperature, seed=seed)
    )
    return list(Engine(target, decoder).generate(request))[-1]


def test_an_answer_soft_matching_verified_says_it_is_not_the_targets_distribution(tiny_pair):
    target, draft = tiny_pair
    soft, exact, labelled = [0, 0], [0, 0], 0  # accepted, drafted
    for seed in range(40):
        on = _answer(target, draft, seed, soft_match=BETA)
        off = _answer(target, draft, seed)
        # an answer's first step is the target's alone (no draft before the first token): one
        # that ended there drafted nothing to label
        if on.stats.drafted:
            labelled += 1
            assert not on.stats.target_distribution
            assert on.stats.as_dict()["target_distribution"] is False
            assert on.stats.distance_per_token is not None
        assert off.stats.target_distribution and off.stats.distance_per_token is None
        assert off.stats.as_dict()["total_variation_per_token"] is None
        soft = [soft[0] + on.stats.accepted, soft[1] + on.stats.drafted]
        exact = [exact[0] + off.stats.accepted, exact[1] + off.stats.drafted]
    # soft matching keeps more of what is drafted (a step that keeps more leaves fewer steps to
    # draft in a short answer, so the counts alone do not say it)
    assert soft[0] / soft[1] > exact[0] / exact[1]
    assert labelled >= 30
    # greedy answers are the target's own choice whatever β says: nothing to label
    greedy = _answer(target, draft, 0, temperature=0.0, soft_match=BETA)
    assert greedy.stats.target_distribution


def test_the_status_line_says_so(tiny_pair):
    target, draft = tiny_pair
    figures = Figures(decoder="draft", stats=_answer(target, draft, 1, soft_match=BETA).stats)
    assert "NOT sampled from the target's distribution" in status_text(figures, "tiny").plain
    exact = Figures(decoder="draft", stats=_answer(target, draft, 1).stats)
    assert "NOT" not in status_text(exact, "tiny").plain


def test_bench_rows_report_how_far_it_moved_and_what_it_gained():
    def row(decoder: str, seconds: float, accepted: int, inexact: int = 0, distance: float = 0):
        return QuestionRow(1, "qa", decoder, 100, seconds, 40, 80, accepted, None, None, None,
                           None, inexact, distance)  # fmt: skip

    rows = [
        row("greedy", 4.0, 0),
        row("draft", 2.0, 60),
        row("draft:soft_match=0.5", 1.6, 72, inexact=30, distance=2.0),
    ]
    summary = summarize(rows, "greedy")
    assert summary["draft"]["overall"]["total_variation_per_token"] is None
    assert summary["draft:soft_match=0.5"]["overall"]["total_variation_per_token"] == 0.02
    (line,) = soft_matching_lines(summary)
    assert line.startswith("draft:soft_match=0.5: soft matching: NOT sampled")
    assert "TV 0.020/token" in line and "over draft: acceptance 75% → 90%" in line
    assert "speed 1.25×" in line


@pytest.mark.slow
def test_ask_json_labels_soft_matching(bundled_gguf):
    def ask(*extra: str) -> dict:
        ran = run_cli(
            "ask", "Tell me about the sea.", "--backend", "llama", "-d", "draft", "--draft",
            str(bundled_gguf), "--temperature", "1", "--seed", "3", "--max-tokens", "24",
            "-p", "fixed_draft=3", "--json", "--no-log", *extra,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        lines = [json.loads(line) for line in ran.stdout.splitlines()]
        return lines[-1]

    soft = ask("-p", "soft_match=0.5")
    assert soft["stats"]["target_distribution"] is False
    assert "NOT sampled from the target's distribution" in soft["distribution_note"]
    exact = ask()
    assert exact["stats"]["target_distribution"] is True
    assert exact["distribution_note"] is None
