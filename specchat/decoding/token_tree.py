"""SpecInfer's token trees from a draft model: the draft's other likely tokens, hung beside its
chain where it is unsure, as many as the target's measured pass costs pay for.

A draft model drafts one chain, one of its own passes a token. Where it is unsure, the target
often takes the draft's second or third choice instead. Such an alternative costs the draft
nothing more (its distribution at that position is already computed) and the target one more node
in the pass; it gains one token when the target takes it. Its worth is the chance that the target
reaches its position and takes it, estimated from the draft's own probabilities along the chain.
Alternatives join best first while the pass's expected tokens per second still rise at the
backend's measured cost of a pass one node larger: where a wide pass is nearly free (transformers,
the int4 runtime) many join, where it is dear (llama.cpp) few or none. The position where the
draft stopped for want of confidence is a node too: its likeliest tokens are already known.

Greedy verification follows the target's argmax through the tree, so the alternatives are the
draft's next-likeliest tokens. Sampled verification (sampling.verify_tree) is exact only if a
node's children were drawn from the draft's q one after another without replacement: how many a
position gets is decided from q alone, then they are drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specchat.decoding.sampling import sample
from specchat.decoding.speculative import Draft


@dataclass(frozen=True)
class Position:
    """A draft node the tree may widen: `probs` is the draft's distribution for its children,
    `drafted` the child the chain already holds there (None: the chain stopped here, and `first`
    is the token the draft chose, which leads any children this node gets)."""

    node: int
    probs: np.ndarray
    reach: float  # the draft's own estimate that the target's path gets to this node
    drafted: int | None
    first: int | None = None


def chain_positions(
    chain: list[int], rows: list[np.ndarray], stopped: tuple[int, np.ndarray] | None
) -> list[Position]:
    """The nodes of a chain draft (rows[i]: the draft's distribution that chose chain[i]), and
    the node after it where drafting stopped (`stopped`: the token it chose there and its
    distribution)."""
    positions, reach = [], 1.0
    for i, (token, probs) in enumerate(zip(chain, rows)):
        positions.append(Position(i, probs, reach, token))
        reach *= float(probs[token])
    if stopped is not None:
        token, probs = stopped
        positions.append(Position(len(chain), probs, reach, None, token))
    return positions


def widen(
    draft: Draft,
    positions: list[Position],
    width: int,
    pass_cost: Callable[[int], float],
    rng: np.random.Generator | None,
    most: int = 64,
) -> int:
    """Hang up to `width` − 1 alternatives (`width` where the chain stopped) under each position,
    best first while they pay at `pass_cost` (seconds of a pass of n tokens); `rng` draws them
    from q when sampling (None: the likeliest, for greedy). Returns the nodes added."""
    size = len(draft.tokens)
    expected = 1.0 + sum(
        p.reach * float(p.probs[p.drafted]) for p in positions if p.drafted is not None
    )
    bar = expected * (pass_cost(size + 1) / pass_cost(size) - 1.0)  # the least a node must bring
    slots: list[tuple[float, int, int]] = []  # (worth, position, rank among its alternatives)
    for index, position in enumerate(positions):
        taken = 0.0 if position.drafted is None else float(position.probs[position.drafted])
        if position.reach * (1.0 - taken) <= bar:
            continue  # not even all its other tokens together would pay
        for rank, prob in enumerate(_likeliest(position, width)):
            slots.append((position.reach * prob, index, rank))
    slots.sort(key=lambda slot: -slot[0])
    counts = [0] * len(positions)
    added = 0
    for worth, index, _ in slots:
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


def _likeliest(position: Position, width: int) -> list[float]:
    """Probabilities of the tokens a position's new children would be, best first (for greedy
    they are exactly those; for sampling they only size the node)."""
    probs = position.probs
    n = min(width + 1, len(probs))
    top = np.argpartition(-probs, n - 1)[:n]
    top = top[np.argsort(-probs[top], kind="stable")]
    if position.drafted is not None:
        return [float(probs[t]) for t in top if t != position.drafted][: width - 1]
    first = position.first
    return [float(probs[first])] + [float(probs[t]) for t in top if t != first][: width - 1]


def _hang(
    draft: Draft, position: Position, count: int, width: int, rng: np.random.Generator | None
) -> None:
    """Add `count` children under a position: the likeliest other tokens (greedy), or draws
    from q without replacement after the token(s) already there (sampling)."""
    probs = position.probs
    if position.drafted is None:  # the node where drafting stopped: its own choice leads
        draft.add_child(position.node, position.first)
        count -= 1
        exclude = position.first
    else:
        exclude = position.drafted
    if rng is None:
        n = min(width + 1, len(probs))
        top = np.argpartition(-probs, n - 1)[:n]
        top = top[np.argsort(-probs[top], kind="stable")]
        for token in [int(t) for t in top if t != exclude][:count]:
            draft.add_child(position.node, token)
        return
    rest = probs.astype(np.float64, copy=True)
    rest[exclude] = 0.0
    for _ in range(count):
        mass = rest.sum()
        if mass <= 0:
            return
        token = sample(rest / mass, rng)
        rest[token] = 0.0
        draft.add_child(position.node, token)
