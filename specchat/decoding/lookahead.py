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

from specchat.backends.base import Backend
from specchat.decoding.draft_policy import Plan
from specchat.decoding.ngram_pool import NgramPool
from specchat.decoding.params import Param
from specchat.decoding.sampling import Sampler
from specchat.decoding.sources import LOOKAHEAD, NO_SOURCES, DraftSources
from specchat.decoding.speculative import (
    SPECULATIVE_PARAMS,
    Draft,
    SpeculativeDecoder,
    insert_branch,
)


class LookaheadDrafter:
    replayable = False

    def proposal(self, context: list[int]) -> list[int]:
        """Its drafts depend on more than the context: nothing to replay."""
        return []

    def __init__(
        self, window: int, ngram: int, candidates: int, max_cost_ratio: float, seed: bool
    ) -> None:
        self.window, self.ngram, self.max_candidates = window, ngram, candidates
        self.max_cost_ratio = max_cost_ratio
        self.seed_from_prompt = seed
        self._pool = NgramPool(ngram, candidates)
        self._levels: list[list[int]] = []
        self._rng = np.random.default_rng(0)
        self._size: tuple[int, int] | None = None
        self._candidates: list[tuple[int, ...]] = []
        self._window = 0  # columns in this step's block

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

    def reset(self, context: list[int], sources: DraftSources = NO_SOURCES) -> None:
        self._pool.reset(context, self.seed_from_prompt, sources.turn_start)
        window = self._size[0] if self._size else self.window
        source = context if context else [0]
        self._levels = [
            [int(source[self._rng.integers(len(source))]) for _ in range(window)]
            for _ in range(self.ngram - 1)
        ]

    def _window_width(self, room: int) -> int:
        window = len(self._levels[0]) if self._levels else 0
        if window and window + len(self._levels) >= room:
            return 0  # near the context's end the window would run past it
        return window

    def plan(self, context: list[int], room: int) -> Plan:
        self._pool.sync(context)
        max_cands = self._size[1] if self._size else self.max_candidates
        self._candidates = self._pool.candidates(context[-1], max_cands)
        window = self._window = self._window_width(room)
        return Plan(
            available=(self.ngram - 1) if self._candidates else 0,
            key=("pool",),
            base=1 + window * len(self._levels),
            branches=len(self._candidates),
        )

    def draft(
        self, target: Backend, context: list[int], sampler: Sampler, plan: Plan, depth: int
    ) -> Draft:
        window = self._window
        tokens, parents = [context[-1]], [-1]
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
        # The verification trie of the pool's candidates, `depth` deep.
        children: dict[int, dict[int, int]] = {0: {}}
        node_sources: dict[int, str] = {}
        longest = 0
        key = context[-1]
        for cand in self._candidates if depth else []:
            branch = cand[:depth]
            longest = max(longest, len(branch))
            origin = self._pool.origin(key, cand)
            insert_branch(tokens, parents, children, node_sources, branch, origin)
        # "drafted" counts the longest candidate: the most this pass could have accepted.
        return Draft(
            tokens,
            parents,
            children,
            drafted=longest,
            state=level_nodes,
            source=LOOKAHEAD,
            node_sources=node_sources,
        )

    def observe(self, draft: Draft, logits: np.ndarray, accepted: int) -> None:
        """One Jacobi iteration: the last level's predictions become the newest level, the
        oldest level with them forms N-grams for the pool; extra accepted tokens shift again."""
        level_nodes = draft.state
        if not level_nodes:
            return
        predictions = [int(np.argmax(logits[node])) for node in level_nodes[-1]]
        for i, first in enumerate(self._levels[0]):
            continuation = tuple(level[i] for level in self._levels[1:]) + (predictions[i],)
            self._pool.add(first, continuation)
        self._levels = self._levels[1:] + [predictions]
        for _ in range(accepted):
            self._levels = self._levels[1:] + [list(self._levels[0])]


class LookaheadDecoder(SpeculativeDecoder):
    name = "lookahead"
    key = "f6"
    description = "lookahead: Jacobi window + n-gram pool, verified in the same tree-shaped pass"
    params = (
        Param("window", int, 5, "W: Jacobi window columns", 1, 64),
        Param("ngram", int, 4, "N: n-gram length (window levels = N-1)", 2, 16),
        Param("candidates", int, 5, "G: pool n-grams verified per step (and kept per key)", 1, 64),
        Param(
            "max_cost_ratio",
            float,
            2.0,
            "largest pass cost, in single-token passes, W/G shrink to",
            1.0,
            100.0,
        ),
        Param("seed_from_prompt", bool, True, "seed the pool with the context's own n-grams"),
    ) + SPECULATIVE_PARAMS

    def __init__(self, **values: object) -> None:
        super().__init__(**values)
        self.drafter = LookaheadDrafter(
            int(values["window"]),
            int(values["ngram"]),
            int(values["candidates"]),
            float(values["max_cost_ratio"]),
            bool(values["seed_from_prompt"]),
        )
