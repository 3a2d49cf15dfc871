"""How much to draft: the depth that maximises expected tokens per second, from learned acceptance.

A target pass over `base + branches·d` tokens costs `block_cost` of that size (measured per
backend). The policy keeps, per *situation* (what a drafter knows before drafting: where the draft
comes from, how long the context's match is, whether the last draft was taken whole), the chance
that drafted depth d is accepted given depth d−1 was. Copies are bursty: once a long match has
held for a few tokens, the next one almost always holds too — so acceptance is estimated per depth,
not as one geometric rate. With conditional rates a₁…a_k, drafting k tokens yields on average
1 + a₁ + a₁a₂ + … + a₁⋯a_k tokens per pass.

It starts from measured priors, learns online from every verified draft, explores by optimism (an
upper confidence bound on each rate, so a situation never drafted still gets tried), and is kept per
model across runs, like the pass costs. Exploration is bounded by what it costs: the optimistic
depth is taken only while, by the rates as known, it keeps all but `_EXPLORE_BUDGET` of the best
depth's speed — little, so that a prompt whose drafts keep failing runs at greedy's pace. Where
long drafts are nearly free (a runtime whose 8-token pass costs little more than one) it drafts
boldly; where a failed draft is dear (a pass that grows with every token) it probes only cheaply
(benchmarks/replay_policy.py replays budgets on Spec-Bench dev answers; docs/bench-log.md).

Each answer also keeps a ledger: the passes its drafts have saved (accepted tokens + 1 against the
pass's cost in plain passes), negative where they lost. An exploring draft is made only while the
ledger, plus a small allowance, covers what it would lose if nothing were taken — exploration is
paid for by gains in the same answer — and once an answer's drafts have lost more than the
allowance, it drafts only where the known rates promise a clear gain, so a prompt whose drafts keep
failing runs at greedy's pace within a few passes.

No draft stakes more than the answer's drafts have saved plus `_STAKE` plain passes, however sure
the rates are: on llama.cpp a long copy rejected at its first token costs several passes in one
step, a large share of a short answer. A copy then starts short and grows as its drafts are taken
— the ledger they fill is what the next, longer draft may stake.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specchat import locations
from specchat.backends.base import Backend
from specchat.json_tables import put_entry, read_table, write_table

# Depths share statistics in buckets: depth 1, 2, 3, 4, 5-6, 7-8, 9-12, 13-16, 17-24, 25-32, ...
_DEPTH_EDGES = (1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49)
_PRIOR_WEIGHT = 2.0  # pseudo-trials behind a prior rate
_MAX_TRIALS = 400.0  # older evidence fades past this many trials per depth bucket
_OPTIMISM = 1.0  # standard deviations added to each rate (exploration)
# most expected speed (share of the best) an exploring draft may give up: a twentieth. Replayed at
# the int4 runtime's drafted passes as they cost in use, 0.1 (chosen at llama.cpp's costs) lost
# 1.3% on the dev half and held out and 2.5% on code edits against 0.05; none at all drafted a
# little better still on a CPU, but never tries the long drafts a nearly flat pass (a GPU) makes
# cheap (docs/bench-log.md, session 47)
_EXPLORE_BUDGET = 0.05
# how much faster than a plain pass a draft must be expected to be: a little, for what pricing
# misses (the drafted step's own Python, a cost table a busy minute moved); replayed on the dev
# half at llama.cpp's costs a small margin also drafts better overall (docs/bench-log.md)
_MARGIN = 0.1
_ALLOWANCE = 1.0  # plain passes an answer's exploring drafts may lose before its drafts have gained
_FALLBACK_MARGIN = 0.2  # the gain a draft must promise once an answer's drafts have lost
_STAKE = 2.0  # most plain passes one draft may lose beyond what the answer's drafts saved
_STORE_FILE = "draft_policy.json"
_TIE = 1.0001  # a depth must beat a shorter one's rate by this much (ties go to the shorter)


def depth_bucket(depth: int) -> int:
    """Index of the statistics bucket for drafted depth `depth` (1-based)."""
    return max(0, bisect.bisect_right(_DEPTH_EDGES, depth) - 1)


def expected_tokens(acceptance: float, k: int) -> float:
    """Mean tokens one pass yields when drafting k tokens each accepted with `acceptance`."""
    if acceptance >= 1.0:
        return k + 1.0
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


def expected_from_rates(rates: list[float]) -> list[float]:
    """Expected tokens per pass for every depth 0..len(rates), from conditional rates."""
    out, reach, total = [1.0], 1.0, 1.0
    for rate in rates:
        reach *= rate
        total += reach
        out.append(total)
    return out


@dataclass(frozen=True)
class Plan:
    """What a drafter knows before drafting, for the policy to size the draft.

    The pass evaluates `base` tokens (the pending token, plus e.g. lookahead's window) and
    `branches` candidates of the chosen depth; drafting costs `draft_cost` seconds per drafted
    token (a draft model's own passes; zero for copied drafts). `key` names the situation whose
    acceptance is learned apart; `prior` is the per-token acceptance assumed before any evidence.
    """

    available: int
    key: tuple = ()
    base: int = 1
    branches: int = 1
    draft_cost: float = 0.0
    prior: float = 0.5


@dataclass
class SituationStats:
    """Accepted / tried counts per depth bucket for one situation."""

    accepted: list[float] = field(default_factory=lambda: [0.0] * len(_DEPTH_EDGES))
    tried: list[float] = field(default_factory=lambda: [0.0] * len(_DEPTH_EDGES))

    def rate(self, bucket: int, prior: float, optimism: float) -> float:
        n = self.tried[bucket] + _PRIOR_WEIGHT
        mean = (self.accepted[bucket] + prior * _PRIOR_WEIGHT) / n
        bonus = optimism * math.sqrt(mean * (1.0 - mean) / n) if optimism else 0.0
        return min(0.999, mean + bonus)

    def update(self, drafted: int, accepted: int) -> None:
        for depth in range(1, min(drafted, accepted + 1) + 1):
            b = depth_bucket(depth)
            if self.tried[b] >= _MAX_TRIALS:
                self.tried[b] *= 0.5
                self.accepted[b] *= 0.5
            self.tried[b] += 1.0
            self.accepted[b] += 1.0 if depth <= accepted else 0.0


class DraftLengthPolicy:
    """Chooses each draft's depth from learned acceptance and the measured pass costs."""

    def __init__(
        self,
        optimism: float = _OPTIMISM,
        explore_budget: float = _EXPLORE_BUDGET,
        margin: float = _MARGIN,
        allowance: float = _ALLOWANCE,
        fallback_margin: float = _FALLBACK_MARGIN,
        stake: float = _STAKE,
    ) -> None:
        self.optimism = optimism
        self.explore_budget = explore_budget
        self.margin = margin
        self.allowance = allowance
        self.fallback_margin = fallback_margin
        self.stake = stake
        self.situations: dict[tuple, SituationStats] = {}
        self.ledger = 0.0  # plain passes this answer's drafts have saved (negative: lost)
        self._expected_memo: dict[tuple, tuple[float, ...]] = {}  # `expected`'s, until they learn

    def start_answer(self) -> None:
        """A new answer: its ledger starts at zero (what was learned stays)."""
        self.ledger = 0.0

    def rates(self, plan: Plan, top: int, optimism: float | None = None) -> list[float]:
        """Conditional acceptance per depth 1..top (optimistic by default, as the policy uses)."""
        optimism = self.optimism if optimism is None else optimism
        stats = self.situations.get(plan.key) or SituationStats()
        by_bucket = [stats.rate(b, plan.prior, optimism) for b in range(depth_bucket(top) + 1)]
        return [by_bucket[b] for b in _buckets(top)]

    def expected(self, plan: Plan, top: int, optimism: float | None = None) -> tuple[float, ...]:
        """`expected_from_rates` of `rates`, kept until the rates learn: most steps ask what the
        step before asked, and recomputing it was a tenth of a step's own Python."""
        optimism = self.optimism if optimism is None else optimism
        memo_key = (plan.key, plan.prior, top, optimism)
        known = self._expected_memo.get(memo_key)
        if known is None:
            known = tuple(expected_from_rates(self.rates(plan, top, optimism)))
            self._expected_memo[memo_key] = known
        return known

    def depth(self, target: Backend, plan: Plan, room: int) -> int:
        """The depth in [0, min(available, room - 1)] with the most expected tokens per second,
        optimistic where exploring is cheap enough."""
        top = max(0, min(plan.available, room - 1))
        if top == 0:
            return 0
        # the depths whose pass stakes no more than the answer's drafts saved plus the stake
        plain = target.block_cost(1)
        costs = [_pass_cost(target, plan, 0)]
        limit = (max(self.ledger, 0.0) + self.stake) * plain + costs[0]
        for d in range(1, top + 1):
            cost = _pass_cost(target, plan, d)
            if cost > limit:
                break
            costs.append(cost)
        top = len(costs) - 1
        if top == 0:
            return 0
        known = self.expected(plan, top, optimism=0.0)
        best = best_depth(known, costs)
        losing = self.ledger < -self.allowance
        margin = max(self.margin, self.fallback_margin) if losing else self.margin
        if best and known[best] / costs[best] < (1.0 + margin) * known[0] / costs[0]:
            best = 0  # a gain within the margin is no reason to risk a pass
        if not self.optimism or losing:
            return best
        # explore: the optimistic best among the depths the answer could lose whole (nothing
        # taken) and that keep all but the budget of the known best's speed
        hopeful_rates = self.expected(plan, top)
        floor = (1.0 - self.explore_budget) * known[best] / costs[best]
        hopeful, hopeful_rate = best, hopeful_rates[best] / costs[best]
        for d in range(best + 1, top + 1):
            if (costs[d] - costs[0]) / plain > self.ledger + self.allowance:
                break
            rate = hopeful_rates[d] / costs[d]
            if known[d] / costs[d] >= floor and rate > hopeful_rate * _TIE:
                hopeful, hopeful_rate = d, rate
        return hopeful

    def value(self, target: Backend, plan: Plan, room: int) -> float:
        """Expected tokens a second of the step `depth` would take in `plan`, by the rates as
        known: how a drafter with two sources compares them."""
        depth = self.depth(target, plan, room)
        known = self.expected(plan, depth, optimism=0.0) if depth else (1.0,)
        return known[depth] / _pass_cost(target, plan, depth)

    def update(self, target: Backend, plan: Plan, drafted: int, accepted: int) -> None:
        """Learn from a verified draft of `drafted` tokens (the depth `depth` chose), and enter
        what it saved or lost on `target`'s passes in the answer's ledger."""
        if drafted > 0:
            self.situations.setdefault(plan.key, SituationStats()).update(drafted, accepted)
            self._expected_memo.clear()
            self.ledger += accepted + 1.0 - _pass_cost(target, plan, drafted) / target.block_cost(1)

    # -- kept per model across runs -------------------------------------------------------
    def load(self, model_key: str) -> None:
        self._expected_memo.clear()
        table = _read_store().get(model_key, {})
        for text, counts in table.items():
            try:
                key = tuple(json.loads(text))
                stats = SituationStats([float(x) for x in counts[0]], [float(x) for x in counts[1]])
            except (ValueError, TypeError, IndexError):
                continue
            if len(stats.tried) == len(_DEPTH_EDGES) == len(stats.accepted):
                self.situations[key] = stats

    def save(self, model_key: str) -> None:
        """Write this policy's situations into the model's table (others' are kept)."""
        table = _read_store().get(model_key)
        table = table if isinstance(table, dict) else {}
        for key, stats in self.situations.items():
            table[json.dumps(list(key))] = [stats.accepted, stats.tried]
        with contextlib.suppress(OSError):  # learned rates that cannot be kept stop nothing
            put_entry(locations.data_dir() / _STORE_FILE, model_key, table, indent=None)


def checkpoint() -> Callable[[], None]:
    """A function that puts every model's learned rates back as they are now. A race runs each
    entrant from the same rates: otherwise a run would start from what the run before it, on
    the same prompt, taught them (a repeat, or another lane)."""
    kept = _read_store()

    def restore() -> None:
        if _read_store() != kept:
            with contextlib.suppress(OSError):
                write_table(locations.data_dir() / _STORE_FILE, kept, indent=None)

    return restore


def _read_store() -> dict:
    return read_table(locations.data_dir() / _STORE_FILE)


def _pass_cost(target: Backend, plan: Plan, depth: int) -> float:
    """Seconds of a step drafting `depth` tokens in `plan`: its target pass and the drafting."""
    return target.block_cost(plan.base + plan.branches * depth) + plan.draft_cost * depth


def break_even_acceptance(
    target: Backend, draft_share: float, longest: int = 8, margin: float = _MARGIN
) -> float:
    """The lowest per-token acceptance (to a hundredth) at which a draft model whose pass costs
    `draft_share` of the target's one-token pass gains `margin` over plain passes, at the best
    chain length up to `longest`, by the target's measured pass costs (1.0: at none). A 135M
    draft for a 1.7B-shaped target, measured: from 0.47 on int4, from 0.93 on llama.cpp, whose
    extra tokens cost more (docs/bench-log.md)."""
    plain = target.block_cost(1)
    for hundredths in range(1, 100):
        rate = hundredths / 100
        expected = [expected_tokens(rate, g) for g in range(longest + 1)]
        # g passes of the draft's own, and one more where all g were taken (it reads the last
        # before its next draft)
        costs = [
            target.block_cost(1 + g) + (g + rate**g if g else 0) * draft_share * plain
            for g in range(longest + 1)
        ]
        best = best_depth(expected, costs)  # the depth the policy would draft at this rate
        if best and expected[best] / costs[best] >= (1.0 + margin) / plain:
            return rate
    return 1.0


def best_depth(expected: list[float], costs: Sequence[float]) -> int:
    """The d with the most expected[d] / costs[d] (ties go to the shorter draft)."""
    best_d, best_rate = 0, expected[0] / costs[0]
    for d in range(1, len(expected)):
        rate = expected[d] / costs[d]
        if rate > best_rate * _TIE:
            best_d, best_rate = d, rate
    return best_d


@functools.cache
def _buckets(top: int) -> tuple[int, ...]:
    """The statistics bucket of each depth 1..top (read on every draft: computed once)."""
    return tuple(depth_bucket(d) for d in range(1, top + 1))
