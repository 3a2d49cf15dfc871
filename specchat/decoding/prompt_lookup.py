"""Prompt lookup decoding: draft the tokens that followed an earlier occurrence of the context's
longest recent n-gram (of its latest occurrences, the one that agrees furthest back), verify them
in one target pass.

Acceptance is bursty — a draft copied from a passage being quoted keeps being right, one matched on
a single common token rarely is — so the policy learns it per situation: how far back the context's
tail really matches the earlier occurrence (a few tokens, or a 40-token copy under way), whether
the previous draft was accepted in full, and for a match of a token or two whether the earlier
occurrences all went on the way the copy does (the next token three times as often or more as
where they went different ways).
"""

from __future__ import annotations

import bisect

import numpy as np

from specchat.backends.base import Backend
from specchat.decoding.draft_policy import Plan
from specchat.decoding.ngram_index import Match, NgramIndex
from specchat.decoding.params import Param
from specchat.decoding.sampling import Sampler
from specchat.decoding.sources import (
    NO_SOURCES,
    PREVIOUS,
    DraftSources,
    context_source,
    through_end,
)
from specchat.decoding.speculative import SPECULATIVE_PARAMS, Draft, SpeculativeDecoder
from specchat.errors import SpecchatError

# Match lengths share statistics in buckets: 1, 2, 3, 4-5, 6-8, 9-12, 13-16, 17-24, 25-32, 33+.
MATCH_EDGES = (1, 2, 3, 4, 6, 9, 13, 17, 25, 33)
# Per-token acceptance before any evidence, per bucket: the rates measured on Spec-Bench dev
# answers of the bundled model (docs/bench-log.md), rising with the match length as copied text
# does; a fully accepted previous draft raises it.
_COPY_PRIORS = (0.28, 0.5, 0.6, 0.68, 0.75, 0.8, 0.85, 0.88, 0.9, 0.92)


# A match of one or two tokens is learned apart by how its occurrences went on: the only one
# ("one"), every one the same way ("all"), or several ways ("split"). Measured on the dev half's
# greedy answers (the first drafted token was the next one): match 1 — one 0.30, all 0.53,
# split 0.14; match 2 — one 0.53, all 0.80, split 0.25 (held out: 0.25-0.33, 0.60-0.75,
# 0.05-0.31; 0.39-0.55, 0.60, 0.24-0.50). Longer matches differ little by it.
_AGREEMENT_PRIORS = (
    {"one": 0.3, "all": 0.53, "split": 0.14},
    {"one": 0.53, "all": 0.8, "split": 0.25},
)


def agreement(match: Match) -> str:
    """How the matched n-gram's occurrences went on: "one", "all" (the same way) or "split"."""
    if match.occurrences <= 1:
        return "one"
    return "all" if match.agreeing == match.occurrences else "split"


def match_bucket(length: int) -> int:
    return max(0, bisect.bisect_right(MATCH_EDGES, length) - 1)  # (a scan: 3 µs a step)


def copy_prior(bucket: int, streak: bool, way: str | None = None) -> float:
    """The acceptance assumed of a copy before evidence: by its match bucket (and, for a short
    match, how its occurrences went on), raised while a copy is under way."""
    prior = _AGREEMENT_PRIORS[bucket][way] if way else _COPY_PRIORS[bucket]
    return prior + (0.95 - prior) / 2 if streak else prior


# A copy resumes after an edit when the context's match lies at most `_RESUME_SKIP` tokens further
# on in the source than the answer has moved since a match of `_LONG_MATCH` tokens or more, seen in
# the last `_RESUME_WITHIN` tokens.
_LONG_MATCH = 8
_RESUME_WITHIN = 16
_RESUME_SKIP = 8
# An answer whose first `_FROM_START` tokens or more are all one match copies from its start: on
# Spec-Bench and code-edit answers the first drafted token was taken in nearly all such positions,
# and 4-7.5 tokens of 8 (docs/bench-log.md, "Design choices measured").
_FROM_START = 2
_FROM_START_PRIOR = 0.95


class CopyRegime:
    """Whether a copy is under way, which the policy learns apart: the previous draft was taken
    whole (a streak), or the context's short match picks up, a few tokens on, the text a long match
    was copying just before — a copy resumed after an edit (a renamed word, a changed number, an
    inserted clause). Such a match is taken about as far as a long one, where other matches of its
    length are poor bets (docs/bench-log.md, "Design choices measured"). An answer that is all one copy so
    far (a function rewritten with type hints starts as the prompt's code) is a third situation,
    learned apart from the others: its short matches are the surest of all."""

    def __init__(self) -> None:
        self.streak = False  # the previous draft was accepted in full
        self._trail: list[tuple[int, int]] = []  # (context length, source end) of long matches
        self._answer_start = 0

    def reset(self, answer_start: int) -> None:
        """A new answer begins after `answer_start` context tokens."""
        self.streak = False
        self._trail = []
        self._answer_start = answer_start

    def situation(self, match: Match, position: int) -> tuple[tuple, float]:
        """The policy's key and prior for copying `match`'s continuation at context length
        `position` (noting a long match for the steps after)."""
        self._trail = [(p, e) for p, e in self._trail if position - p <= _RESUME_WITHIN]
        resumed = any(0 < match.end - e <= position - p + _RESUME_SKIP for p, e in self._trail)
        # the answer so far is all one copy (a quoted block being rewritten starts so)
        answered = position - self._answer_start
        from_start = answered >= _FROM_START and match.length >= answered
        if match.length >= _LONG_MATCH:
            self._trail.append((position, match.end))
        bucket = match_bucket(match.length)
        if from_start:
            return ("copy", bucket, "start"), _FROM_START_PRIOR
        under_way = self.streak or resumed
        if bucket < len(_AGREEMENT_PRIORS):
            way = agreement(match)
            return ("copy", bucket, under_way, way), copy_prior(bucket, under_way, way)
        return ("copy", bucket, under_way), copy_prior(bucket, under_way)

    def observe(self, drafted: int, accepted: int) -> None:
        if drafted:
            self.streak = accepted == drafted


class PromptLookupDrafter:
    replayable = True
    undrafted_is_plain = True

    def __init__(self, max_ngram: int, min_ngram: int, num_pred_tokens: int) -> None:
        self.num_pred_tokens = num_pred_tokens
        self._index = NgramIndex(min_ngram, max_ngram)
        # The answer being regenerated, after the prompt's last tokens: its first tokens then
        # match the prompt's end as they did when it was generated.
        self._previous: NgramIndex | None = None
        self._turn_start = 0
        self._copies = CopyRegime()
        self._proposal: list[int] = []
        self._source = ""
        self._ends: frozenset[int] = frozenset()

    def prepare(self, target: Backend) -> None:
        self._ends = target.eos_ids

    def reset(self, context: list[int], sources: DraftSources = NO_SOURCES) -> None:
        self._index.reset(context)
        self._copies.reset(len(context))
        self._turn_start = sources.turn_start
        self._previous = None
        if sources.previous_answer:
            self._previous = NgramIndex(self._index.min_n, self._index.max_n)
            self._previous.reset(context[-self._index.max_n :] + list(sources.previous_answer))

    def _match(self, context: list[int]) -> tuple[Match, str]:
        """The longer of the context's own match and the previous answer's (ties: the latter)."""
        self._index.sync(context)
        found = self._index.match(self.num_pred_tokens)
        source = context_source(found.end + 1, self._turn_start)
        if self._previous is not None:
            other = self._previous.match(self.num_pred_tokens, context)
            if other.continuation and other.length >= found.length:
                return other, PREVIOUS
        return found, source

    def plan(self, context: list[int], room: int) -> Plan:
        found, self._source = self._match(context)
        self._proposal = through_end(found.continuation, self._ends)
        key, prior = self._copies.situation(found, len(context))
        return Plan(available=len(self._proposal), key=key, prior=prior)

    def proposal(self, context: list[int]) -> list[int]:
        """What it would propose after `context` at most (a function of the context alone)."""
        return through_end(self._match(context)[0].continuation, self._ends)

    def draft(
        self, target: Backend, context: list[int], sampler: Sampler, plan: Plan, depth: int
    ) -> Draft:
        return Draft.chain(context[-1], self._proposal[:depth], source=self._source)

    def observe(self, draft: Draft, logits: np.ndarray, accepted: int) -> None:
        self._copies.observe(draft.drafted, accepted)


class PromptLookupDecoder(SpeculativeDecoder):
    name = "pld"
    key = "f5"
    default_rank = 2
    description = (
        "prompt lookup: drafts what followed the longest earlier match of the context's tail"
    )
    params = (
        Param("max_ngram", int, 3, "longest n-gram matched against the context", 1, 64),
        Param("min_ngram", int, 1, "shortest n-gram matched", 1, 64),
        Param("num_pred_tokens", int, 64, "most tokens drafted in one step", 1, 256),
    ) + SPECULATIVE_PARAMS

    @classmethod
    def check(cls, values: dict[str, object]) -> None:
        if values["min_ngram"] > values["max_ngram"]:
            raise SpecchatError("pld.min_ngram must be ≤ pld.max_ngram")

    def __init__(self, **values: object) -> None:
        super().__init__(**values)
        self.drafter = PromptLookupDrafter(
            int(values["max_ngram"]), int(values["min_ngram"]), int(values["num_pred_tokens"])
        )
