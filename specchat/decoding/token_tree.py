"""SpecInfer's token trees from a draft model: the draft's other likely tokens, hung beside its
chain where it is unsure, as many as the target's measured pass costs pay for.

A draft model drafts one chain, one of its own passes a token. Where it is unsure, the target
often takes the draft's second or third choice instead. Such an alternative costs the draft
nothing more (its distribution at that position is already computed) and the target one more node
in the pass; it gains one token when the target takes it. Its worth is the chance that the target
reaches its position and takes it. Alternatives join best first while the pass's expected tokens
per second still rise at the backend's measured cost of a pass one node larger: where a wide pass
is nearly free (transformers, the int4 runtime) many join, where it is dear (llama.cpp) few or
none. The position where the draft stopped for want of confidence is a node too: its likeliest
tokens are already known.

The draft's own probabilities are a poor estimate of those chances: a quantized copy of the target
agrees with the target's greedy choice far more often than its top probability says, and almost
never where it is its second choice. Priced at the draft's word, alternatives filled the pass and
were not taken. Greedy verification shows, at every drafted node, which of the draft's choices the
target took, so `TakeRates` learns the chances from there; sampled drafts keep the draft's q.

Greedy verification follows the target's argmax through the tree, so the alternatives are the
draft's next-likeliest tokens. Sampled verification (sampling.verify_tree) is exact only if a
node's children were drawn from the draft's q one after another without replacement: how many a
position gets is decided from q alone, then they are drawn.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specchat.decoding.sampling import sample
from specchat.decoding.speculative import Draft

# the chance that the target takes a token the draft ranked `rank` (0: its likeliest) and gave
# probability `prob`
Rate = Callable[[int, float], float]


def as_drafted(rank: int, prob: float) -> float:
    """The draft's own word for it: what sampled drafts, drawn from q, go by."""
    return prob


class TakeRates:
    """How often the target's greedy choice was the draft's likeliest token, its second, or a
    later one, by the probability the draft gave it: counts from every verified tree, starting
    from the draft's own word (a few observations' worth) until they outweigh it."""

    _EDGES = (0.1, 0.3, 0.5, 0.7, 0.9)
    _RANKS = 3  # the likeliest, the second, the rest
    _PRIOR = 4.0

    def __init__(self) -> None:
        shape = (self._RANKS, len(self._EDGES) + 1)
        self._seen, self._taken = np.zeros(shape), np.zeros(shape)

    def _cell(self, rank: int, prob: float) -> tuple[int, int]:
        return min(rank, self._RANKS - 1), bisect.bisect(self._EDGES, prob)

    def __call__(self, rank: int, prob: float) -> float:
        cell = self._cell(rank, prob)
        return (self._taken[cell] + self._PRIOR * prob) / (self._seen[cell] + self._PRIOR)

    def learn(self, positions: list[Position], logits: np.ndarray, width: int) -> None:
        """Every position of a greedy tree's chain was evaluated: the target's choice there
        says which of the draft's `width` likeliest tokens it would have taken, if any."""
        for position in positions:
            choice = int(np.argmax(logits[position.node]))
            for rank, token in enumerate(position.top[:width]):
                cell = self._cell(rank, float(position.probs[token]))
                self._seen[cell] += 1
                self._taken[cell] += int(token) == choice


@dataclass(frozen=True)
class Position:
    """A draft node the tree may widen: `probs` is the draft's distribution for its children,
    `top` its likeliest tokens (best first), `drafted` the child the chain already holds there
    (None: the chain stopped here, and `first` is the token the draft chose, which leads any
    children this node gets)."""

    node: int
    probs: np.ndarray
    top: np.ndarray
    reach: float  # the chance that the target's path gets to this node
    drafted: int | None
    first: int | None = None

    def rank(self, token: int) -> int:
        """Where the draft ranked `token` (past its `top`: after all of them)."""
        found = np.flatnonzero(self.top == token)
        return int(found[0]) if len(found) else len(self.top)


def chain_positions(
    chain: list[int],
    rows: list[np.ndarray],
    stopped: tuple[int, np.ndarray] | None,
    width: int,
    rate: Rate = as_drafted,
) -> list[Position]:
    """The nodes of a chain draft (rows[i]: the draft's distribution that chose chain[i]), and
    the node after it where drafting stopped (`stopped`: the token it chose there and its
    distribution), each with its `width` + 1 likeliest tokens."""
    positions, reach = [], 1.0
    for i, (token, probs) in enumerate(zip(chain, rows)):
        position = Position(i, probs, _top(probs, width + 1), reach, token)
        positions.append(position)
        reach *= rate(position.rank(token), float(probs[token]))
    if stopped is not None:
        token, probs = stopped
        positions.append(Position(len(chain), probs, _top(probs, width + 1), reach, None, token))
    return positions


def widen(
    draft: Draft,
    positions: list[Position],
    width: int,
    pass_cost: Callable[[int], float],
    rng: np.random.Generator | None,
    rate: Rate = as_drafted,
    most: int = 64,
) -> int:
    """Hang up to `width` − 1 alternatives (`width` where the chain stopped) under each position,
    best first while they pay at `pass_cost` (seconds of a pass of n tokens) and `rate` (the
    chance the target takes a token the draft ranked and weighed so); `rng` draws them from q
    when sampling (None: the likeliest, for greedy). Returns the nodes added."""
    size = len(draft.tokens)
    expected = 1.0 + sum(
        p.reach * rate(p.rank(p.drafted), float(p.probs[p.drafted]))
        for p in positions
        if p.drafted is not None
    )
    slots: list[tuple[float, int]] = []  # (worth, position)
    for index, position in enumerate(positions):
        for token in _candidates(position, width):
            prob = float(position.probs[token])
            slots.append((position.reach * rate(position.rank(token), prob), index))
    slots.sort(key=lambda slot: -slot[0])
    counts = [0] * len(positions)
    added = 0
    for worth, index in slots:
        if added >= most:
            break
        if (expected + worth) / pass_cost(size + 1) <= expected / pass_cost(size):
            break
        expected += worth
        size += 1
        added += 1
        counts[index] += 1
    chain = draft.drafted
    for position, count in zip(positions, counts):
        if count:
            _hang(draft, position, count, width, rng)
            if draft.q is not None:
                draft.q[position.node] = position.probs
            draft.drafted = max(draft.drafted, position.node + 1)
    if draft.drafted > chain:  # alternatives where the chain stopped: not a depth the policy chose
        draft.sized = chain
    return added


def _top(probs: np.ndarray, n: int) -> np.ndarray:
    n = min(n, len(probs))
    top = np.sort(np.argpartition(probs, len(probs) - n)[len(probs) - n :])
    return top[np.argsort(-probs[top], kind="stable")]  # ties as argmax breaks them


def _candidates(position: Position, width: int) -> list[int]:
    """The tokens a position's new children would be, best first (for greedy they are exactly
    those; for sampling they only size the node)."""
    if position.drafted is not None:
        return [int(t) for t in position.top if t != position.drafted][: width - 1]
    first = position.first
    return [first] + [int(t) for t in position.top if t != first][: width - 1]


def _hang(
    draft: Draft, position: Position, count: int, width: int, rng: np.random.Generator | None
) -> None:
    """Add `count` children under a position: the likeliest other tokens (greedy), or draws
    from q without replacement after the token(s) already there (sampling)."""
    if rng is None:
        for token in _candidates(position, width)[:count]:
            draft.add_child(position.node, token)
        return
    if position.drafted is None:  # the node where drafting stopped: its own choice leads
        draft.add_child(position.node, position.first)
        count -= 1
        exclude = position.first
    else:
        exclude = position.drafted
    rest = position.probs.astype(np.float64, copy=True)
    rest[exclude] = 0.0
    for _ in range(count):
        mass = rest.sum()
        if mass <= 0:
            return
        token = sample(rest / mass, rng)
        rest[token] = 0.0
        draft.add_child(position.node, token)
