"""Lookahead decoding (Fu et al., 2024): a Jacobi window that guesses n-grams, a pool that keeps
them, and verification of the pool's n-grams for the pending token — all in one tree-shaped pass.

Block layout after the pending token (the root):
- verification: a trie under the root. Its first branch is what followed the latest earlier
  occurrence of the context's tail (the pool's context n-grams, taken as far as the match allows,
  as prompt lookup copies); beside it, the pool's other n-grams for the pending token — the
  window's guesses and older occurrences in the context ("the guess set");
- window: W columns × (N-1) levels. Level 0 is a chain from the root (column i at depth i+1);
  level j of column i hangs under level j-1 of column i (depth i+j+1). The logits at the last
  level predict one token per column; each column's levels plus that prediction form an N-gram.

Every part is sized from the backend's measured pass costs, as the draft-length policy sizes
drafts: the first branch's depth by the policy (per situation: how long the match is, whether the
last draft was taken whole); the guess set and the window each by what they were seen to bring
per unit (a guess, a column) against what the wider pass costs — the size with the most expected
tokens per second. The window is an investment that costs every pass and pays only when its
n-grams are accepted later; when it was dropped it is tried again now and then, where a hopeful
yield would pay. So where a wide pass is dear (llama.cpp) lookahead mostly steps as prompt lookup
does, and where passes are nearly flat (transformers, the int4 runtime) the guesses and the window
widen as far as they bring tokens.
"""

from __future__ import annotations

import numpy as np

from specchat.backends.base import Backend, Block
from specchat.decoding.draft_policy import Plan, expected_tokens
from specchat.decoding.ngram_index import NgramIndex
from specchat.decoding.ngram_pool import NgramPool
from specchat.decoding.params import Param
from specchat.decoding.prompt_lookup import copy_prior, match_bucket
from specchat.decoding.sampling import Sampler
from specchat.decoding.sources import LOOKAHEAD, NO_SOURCES, DraftSources, context_source
from specchat.decoding.speculative import (
    SPECULATIVE_PARAMS,
    Draft,
    SpeculativeDecoder,
    insert_branch,
)

_COPY_LIMIT = 64  # the longest copy drafted
# What a unit brings (accepted tokens per step) before evidence, weighted as this many
# unit-steps; older steps fade so the estimate follows the answer.
_WINDOW_PRIOR, _GUESS_PRIOR, _PRIOR_STEPS = 0.05, 0.1, 32.0
_POOL_PRIOR = 0.3  # per-token acceptance of the pool's newest guess, first, before evidence
_FADE = 0.98
# A part that was dropped is tried again after this many steps, for a few steps, at the size a
# hopeful yield per unit would pay for — never where even that would not pay.
_PROBE_EVERY, _PROBE_STEPS, _HOPE = 96, 12, 0.3


class YieldSizer:
    """How many units of a part of the pass (window columns, extra guesses) to run: the count
    with the most expected tokens per second, from the tokens per unit the part was seen to
    bring (learned, faded) and the measured pass costs."""

    def __init__(self, most: int, prior: float) -> None:
        self.most = most
        self.brought = prior * _PRIOR_STEPS  # tokens...
        self.units = _PRIOR_STEPS  # ...over this many unit-steps
        self._off_for = self._probing = 0

    @property
    def per_unit(self) -> float:
        return self.brought / self.units

    def count(self, target: Backend, expected: float, size: int, unit: int, most: int) -> int:
        """Units for the next pass: the rest of the pass has `size` tokens and is expected to
        yield `expected` tokens; each unit adds `unit` tokens; at most `most` units."""
        most = min(most, self.most)
        if not most:
            return 0
        best = self._best(target, expected, size, unit, most, self.per_unit)
        if best:
            self._off_for = self._probing = 0
            return best
        if self._probing:
            self._probing -= 1
            return self._best(target, expected, size, unit, most, _HOPE)
        self._off_for += 1
        if self._off_for >= _PROBE_EVERY:  # conditions change: look again, where it could pay
            self._off_for, self._probing = 0, _PROBE_STEPS
        return 0

    @staticmethod
    def _best(target: Backend, expected: float, size: int, unit: int, most: int, per: float) -> int:
        best, best_rate = 0, expected / target.block_cost(size)
        for n in range(1, most + 1):
            rate = (expected + per * n) / target.block_cost(size + n * unit)
            if rate > best_rate * 1.0001:
                best, best_rate = n, rate
        return best

    def record(self, units: int, brought: int) -> None:
        """A pass ran `units` units, and they brought `brought` tokens."""
        if units:
            self.brought = self.brought * _FADE + brought
            self.units = self.units * _FADE + units


class LookaheadDrafter:
    replayable = False

    def proposal(self, context: list[int]) -> list[int]:
        """Its drafts depend on more than the context: nothing to replay."""
        return []

    def __init__(self, window: int, ngram: int, candidates: int, seed: bool) -> None:
        self.ngram = ngram
        self.seed_from_prompt = seed
        self._pool = NgramPool(ngram, candidates)
        self._index = NgramIndex(1, 3)
        self._window = YieldSizer(window, _WINDOW_PRIOR)
        self._guesses = YieldSizer(candidates, _GUESS_PRIOR)
        self._levels: list[list[int]] = []  # the Jacobi window, `window` columns wide
        self._rng = np.random.default_rng(0)
        self._turn_start = 0
        self._streak = False
        self._first: tuple[tuple[int, ...], str] | None = None  # the copy: (tokens, origin)
        self._others: list[tuple[tuple[int, ...], str]] = []  # the guess set
        self._room = 0
        self._prior = 0.0
        # the last pass, until the next plan sees what it accepted
        # (draft, context length, accepted, window columns, guesses, copy depth)
        self._last: tuple[Draft, int, int, int, int, int] | None = None

    def prepare(self, target: Backend) -> None:
        target.block_cost(1)

    def reset(self, context: list[int], sources: DraftSources = NO_SOURCES) -> None:
        self._pool.reset(context, self.seed_from_prompt, sources.turn_start)
        self._index.reset(context if self.seed_from_prompt else [])
        self._turn_start = sources.turn_start
        self._streak = False
        self._last = None
        source = context if context else [0]
        self._levels = [
            [int(source[self._rng.integers(len(source))]) for _ in range(self._window.most)]
            for _ in range(self.ngram - 1)
        ]

    def plan(self, context: list[int], room: int) -> Plan:
        self._learn_from_last(context)
        self._pool.sync(context)
        key_token = context[-1]
        guesses = [
            (c, self._pool.origin(key_token, c)) for c in self._pool.candidates(key_token, 64)
        ]
        self._first, copying = None, None
        if self.seed_from_prompt:
            self._index.sync(context)
            found = self._index.match(_COPY_LIMIT)
            if found.continuation:
                origin = context_source(found.end + 1, self._turn_start)
                self._first, copying = (tuple(found.continuation), origin), found.length
        if self._first is None and guesses:
            self._first, guesses = guesses[0], guesses[1:]
        first = self._first[0] if self._first else ()
        # the guess set: other continuations, each differing from the copy where it starts
        self._others = [(c, o) for c, o in guesses if c[: len(first)] != first[: len(c)]]
        if copying is not None:
            bucket = match_bucket(copying)
            key, self._prior = ("copy", bucket, self._streak), copy_prior(bucket, self._streak)
        else:
            key, self._prior = ("pool",), _POOL_PRIOR
        self._room = room
        return Plan(available=len(first), key=key, prior=self._prior)

    def draft(
        self, target: Backend, context: list[int], sampler: Sampler, plan: Plan, depth: int
    ) -> Draft:
        tokens, parents = [context[-1]], [-1]
        children: dict[int, dict[int, int]] = {0: {}}
        node_sources: dict[int, str] = {}
        if depth and self._first is not None:
            insert_branch(tokens, parents, children, node_sources, list(self._first[0][:depth]),
                          self._first[1])  # fmt: skip
        expected = expected_tokens(self._prior, depth)
        # The guess set, each guess as deep as the pool keeps it, as many as pay.
        unit = self.ngram - 1
        guesses = self._guesses.count(target, expected, len(tokens), unit, len(self._others))
        for cand, origin in self._others[:guesses]:
            insert_branch(tokens, parents, children, node_sources, list(cand), origin)
        expected += self._guesses.per_unit * guesses
        # The Jacobi window, as wide as pays beside them.
        width = self._window_width(target, expected, len(tokens))
        level_nodes: list[list[int]] = []
        for j, level in enumerate(self._levels if width else []):
            nodes = []
            for i, token in enumerate(level[:width]):
                parent = (0 if i == 0 else nodes[i - 1]) if j == 0 else level_nodes[j - 1][i]
                tokens.append(token)
                parents.append(parent)
                nodes.append(len(tokens) - 1)
            level_nodes.append(nodes)
        depths = Block(tuple(tokens), tuple(parents)).depths
        return Draft(
            tokens,
            parents,
            children,
            drafted=max((depths[node] for node in node_sources), default=0),
            state=(level_nodes, len(context), width, guesses, depth),
            source=LOOKAHEAD,
            node_sources=node_sources,
        )

    def _window_width(self, target: Backend, expected: float, size: int) -> int:
        if not self._levels or self._window.most + len(self._levels) >= self._room:
            return 0  # near the context's end the window would run past it
        return self._window.count(target, expected, size, len(self._levels), self._window.most)

    def _learn_from_last(self, context: list[int]) -> None:
        """What the guess set and the window brought, once the context shows what the last pass
        accepted: the tokens beyond what the copy alone would have given, and the tokens of a
        guess the window made."""
        if self._last is None:
            return
        draft, start, accepted, width, guesses, copied = self._last
        self._last = None
        taken = context[start : start + accepted]
        node = 0
        for token in taken:
            node = draft.children.get(node, {}).get(token, node)
        first = self._first_branch(draft)[:copied] if copied else []
        by_copy = next((i for i, (a, b) in enumerate(zip(taken, first)) if a != b), len(taken))
        self._guesses.record(guesses, accepted - min(by_copy, len(first)))
        self._window.record(width, accepted if draft.source_of(node) == LOOKAHEAD else 0)

    @staticmethod
    def _first_branch(draft: Draft) -> list[int]:
        tokens, node = [], 0
        while draft.children.get(node):
            token, node = next(iter(draft.children[node].items()))
            tokens.append(token)
        return tokens

    def observe(self, draft: Draft, logits: np.ndarray, accepted: int) -> None:
        """One Jacobi iteration: the last level's predictions become the newest level, the
        oldest level with them forms N-grams for the pool; extra accepted tokens shift again.
        What the guesses and the window brought is learned at the next plan."""
        level_nodes, start, width, guesses, copied = draft.state
        if copied:
            self._streak = accepted >= copied  # the first branch was taken whole
        self._last = (draft, start, accepted, width, guesses, copied)
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
        Param(
            "candidates", int, 5, "G: most pool n-grams verified per step (and kept per key)", 1, 64
        ),
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
