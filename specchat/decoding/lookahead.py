"""Lookahead decoding (Fu et al., 2024): a Jacobi window that guesses n-grams, a pool that keeps
them, and verification of the pool's n-grams for the pending token — all in one tree-shaped pass.

Block layout after the pending token (the root):
- window: W columns × (N-1) levels. Level 0 is a chain from the root (column i at depth i+1);
  level j of column i hangs under level j-1 of column i (depth i+j+1). The logits at the last
  level predict one token per column; each column's levels plus that prediction form an N-gram;
- verification: the pool's continuations of the pending token, merged into a trie under the root
  — or, where the context's tail matches earlier text for two tokens or more, what followed that
  match (the pool's context n-grams, taken as long as the match allows, as prompt lookup does).

Every part is sized from the backend's measured pass costs, as the draft-length policy sizes
drafts: the verification depth by the policy (per situation: a copy of a match of this length, or
the pool's guesses); the guesses verified together by what a wider pass costs; and the window by
what it brings. The window is an investment — it costs every pass and pays only when its n-grams
are accepted later — so its width is the one with the most expected tokens per second at the
measured costs, from the tokens its n-grams were seen to bring per column, and it is probed again
now and then when it was dropped. Where a wide pass is dear (llama.cpp) the window is mostly off
and lookahead steps as prompt lookup does; where passes are nearly flat (transformers, the int4
runtime) it runs wide.
"""

from __future__ import annotations

import numpy as np

from specchat.backends.base import Backend
from specchat.decoding.draft_policy import Plan, expected_tokens
from specchat.decoding.ngram_index import NgramIndex
from specchat.decoding.ngram_pool import NgramPool
from specchat.decoding.params import Param
from specchat.decoding.prompt_lookup import CopyRegime
from specchat.decoding.sampling import Sampler
from specchat.decoding.sources import (
    LOOKAHEAD,
    NO_SOURCES,
    DraftSources,
    context_source,
    through_end,
)
from specchat.decoding.speculative import (
    SPECULATIVE_PARAMS,
    Draft,
    SpeculativeDecoder,
    insert_branch,
)

_COPY_MATCH = 2  # a match this long is copied whole (prompt lookup's situations); shorter: the pool
_COPY_LIMIT = 64  # the longest copy drafted
_POOL_PRIOR = 0.3  # per-token acceptance of a pool guess before any evidence
# The window's yield: accepted tokens per step per window column that its n-grams brought,
# before evidence (weight in column-steps); older steps fade so the estimate follows the answer.
_WINDOW_PRIOR, _WINDOW_PRIOR_STEPS = 0.05, 32.0
_WINDOW_FADE = 0.98
# A dropped window is tried again after this many steps, for a few steps, at the width a hopeful
# yield per column would pay for — never where even that would not pay.
_PROBE_EVERY, _PROBE_STEPS, _HOPE = 96, 12, 0.3


class WindowSizer:
    """The Jacobi window's width: the one with the most expected tokens per second, from the
    tokens per column its n-grams brought (learned, faded) and the measured pass costs."""

    def __init__(self, widest: int, levels: int) -> None:
        self.widest, self.levels = widest, levels
        self.brought = _WINDOW_PRIOR * _WINDOW_PRIOR_STEPS  # tokens, per column
        self.steps = _WINDOW_PRIOR_STEPS  # column-steps behind `brought`
        self._off_for = 0
        self._probing = 0

    @property
    def per_column(self) -> float:
        return self.brought / self.steps

    def width(self, target: Backend, expected: float, verify: int) -> int:
        """Columns for the next pass, whose other tokens (`verify`: pending token and drafts)
        are expected to yield `expected` tokens."""
        best = self._best(target, expected, verify, self.per_column)
        if best:
            self._off_for = self._probing = 0
            return best
        if self._probing:
            self._probing -= 1
            return self._best(target, expected, verify, _HOPE)
        self._off_for += 1
        if self._off_for >= _PROBE_EVERY:  # conditions change: look again, where it could pay
            self._off_for, self._probing = 0, _PROBE_STEPS
        return 0

    def _best(self, target: Backend, expected: float, verify: int, per_column: float) -> int:
        best, best_rate = 0, expected / target.block_cost(verify)
        for width in range(1, self.widest + 1):
            size = verify + width * self.levels
            rate = (expected + per_column * width) / target.block_cost(size)
            if rate > best_rate * 1.0001:
                best, best_rate = width, rate
        return best

    def record(self, width: int, brought: int) -> None:
        """A step ran `width` columns and the window's n-grams brought `brought` tokens."""
        if not width:
            return
        self.brought = self.brought * _WINDOW_FADE + brought
        self.steps = self.steps * _WINDOW_FADE + width


class LookaheadDrafter:
    replayable = False
    undrafted_is_plain = False  # its window is evaluated and learned from all the same

    def proposal(self, context: list[int]) -> list[int]:
        """Its drafts depend on more than the context: nothing to replay."""
        return []

    def __init__(self, window: int, ngram: int, candidates: int, seed: bool) -> None:
        self.ngram, self.max_candidates = ngram, candidates
        self.seed_from_prompt = seed
        self._pool = NgramPool(ngram, candidates)
        self._index = NgramIndex(1, 3)
        self._sizer = WindowSizer(window, ngram - 1)
        self._levels: list[list[int]] = []  # the Jacobi window, `window` columns wide
        self._rng = np.random.default_rng(0)
        self._turn_start = 0
        self._copies = CopyRegime()
        self._candidates: list[tuple[tuple[int, ...], str]] = []  # (tokens, origin)
        self._room = 0
        self._prior = _POOL_PRIOR
        self._ends: frozenset[int] = frozenset()
        # the last pass, until the next plan sees what it accepted: (draft, context length,
        # accepted count, window columns)
        self._last: tuple[Draft, int, int, int] | None = None

    def prepare(self, target: Backend) -> None:
        target.block_cost(1)
        self._ends = target.eos_ids

    def reset(self, context: list[int], sources: DraftSources = NO_SOURCES) -> None:
        self._pool.reset(context, self.seed_from_prompt, sources.turn_start)
        self._index.reset(context if self.seed_from_prompt else [])
        self._turn_start = sources.turn_start
        self._copies.reset(len(context))
        self._last = None
        source = context if context else [0]
        self._levels = [
            [int(source[self._rng.integers(len(source))]) for _ in range(self._sizer.widest)]
            for _ in range(self.ngram - 1)
        ]

    def plan(self, context: list[int], room: int) -> Plan:
        self._learn_from_last(context)
        self._pool.sync(context)
        copy = None
        if self.seed_from_prompt:
            self._index.sync(context)
            found = self._index.match(_COPY_LIMIT)
            if found.length >= _COPY_MATCH and found.continuation:
                copy = found
        if copy is not None:
            origin = context_source(copy.end + 1, self._turn_start)
            self._candidates = [(tuple(through_end(copy.continuation, self._ends)), origin)]
            key, prior = self._copies.situation(copy, len(context))
        else:
            key_token = context[-1]
            found = self._pool.candidates(key_token, self.max_candidates)
            self._candidates = [
                (through_end(c, self._ends), self._pool.origin(key_token, c)) for c in found
            ]
            guessed = bool(found) and self._candidates[0][1] == LOOKAHEAD
            key, prior = ("pool", guessed), _POOL_PRIOR
        available = max((len(c) for c, _ in self._candidates), default=0)
        self._room, self._prior = room, prior
        return Plan(available=available, key=key, branches=max(1, len(self._candidates)),
                    prior=prior)  # fmt: skip

    def draft(
        self, target: Backend, context: list[int], sampler: Sampler, plan: Plan, depth: int
    ) -> Draft:
        # The verification trie, `depth` deep; then as many window columns as pay.
        tokens, parents = [context[-1]], [-1]
        children: dict[int, dict[int, int]] = {0: {}}
        node_sources: dict[int, str] = {}
        longest = 0
        for cand, origin in self._candidates if depth else []:
            branch = list(cand[:depth])
            longest = max(longest, len(branch))
            insert_branch(tokens, parents, children, node_sources, branch, origin)
        width = self._window_width(target, expected_tokens(self._prior, depth), len(tokens))
        level_nodes: list[list[int]] = []
        for j, level in enumerate(self._levels if width else []):
            nodes = []
            for i, token in enumerate(level[:width]):
                parent = (0 if i == 0 else nodes[i - 1]) if j == 0 else level_nodes[j - 1][i]
                tokens.append(token)
                parents.append(parent)
                nodes.append(len(tokens) - 1)
            level_nodes.append(nodes)
        # "drafted" counts the longest candidate: the most this pass could have accepted.
        return Draft(
            tokens,
            parents,
            children,
            drafted=longest,
            state=(level_nodes, len(context), width),
            source=LOOKAHEAD,
            node_sources=node_sources,
        )

    def _window_width(self, target: Backend, expected: float, verify: int) -> int:
        """Columns for this pass, beside `verify` tokens expected to yield `expected` (by the
        situation's prior: the policy's own estimate stays with the policy)."""
        if not self._levels or self._sizer.widest + len(self._levels) >= self._room:
            return 0  # near the context's end the window would run past it
        return self._sizer.width(target, expected, verify)

    def _learn_from_last(self, context: list[int]) -> None:
        """The window's worth, once the context shows what the last pass accepted: the tokens
        a guess of the window brought."""
        if self._last is None:
            return
        draft, start, accepted, width = self._last
        self._last = None
        node = 0
        for token in context[start : start + accepted]:
            node = draft.children.get(node, {}).get(token, node)
        self._sizer.record(width, accepted if draft.source_of(node) == LOOKAHEAD else 0)

    def observe(self, draft: Draft, logits: np.ndarray, accepted: int) -> None:
        """What the window's n-grams brought (an accepted guess), then one Jacobi iteration: the
        last level's predictions become the newest level, the oldest level with them forms
        N-grams for the pool; extra accepted tokens shift again."""
        level_nodes, start, width = draft.state
        self._copies.observe(draft.drafted, accepted)
        self._last = (draft, start, accepted, width)
        if not level_nodes:
            return
        predictions = [int(np.argmax(logits[node])) for node in level_nodes[-1]]
        for i in range(width):
            continuation = tuple(level[i] for level in self._levels[1:]) + (predictions[i],)
            self._pool.add(self._levels[0][i], continuation)
        newest = predictions + self._levels[-1][width:]
        self._levels = self._levels[1:] + [newest]
        for _ in range(accepted):
            self._levels = self._levels[1:] + [list(self._levels[0])]


class LookaheadDecoder(SpeculativeDecoder):
    name = "lookahead"
    key = "f6"
    description = "lookahead: Jacobi window + n-gram pool, verified in the same tree-shaped pass"
    params = (
        Param("window", int, 8, "W: widest Jacobi window (columns; the pass costs choose)", 1, 64),
        Param("ngram", int, 4, "N: n-gram length (window levels = N-1)", 2, 16),
        Param("candidates", int, 5, "G: pool n-grams verified per step (and kept per key)", 1, 64),
        Param("seed_from_prompt", bool, True, "draft from the context's own n-grams too"),
    ) + SPECULATIVE_PARAMS

    def __init__(self, **values: object) -> None:
        super().__init__(**values)
        self.drafter = LookaheadDrafter(
            int(values["window"]),
            int(values["ngram"]),
            int(values["candidates"]),
            bool(values["seed_from_prompt"]),
        )
