"""How many tokens to draft: the choice that maximises expected tokens per second.

A target pass over a block of k+1 tokens costs `block_cost(k+1)` (measured per backend). With a
per-token acceptance probability a, drafting k tokens yields on average (1 - a^(k+1)) / (1 - a)
tokens. On a compute-bound CPU a long draft costs nearly as many single passes as it has tokens,
so the best k is small or zero; on an overhead-bound runtime it is large. The acceptance estimate is
a decaying average over recent steps, so the choice follows the text (code and summaries repeat,
free prose does not).
"""

from __future__ import annotations

from dataclasses import dataclass

from specchat.backends.base import Backend


def expected_tokens(acceptance: float, k: int) -> float:
    """Mean tokens one pass yields when drafting k tokens each accepted with `acceptance`."""
    if acceptance >= 1.0:
        return k + 1.0
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


@dataclass
class AcceptanceEstimate:
    """Per-token acceptance, as a geometric model fitted to recent steps (decay weights them)."""

    accepted: float = 1.0  # prior: one accept ...
    trials: float = 2.0  # ... out of two tries
    decay: float = 0.9

    @property
    def rate(self) -> float:
        return self.accepted / self.trials

    def update(self, drafted: int, accepted: int) -> None:
        if drafted <= 0:
            return
        rejected = 1 if accepted < drafted else 0
        self.accepted = self.decay * self.accepted + accepted
        self.trials = self.decay * self.trials + accepted + rejected


def best_length(acceptance: float, top: int, pass_cost) -> int:
    """The k in [0, top] with the most expected tokens per second, where `pass_cost(k)` is the
    seconds of a target pass that verifies k drafted tokens (plus any drafting cost)."""
    best_k, best_rate = 0, 1.0 / pass_cost(0)
    for k in range(1, top + 1):
        rate = expected_tokens(acceptance, k) / pass_cost(k)
        if rate > best_rate * 1.0001:
            best_k, best_rate = k, rate
    return best_k


@dataclass(frozen=True)
class Plan:
    """What a drafter knows before drafting, for the policy to size the draft.

    The pass evaluates `base` tokens (the pending token, plus e.g. lookahead's window) and
    `branches` candidates of the chosen depth; drafting costs `draft_cost` seconds per drafted
    token (a draft model's own passes; zero for copied drafts). `key` names the situation whose
    acceptance is estimated apart (e.g. the matched n-gram's length), `prior` seeds it.
    """

    available: int
    key: object = None
    base: int = 1
    branches: int = 1
    draft_cost: float = 0.0
    prior: tuple[float, float] = (1.0, 2.0)


class DraftLengthPolicy:
    """Chooses each draft's depth from the acceptance seen per situation and the measured pass
    costs, and learns from what each pass accepted."""

    def __init__(self) -> None:
        self._estimates: dict[object, AcceptanceEstimate] = {}

    def estimate(self, plan: Plan) -> AcceptanceEstimate:
        estimate = self._estimates.get(plan.key)
        if estimate is None:
            accepted, trials = plan.prior
            estimate = self._estimates[plan.key] = AcceptanceEstimate(accepted, trials)
        return estimate

    def depth(self, target: Backend, plan: Plan, room: int) -> int:
        """The depth in [0, min(available, room - 1)] with the most expected tokens per second."""
        top = max(0, min(plan.available, room - 1))
        if top == 0:
            return 0
        return best_length(
            self.estimate(plan).rate,
            top,
            lambda d: target.block_cost(plan.base + plan.branches * d) + plan.draft_cost * d,
        )

    def update(self, plan: Plan, drafted: int, accepted: int) -> None:
        self.estimate(plan).update(drafted, accepted)
