"""Lookahead decoding (Fu et al., 2024): a Jacobi window that guesses n-grams, a pool that keeps
them, and verification of the pool's n-grams for the pending token — all in one tree-shaped pass.

Block layout after the pending token (the root):
- window: W columns × (N-1) levels. Level 0 is a chain from the root (column i at depth i+1);
  level j of column i hangs under level j-1 of column i (depth i+j+1). The logits at the last
  level predict one token per column; each column's levels plus that prediction form an N-gram;
- verification: the pool's continuations of the pending token, merged into a trie under the root.
The window is shrunk (W, then G) until the block fits the cost budget measured for the backend.
"""

from __future__ import annotations

import numpy as np

from specchat.backends.base import Backend, Block
from specchat.decoding.draft_policy import AcceptanceEstimate, best_length
from specchat.decoding.ngram_pool import NgramPool
from specchat.decoding.sampling import Sampler, verify_tree
from specchat.decoding.step import Step


class LookaheadDecoder:
    def __init__(
        self,
        window: int = 5,
        ngram: int = 4,
        candidates: int = 5,
        max_cost_ratio: float = 2.0,
        seed_from_prompt: bool = True,
    ) -> None:
        self.name = "lookahead"
        if ngram < 2:
            raise ValueError("lookahead needs n-grams of at least 2 tokens")
        self.window, self.ngram, self.max_candidates = int(window), int(ngram), int(candidates)
        self.max_cost_ratio = float(max_cost_ratio)
        self.seed_from_prompt = bool(seed_from_prompt)
        self._pool = NgramPool(self.ngram, self.max_candidates)
        self._levels: list[list[int]] = []
        self._rng = np.random.default_rng(0)
        self._size: tuple[int, int] | None = None
        self._acceptance = AcceptanceEstimate()

    def params(self) -> dict[str, object]:
        return {
            "window": self.window,
            "ngram": self.ngram,
            "candidates": self.max_candidates,
            "max_cost_ratio": self.max_cost_ratio,
            "seed_from_prompt": self.seed_from_prompt,
        }

    def prepare(self, target: Backend) -> None:
        """Fit W and G to the cost budget: a pass may cost at most max_cost_ratio single passes."""
        levels = self.ngram - 1
        base = target.block_cost(1)
        window, cands = self.window, self.max_candidates
        while window + cands > 0:
            size = 1 + levels * (window + cands)
            if target.block_cost(size) <= self.max_cost_ratio * base:
                break
            if window >= cands and window > 0:
                window -= 1
            else:
                cands -= 1
        self._size = (window, cands)

    def reset(self, context: list[int]) -> None:
        self._pool.reset(context, self.seed_from_prompt)
        window = self._size[0] if self._size else self.window
        source = context if context else [0]
        self._levels = [
            [int(source[self._rng.integers(len(source))]) for _ in range(window)]
            for _ in range(self.ngram - 1)
        ]

    def step(self, target: Backend, context: list[int], sampler: Sampler, room: int) -> Step:
        self._pool.sync(context)
        window = len(self._levels[0]) if self._levels else 0
        if window and window + len(self._levels) >= room:
            window = 0  # near the context's end the window would run past it
        max_cands = self._size[1] if self._size else self.max_candidates
        pending = context[-1]
        tokens, parents = [pending], [-1]
        # The Jacobi window.
        level_nodes: list[list[int]] = []
        for j, level in enumerate(self._levels if window else []):
            nodes = []
            for i, token in enumerate(level):
                parent = (0 if i == 0 else nodes[i - 1]) if j == 0 else level_nodes[j - 1][i]
                tokens.append(token)
                parents.append(parent)
                nodes.append(len(tokens) - 1)
            level_nodes.append(nodes)
        # The verification trie, its depth chosen by expected tokens per second.
        candidates = self._pool.candidates(pending, max_cands)
        depth = self._best_depth(target, len(tokens), len(candidates), room)
        children: dict[int, dict[int, int]] = {0: {}}
        longest = 0
        for cand in candidates if depth else []:
            node = 0
            draft = cand[:depth]
            longest = max(longest, len(draft))
            for token in draft:
                child = children[node].get(token)
                if child is None:
                    tokens.append(token)
                    parents.append(node)
                    child = len(tokens) - 1
                    children[node][token] = child
                    children[child] = {}
                node = child
        logits = target.evaluate(Block(tuple(tokens), tuple(parents)))
        accepted, node, next_token = verify_tree(logits, children, sampler)
        target.commit(Block(tuple(tokens), tuple(parents)).path_to(node))
        if window:
            self._advance_window(logits, level_nodes, len(accepted) + 1)
        if longest:
            self._acceptance.update(longest, len(accepted))
        # "drafted" counts the longest candidate: the most this pass could have accepted.
        return Step(tokens=(*accepted, next_token), drafted=longest, accepted=len(accepted))

    def _best_depth(self, target: Backend, base_size: int, n_cands: int, room: int) -> int:
        """How deep to verify the pool's candidates: more depth costs a longer block on a
        compute-bound backend, and pays only at the acceptance seen so far."""
        if not n_cands:
            return 0
        top = max(0, min(self.ngram - 1, room - 1))
        return best_length(
            self._acceptance.rate, top, lambda d: target.block_cost(base_size + n_cands * d)
        )

    def _advance_window(self, logits, level_nodes, shifts: int) -> None:
        """One Jacobi iteration: the last level's predictions become the newest level, the
        oldest level with them forms N-grams for the pool; extra accepted tokens shift again."""
        predictions = [int(np.argmax(logits[node])) for node in level_nodes[-1]]
        for i, first in enumerate(self._levels[0]):
            continuation = tuple(level[i] for level in self._levels[1:]) + (predictions[i],)
            self._pool.add(first, continuation)
        self._levels = self._levels[1:] + [predictions]
        for _ in range(shifts - 1):
            self._levels = self._levels[1:] + [list(self._levels[0])]
