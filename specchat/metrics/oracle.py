"""The speedup a drafter's own proposals would allow, had the policy known which would be accepted.

Replays greedy's answer: at every position the drafter proposes from the same context greedy had,
and we count how many proposed tokens greedy would have accepted. An oracle policy then picks, by
dynamic programming over the answer, the draft lengths that minimise total pass cost at the
backend's measured k-token pass costs. (speedup − 1) / (oracle − 1) is the share of what the drafts
allow that a real policy realises: the number a draft policy is judged by.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class OracleFigures:
    seconds: float  # the oracle's total pass cost over the answer
    plain_seconds: float  # one single-token pass per answer token
    copyable: float  # share of answer tokens some proposal could have supplied

    @property
    def speedup(self) -> float:
        return self.plain_seconds / self.seconds if self.seconds > 0 else 1.0


def efficiency(realised: float | None, oracle: float | None) -> float | None:
    """(speedup − 1) / (oracle − 1): how much of what the drafts allow a policy realises."""
    if realised is None or oracle is None or oracle <= 1.0 + 1e-9:
        return None
    return (realised - 1.0) / (oracle - 1.0)


def accepted_lengths(
    propose: Callable[[list[int]], Sequence[int]], prompt: list[int], answer: Sequence[int]
) -> list[int]:
    """For each answer position i, how many of the tokens proposed after prompt + answer[:i]
    equal answer[i:] (what greedy verification would accept)."""
    lengths = []
    context = list(prompt)
    for i in range(len(answer)):
        proposal = propose(context)
        n = 0
        while n < len(proposal) and i + n < len(answer) and proposal[n] == answer[i + n]:
            n += 1
        lengths.append(n)
        context.append(answer[i])
    return lengths


def oracle_passes(
    lengths: Sequence[int], pass_cost: Callable[[int], float]
) -> tuple[float, list[tuple[int, int]]]:
    """The least total pass cost over draft-length choices (`pass_cost(k)`: a k-token pass's
    seconds), and the oracle's passes as (answer position, tokens drafted there)."""
    n = len(lengths)
    if n == 0:
        return 0.0, []
    costs = [pass_cost(k) for k in range(1, max(lengths) + 2)]
    best, choice = [0.0] * (n + 1), [0] * n
    for i in range(n - 1, -1, -1):
        top = min(lengths[i], n - i - 1)
        best[i], choice[i] = min((costs[k] + best[i + k + 1], k) for k in range(top + 1))
    passes, i = [], 0
    while i < n:
        passes.append((i, choice[i]))
        i += choice[i] + 1
    return best[0], passes


def oracle_speedup(lengths: Sequence[int], pass_cost: Callable[[int], float]) -> OracleFigures:
    """Best total cost over draft-length choices; `pass_cost(k)` is a k-token pass's seconds."""
    n = len(lengths)
    if n == 0:
        return OracleFigures(0.0, 0.0, 0.0)
    seconds, _ = oracle_passes(lengths, pass_cost)
    reach, copyable = 0, 0
    for i, m in enumerate(lengths):
        reach = max(reach, i + m)
        copyable += i < reach
    return OracleFigures(seconds, n * pass_cost(1), copyable / n)
