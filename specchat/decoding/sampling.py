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


def verify_tree(
    logits: np.ndarray, children: dict[int, dict[int, int]], sampler: Sampler
) -> tuple[list[int], int, int]:
    """Accept a path through a trie of copied drafts (n-grams: the drafter puts q(x) = 1).

    `children[node]` maps a drafted token to its block index; node 0 is the pending token.
    Returns (accepted tokens, the node reached, the target's next token there). Greedy: follow the
    child equal to the argmax. Sampling: try each child x in turn and keep it with probability
    p(x); on rejection zero x and renormalise — the residual max(0, p - q) — before trying the next
    (SpecInfer's multi-candidate rule); when all fail, sample the residual. Either way the output
    follows the target exactly.
    """
    accepted: list[int] = []
    node = 0
    while True:
        row = logits[node]
        options = children.get(node, {})
        if sampler.greedy:
            best = int(np.argmax(row))
            if best not in options:
                return accepted, node, best
            accepted.append(best)
            node = options[best]
            continue
        p = sampler.probs(row)
        chosen = None
        for token, child in options.items():
            if sampler.rng.random() < p[token]:
                chosen = (token, child)
                break
            p[token] = 0.0
            p /= p.sum()  # p(x) < 1 here, or x would have been kept
        if chosen is None:
            return accepted, node, sample(p, sampler.rng)
        accepted.append(chosen[0])
        node = chosen[1]


def verify_chain(
    logits: np.ndarray, draft: list[int], sampler: Sampler, draft_probs: np.ndarray | None = None
) -> tuple[int, int]:
    """Accept a prefix of `draft` against target logits of a chain [pending, *draft].

    Returns (accepted count, the target's next token after the accepted prefix). Copied drafts
    (no `draft_probs`) are a one-branch trie: see verify_tree. A draft model's tokens come with the
    distribution q they were sampled from: keep x with probability min(1, p(x)/q(x)), and on
    rejection draw from the normalised residual max(0, p - q) — exact speculative sampling.
    """
    if draft_probs is None or sampler.greedy:
        children = {i: {token: i + 1} for i, token in enumerate(draft)}
        accepted, _, next_token = verify_tree(logits, children, sampler)
        return len(accepted), next_token
    for i, token in enumerate(draft):
        p = sampler.probs(logits[i])
        if sampler.rng.random() * draft_probs[i][token] < p[token]:
            continue
        residual = np.maximum(p - draft_probs[i], 0.0)
        total = residual.sum()
        if total <= 0:  # p == q: the rejection cannot happen, but rounding can claim it did
            return i, sample(p, sampler.rng)
        return i, sample(residual / total, sampler.rng)
    return len(draft), sampler.next_token(logits[len(draft)])
