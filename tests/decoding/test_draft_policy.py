"""The draft policy, the oracle and the n-gram index on known numbers: pure, no model needed."""

from __future__ import annotations

import itertools
import random

import pytest

from specchat.decoding.draft_policy import (
    DraftLengthPolicy,
    Plan,
    break_even_acceptance,
    expected_from_rates,
)
from specchat.decoding.ngram_index import RECENT, NgramIndex
from specchat.decoding.prompt_lookup import PromptLookupDrafter, copy_prior, match_bucket
from specchat.decoding.suffix import SuffixDrafter
from specchat.metrics.oracle import accepted_lengths, efficiency, oracle_speedup
from tests.decoding.ngram_oracle import agreement


class _Costs:
    """A backend as the policy sees it: only block costs. The default is llama.cpp on this
    2-core machine (8 tokens cost 4.35 single passes)."""

    def __init__(self, per_token: float = 0.48, overhead: float = 0.52) -> None:
        self.per_token, self.overhead = per_token, overhead

    def block_cost(self, k: int) -> float:
        return self.overhead + self.per_token * k


def test_expected_tokens_from_conditional_rates():
    assert expected_from_rates([]) == [1.0]
    assert expected_from_rates([0.5, 0.5]) == [1.0, 1.5, 1.75]
    assert expected_from_rates([1.0, 0.0, 1.0]) == [1.0, 2.0, 2.0, 2.0]


def test_a_draft_model_pays_from_a_lower_acceptance_where_extra_tokens_are_cheap():
    cheap = _Costs(per_token=0.05, overhead=0.95)  # int4-like: 8 tokens cost 1.35 passes
    dear = _Costs()  # llama.cpp-like: 8 tokens cost 4.35 passes
    # a draft a tenth of the target's pass
    assert break_even_acceptance(cheap, 0.1) < 0.45 < break_even_acceptance(dear, 0.1)
    # the dearer the draft, the surer its tokens must be; one as dear as the target never pays
    assert break_even_acceptance(cheap, 0.1) < break_even_acceptance(cheap, 0.3)
    assert break_even_acceptance(cheap, 1.0) == 1.0
    # at the break-even rate the best chain gains the margin, just below it none does
    rate = break_even_acceptance(cheap, 0.1)
    plain = cheap.block_cost(1)

    def best(a: float) -> float:
        return (
            max(
                expected_from_rates([a] * g)[g]
                / (cheap.block_cost(1 + g) + (g + a**g) * 0.1 * plain)
                for g in range(1, 9)
            )
            * plain
        )

    assert best(rate) >= 1.1 > best(rate - 0.01)


def test_policy_drafts_long_on_a_sure_copy_and_not_on_a_coin_flip():
    policy = DraftLengthPolicy(optimism=0.0)
    sure = Plan(available=32, key=("copy", 9, True), prior=0.97)
    assert policy.depth(_Costs(), sure, room=100) >= 4
    assert policy.depth(_Costs(per_token=0.05, overhead=0.95), sure, room=100) >= 24
    coin = Plan(available=32, key=("copy", 0, False), prior=0.3)
    assert policy.depth(_Costs(), coin, room=100) == 0
    # room bounds the draft: the pass must still leave a token of its own
    assert policy.depth(_Costs(), sure, room=4) == 3


def test_policy_learns_from_verified_drafts_and_explores_a_situation_never_tried():
    costs = _Costs()
    plan = Plan(available=8, key=("copy", 3, False), prior=0.6)
    optimistic = DraftLengthPolicy(optimism=1.0)
    assert optimistic.depth(costs, plan, 100) > 0  # never tried: worth a look
    for _ in range(60):
        optimistic.update(costs, plan, drafted=4, accepted=0)
    assert optimistic.depth(costs, plan, 100) == 0  # learned: this situation does not pay
    learner = DraftLengthPolicy(optimism=0.0)
    poor = Plan(available=8, key=("copy", 1, False), prior=0.2)
    assert learner.depth(costs, poor, 100) == 0
    for _ in range(60):
        learner.update(costs, poor, drafted=8, accepted=8)
    assert learner.depth(costs, poor, 100) == 8


def test_exploration_goes_only_as_far_as_it_is_cheap():
    # Never tried, a poor prior: optimism alone would draft 32 tokens on a hunch.
    plan = Plan(available=32, key=("copy", 1, False), prior=0.3)
    unbounded = DraftLengthPolicy(optimism=3.0, explore_budget=1.0, allowance=1e9, stake=1e9)
    bounded = DraftLengthPolicy(optimism=3.0)
    dear = _Costs()  # llama.cpp: every drafted token costs half a pass
    assert unbounded.depth(dear, plan, 100) == 32
    assert bounded.depth(dear, plan, 100) == 0  # would lose most of a pass's worth: not tried
    cheap = _Costs(per_token=0.002, overhead=0.998)  # a GPU: long drafts nearly free
    assert bounded.depth(cheap, plan, 100) >= 28  # costs little even if wrong: tried long
    sure = DraftLengthPolicy(optimism=0.0)
    assert 0 < sure.depth(cheap, plan, 100) < 32  # by the rates as known, a short draft is best


def test_an_answer_whose_drafts_keep_failing_runs_at_plain_pace_within_a_few_passes():
    dear = _Costs()
    policy = DraftLengthPolicy()
    situations = [Plan(available=8, key=("copy", 3, i), prior=0.6) for i in range(6)]
    drafts, lost = 0, 0.0
    for plan in situations:  # each never tried: by optimism alone, each is worth a look
        depth = policy.depth(dear, plan, 100)
        if depth:
            drafts += 1
            lost += dear.block_cost(depth + 1) / dear.block_cost(1) - 1.0
            policy.update(dear, plan, drafted=depth, accepted=0)
    assert 1 <= drafts <= 3  # then it stops betting: the answer runs at greedy's pace
    assert lost <= policy.allowance + 1.0  # what failing cost, in plain passes
    policy.start_answer()  # a new answer explores again what it has not tried
    assert policy.depth(dear, Plan(available=8, key=("copy", 3, 9), prior=0.6), 100) > 0
    # and an answer whose drafts have paid may explore further than a fresh one
    policy.ledger = 5.0
    assert policy.depth(dear, situations[-1], 100) > 0


def test_no_draft_stakes_more_than_the_answer_has_saved_plus_the_stake():
    # A sure copy, 32 tokens on offer, llama.cpp's dear passes: by the rates alone 7 tokens are
    # best, but if they were wrong the pass would cost over four plain ones.
    dear = _Costs()
    sure = Plan(available=32, key=("copy", 9, True), prior=0.97)
    policy = DraftLengthPolicy(optimism=0.0)
    ratio = [dear.block_cost(d + 1) / dear.block_cost(1) for d in range(33)]
    unbounded = DraftLengthPolicy(optimism=0.0, stake=1e9).depth(dear, sure, 100)
    first = policy.depth(dear, sure, 100)
    assert 0 < first < unbounded and ratio[first] - 1.0 <= policy.stake < ratio[unbounded] - 1.0
    while True:  # each draft taken whole: the ledger grows, and the drafts with it
        policy.update(dear, sure, drafted=first, accepted=first)
        depth = policy.depth(dear, sure, 100)
        assert ratio[depth] - 1.0 <= max(policy.ledger, 0.0) + policy.stake
        if depth == first:
            break
        assert depth > first
        first = depth
    # within a few passes a copy that keeps paying is drafted as far as the rates say pays
    assert depth >= 16
    policy.stake = 1e9
    assert policy.depth(dear, sure, 100) == depth


def test_policy_is_kept_per_model(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path))
    plan = Plan(available=8, key=("copy", 2, True), prior=0.5)
    first = DraftLengthPolicy()
    for _ in range(10):
        first.update(_Costs(), plan, drafted=3, accepted=1)
    first.save("llama|model-a")
    again = DraftLengthPolicy()
    again.load("llama|model-a")
    assert again.situations[plan.key].tried == first.situations[plan.key].tried
    other = DraftLengthPolicy()
    other.load("llama|model-b")
    assert other.situations == {}


def _brute_force_oracle(lengths, cost):
    """Every way to cut the answer into passes (each pass k+1 tokens, k ≤ lengths[i])."""
    n = len(lengths)
    best = {n: 0.0}
    for i in range(n - 1, -1, -1):
        best[i] = min(
            cost(k + 1) + best[i + k + 1] for k in range(0, min(lengths[i], n - i - 1) + 1)
        )
    return best[0]


def test_oracle_picks_the_cheapest_cut_and_counts_copyable_tokens():
    cost = _Costs().block_cost
    # nothing to draft: the oracle is plain decoding
    plain = oracle_speedup([0, 0, 0, 0], cost)
    assert plain.speedup == 1.0 and plain.copyable == 0.0
    # a 5-token copy at position 0: one pass of 6 would cover it
    figures = oracle_speedup([5, 4, 3, 2, 1, 0, 0, 0], cost)
    assert figures.copyable == 5 / 8
    assert figures.seconds == _brute_force_oracle([5, 4, 3, 2, 1, 0, 0, 0], cost)
    assert figures.speedup > 1.0
    rng = random.Random(0)
    for _ in range(50):
        lengths = [rng.choice([0, 0, 1, 2, 5]) for _ in range(12)]
        assert (
            abs(oracle_speedup(lengths, cost).seconds - _brute_force_oracle(lengths, cost)) < 1e-12
        )
    assert efficiency(1.2, 1.4) == 0.2 / 0.4 or abs(efficiency(1.2, 1.4) - 0.5) < 1e-12
    assert efficiency(1.2, 1.0) is None


def test_accepted_lengths_replay_the_proposals_against_the_answer():
    answer = [7, 8, 9, 1]
    lengths = accepted_lengths(lambda ctx: [7, 8, 9] if len(ctx) == 2 else [1], [5, 6], answer)
    assert lengths == [3, 0, 0, 1]


def test_ngram_match_reports_the_true_match_length():
    rng = random.Random(3)
    for _ in range(200):
        tokens = [rng.randrange(4) for _ in range(rng.randrange(2, 60))]
        index = NgramIndex(1, 3)
        index.reset(tokens)
        found = index.match(5)
        if found.ngram == 0:
            continue
        end = found.end
        assert found.length == agreement(tokens, end) >= found.ngram
        assert found.continuation == tokens[end + 1 : end + 6]
        # of the longest indexed tail's recent occurrences, none agrees further back
        n = found.ngram
        ends = [
            e
            for e in range(len(tokens) - 1)
            if e - n + 1 >= 0 and tokens[e - n + 1 : e + 1] == tokens[-n:]
        ][-RECENT:]
        assert end in ends
        # and how those occurrences went on: how many, how many the way the match goes
        assert found.occurrences == len(ends)
        assert found.agreeing == sum(tokens[e + 1] == tokens[end + 1] for e in ends)
        for other in ends:
            agree = agreement(tokens, other)
            assert agree < found.length or (agree == found.length and other <= end)


del itertools


def _plans_along(drafter, prompt: list[int], answer: list[int]) -> list[Plan]:
    """The drafter's plan before each answer token, as decoding plans (nothing drafted)."""
    drafter.reset(list(prompt))
    context, plans = list(prompt), []
    for token in answer:
        plans.append(drafter.plan(context, 64))
        context.append(token)
    return plans


@pytest.mark.parametrize(
    "make",
    [lambda: PromptLookupDrafter(3, 1, 64), lambda: SuffixDrafter(64, 3, 1.0, 0.1)],
    ids=["pld", "suffix"],
)
def test_a_copy_resumed_after_an_edit_is_learned_as_a_copy_under_way(make):
    # the prompt holds a passage; the answer copies it, renames one word and copies on
    passage = list(range(100, 140))
    prompt = [1, 2, *passage, 3, 4]
    edited = [*passage[:12], 999, *passage[13:17]]
    resumed = _plans_along(make(), prompt, edited)[-1]
    assert resumed.key == ("copy", match_bucket(3), True)
    # the same 3-token match with no copy before it is a short match like any other
    fresh = _plans_along(make(), prompt, [7, 8, 999, *passage[13:17]])[-1]
    assert fresh.key == ("copy", match_bucket(3), False)
    assert resumed.prior > fresh.prior
    # a copy that jumped back to an earlier part of the passage resumes nothing
    back = _plans_along(make(), prompt, [*passage[:12], 999, *passage[2:6]])[-1]
    assert back.key == ("copy", match_bucket(3), False)


@pytest.mark.parametrize(
    "make",
    [lambda: PromptLookupDrafter(3, 1, 64), lambda: SuffixDrafter(64, 3, 1.0, 0.1)],
    ids=["pld", "suffix"],
)
def test_a_short_match_is_learned_apart_by_how_its_occurrences_went_on(make):
    """A one-token match whose every earlier occurrence went on the same way was the next token
    three times as often or more as one whose occurrences went different ways, a lone
    occurrence in between (docs/bench-log.md): the policy learns the three apart and assumes
    more of the surer before evidence."""
    same = [5, 50, 6, 5, 50, 7, 5, 50, 8]  # 5 always went on as 50
    many = [5, 51, 6, 5, 52, 7, 5, 53, 8]  # 5 went on three ways
    once = [5, 54, 6, 9, 9, 7, 2, 2, 8]  # 5 occurred once
    plans = {
        name: _plans_along(make(), [1, *prompt, 3], [5, 0])[-1]
        for name, prompt in (("all", same), ("split", many), ("one", once))
    }
    for name, plan in plans.items():
        assert plan.key == ("copy", match_bucket(1), False, name)
    assert plans["all"].prior > plans["one"].prior > plans["split"].prior
    # a long match is not split so: its occurrences' ways tell little more
    longer = _plans_along(make(), [1, *same, 3], [9, 9, 5, 50, 8, 0])[-1]
    assert longer.key == ("copy", match_bucket(3), False)


@pytest.mark.parametrize(
    "make",
    [lambda: PromptLookupDrafter(3, 1, 64), lambda: SuffixDrafter(64, 3, 1.0, 0.1)],
    ids=["pld", "suffix"],
)
def test_an_answer_that_copies_from_its_first_token_is_a_copy_from_the_start(make):
    """A function rewritten with type hints starts as a copy of the prompt's code: its first
    short match is taken almost whole (docs/bench-log.md, "Design choices measured"), unlike a short match
    that merely repeats."""
    passage = list(range(100, 140))
    prompt = [1, 2, *passage, 3, 4]
    plans = _plans_along(make(), prompt, [*passage[:6], 999, *passage[7:10]])
    assert plans[2].key == ("copy", match_bucket(2), "start")  # 2 answered, 2 matched
    assert plans[5].key == ("copy", match_bucket(5), "start")
    assert plans[5].prior > copy_prior(match_bucket(5), True)
    # the edit ends it: from there the answer is no longer all one copy
    assert all("start" not in plan.key for plan in plans[7:])
    # the same match later in an answer that began otherwise is not a copy from the start
    later = _plans_along(make(), prompt, [7, 8, 9, *passage[:4]])[-1]
    assert later.key == ("copy", match_bucket(3), False)
