"""Turning logits into tokens: the small pure helpers every decoder shares.

Greedy is temperature 0. Sampling applies temperature, then top-k, then top-p, as transformers
and llama.cpp do, and draws with a seeded generator so a seed reproduces an answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def logits_to_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The distribution sampling draws from (float64, sums to 1) for one row of logits."""
    scaled = logits.astype(np.float64) / max(params.temperature, 1e-6)
    if 0 < params.top_k < scaled.shape[-1]:
        kth = np.partition(scaled, -params.top_k)[-params.top_k]
        scaled = np.where(scaled < kth, -np.inf, scaled)
    scaled -= scaled.max()
    probs = np.exp(scaled)
    probs /= probs.sum()
    if params.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[order])
        # keep the smallest set whose mass reaches top_p (always at least the top token)
        cutoff = int(np.searchsorted(cumulative, params.top_p)) + 1
        keep = np.zeros_like(probs, dtype=bool)
        keep[order[:cutoff]] = True
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum()
    return probs


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from a distribution (inverse CDF: one uniform per token, reproducible)."""
    cumulative = np.cumsum(probs)
    return int(
        min(
            np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"), len(probs) - 1
        )
    )


class Sampler:
    """Sampling settings plus the random stream; one per answer, kept across decoder switches."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    def next_token(self, logits: np.ndarray) -> int:
        if self.params.greedy:
            return int(np.argmax(logits))
        return sample(logits_to_probs(logits, self.params), self.rng)

    def probs(self, logits: np.ndarray) -> np.ndarray:
        return logits_to_probs(logits, self.params)


@dataclass(frozen=True)
class Verdict:
    """What verification kept: the accepted drafted tokens, the block node reached, and the
    target's next token there. `distance` is None when every token was drawn from the target's
    distribution; under soft matching it is the summed total variation between the distribution
    each verified position's token was drawn from and the target's there."""

    accepted: list[int]
    node: int
    next_token: int
    distance: float | None = None


def verify_tree(
    logits: np.ndarray,
    children: dict[int, dict[int, int]],
    sampler: Sampler,
    draft_q: dict[int, np.ndarray] | None = None,
    soft: float = 0.0,
) -> Verdict:
    """Accept a path through a trie of drafts.

    `children[node]` maps a drafted token to its block index (node 0 is the pending token), in
    the order the drafter proposed them. Greedy: follow the child equal to the argmax. Sampling,
    one node at a time, children in order (SpecInfer's multi-branch rule, as recursive rejection
    sampling): a child x is kept with probability min(1, p(x)/q(x)); on rejection p becomes the
    normalised residual max(0, p − q), x leaves q and q is renormalised, and the next child is
    tried; when all fail the next token is drawn from what p has become. `draft_q[node]` is the
    distribution a draft model drew that node's children from — one after another without
    replacement, which is what keeps the rule exact; a node without one holds copied drafts, a
    point mass each (q(x) = 1: keep x with probability p(x), else zero it). Either way the output
    follows the target exactly.

    `soft` (β > 0, opt-in) is soft matching and is NOT exact: at a node with a draft model's q
    and one child, x is also kept when 1 − p(x)/q(x) ≤ β. The verdict's `distance` then says how
    far each such position's distribution moved from p.
    """
    accepted: list[int] = []
    node = 0
    distance: float | None = None
    while True:
        row = logits[node]
        options = children.get(node, {})
        if sampler.greedy:
            best = int(np.argmax(row))
            if best not in options:
                return Verdict(accepted, node, best)
            accepted.append(best)
            node = options[best]
            continue
        p = sampler.probs(row)
        q = draft_q.get(node) if draft_q else None
        beta = soft if q is not None and len(options) == 1 else 0.0
        if beta:
            distance = (distance or 0.0) + soft_distance(p, q, beta)
        chosen, p = _choose_child(options, p, q, sampler.rng, beta)
        if chosen is None:
            return Verdict(accepted, node, sample(p, sampler.rng), distance)
        accepted.append(chosen[0])
        node = chosen[1]


def _choose_child(
    options: dict[int, int],
    p: np.ndarray,
    q: np.ndarray | None,
    rng: np.random.Generator,
    soft: float,
) -> tuple[tuple[int, int] | None, np.ndarray]:
    """The child the target keeps (None: none) and the distribution p has become."""
    q = None if q is None else q.astype(np.float64, copy=True)
    for token, child in options.items():
        if q is None:  # a copied draft
            if rng.random() < p[token]:
                return (token, child), p
            p[token] = 0.0
            p /= p.sum()  # p(x) < 1 here, or x would have been kept
            continue
        if rng.random() * q[token] < p[token] or (soft and p[token] >= (1.0 - soft) * q[token]):
            return (token, child), p
        residual = rejection_residual(p, q)
        if residual is None:  # p == q: the rejection cannot happen, but rounding can claim it did
            return None, p
        p = residual
        q = without(q, token)
        if q is None:
            break
    return None, p


def without(q: np.ndarray, token: int) -> np.ndarray | None:
    """q once `token` was drawn from it: what the next child, drawn without replacement, follows
    (None: nothing left to draw)."""
    q[token] = 0.0
    mass = q.sum()
    return q / mass if mass > 0 else None


def rejection_residual(p: np.ndarray, q: np.ndarray) -> np.ndarray | None:
    """The normalised max(0, p − q) a rejected draft leaves to sample from (None: p ≤ q
    everywhere, i.e. p == q up to rounding)."""
    residual = np.maximum(p - q, 0.0)
    total = residual.sum()
    return residual / total if total > 0 else None


def soft_distance(p: np.ndarray, q: np.ndarray, beta: float) -> float:
    """Total variation between soft matching's output distribution at one position and the
    target's p, for a token drawn from q: the tokens with (1 − β)·q ≤ p < q are kept always
    instead of with probability p/q, and exactly that extra mass moves away from the others."""
    boosted = (p < q) & (p >= (1.0 - beta) * q)
    return float((q - p)[boosted].sum())
