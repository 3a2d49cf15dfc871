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


def verify_chain(
    logits: np.ndarray, draft: list[int], sampler: Sampler, draft_probs: np.ndarray | None = None
) -> tuple[int, int]:
    """Accept a prefix of `draft` against target logits of a chain [pending, *draft].

    Returns (accepted count, the target's next token after the accepted prefix). Greedy: a drafted
    token is kept when it is the target's argmax. Sampling: exact speculative sampling — keep x
    with probability min(1, p(x)/q(x)), where q is the drafter's distribution (a one-hot, q(x)=1,
    for copied n-grams), and on rejection draw from the normalised residual max(0, p - q), so the
    output follows the target's distribution exactly.
    """
    for i, token in enumerate(draft):
        row = logits[i]
        if sampler.greedy:
            best = int(np.argmax(row))
            if best != token:
                return i, best
            continue
        p = sampler.probs(row)
        q_x = 1.0 if draft_probs is None else float(draft_probs[i][token])
        if sampler.rng.random() * q_x < p[token]:
            continue
        if draft_probs is None:
            residual = p.copy()
            residual[token] = 0.0
        else:
            residual = np.maximum(p - draft_probs[i], 0.0)
        total = residual.sum()
        if total <= 0:
            return i, sampler.next_token(row)
        return i, sample(residual / total, sampler.rng)
    return len(draft), sampler.next_token(logits[len(draft)])
