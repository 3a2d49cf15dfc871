"""SuffixDecoding (Oliaro et al., arXiv 2411.04975): draft from everything the chat has seen —
this conversation, the answer being regenerated, every saved chat.

Each source proposes its best continuation of the context's tail (a saved chat only after a long
match: `SAVED_MIN_MATCH`). Saved chats and the regenerated answer are suffix trees whose
continuations are the most frequent ones, scored by the summed probability of their tokens, as
ArcticInference does. This conversation proposes what followed the latest earlier occurrence of its
tail that agrees furthest back, as prompt lookup does: replayed on Spec-Bench dev answers with
earlier questions saved (benchmarks/replay_policy.py --history), recency beat frequency for the
conversation's own text at both runtimes' pass costs (docs/bench-log.md). The best-scored
proposal is the draft, its length chosen by the shared draft-length policy from the match length and
how sure the counts are. Other sources' proposals join it as extra branches of one tree-shaped pass
while they cost next to nothing (on backends where a few more tokens per pass are free), so the
target verifies the best few together."""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from specchat.backends.base import Backend
from specchat.decoding.draft_head import DraftHead, Guess, head_for
from specchat.decoding.draft_policy import DraftLengthPolicy, Plan
from specchat.decoding.ngram_index import Match, NgramIndex
from specchat.decoding.params import Param
from specchat.decoding.prompt_lookup import CopyRegime, copy_prior, match_bucket
from specchat.decoding.recycled import WIDTH, RecycledCandidates
from specchat.decoding.sampling import Sampler
from specchat.decoding.sources import (
    CHAT,
    DRAFT,
    NO_SOURCES,
    PREVIOUS,
    PROMPT,
    RECYCLED,
    SAVED,
    Continuation,
    DraftSources,
    context_source,
)
from specchat.decoding.speculative import (
    SPECULATIVE_PARAMS,
    Draft,
    SpeculativeDecoder,
    insert_branch,
)
from specchat.decoding.suffix_tree import DEPTH, SequenceTrees, unavailable_reason

# When sources score alike, the most specific wins.
_PREFERENCE = (PREVIOUS, PROMPT, CHAT, SAVED)
# A saved chat proposes only after a match this long, and longer than this conversation's own:
# replayed on the dev half with earlier questions saved (benchmarks/replay_policy.py --history), short
# saved matches displaced the conversation's better short matches and lost to prompt lookup at
# both runtimes' pass costs (docs/bench-log.md); from 12 tokens on they never did, and a question
# asked again still drafts its old answer whole.
SAVED_MIN_MATCH = 16
# An extra branch joins the pass while the pass costs at most this much more than the best
# candidate's chain alone.
_BRANCH_SLACK = 0.05


def confidence_bucket(first_prob: float) -> int:
    """How sure the counts are of the first drafted token: 2 every occurrence continued that
    way, 1 most did, 0 fewer than half."""
    return 2 if first_prob >= 0.999 else 1 if first_prob >= 0.5 else 0


# Per-token acceptance before evidence: the copy priors of prompt lookup (measured) scaled by how
# sure the counts are (a guess the policy corrects from the first drafts on).
_CONFIDENCE_SCALE = (0.6, 0.85, 1.0)


# Recycled drafts: the longest chain offered, the acceptance assumed of its first token before
# any evidence (measured: the first candidate was the next greedy token 27% of the time), and the
# most of a token's other candidates that may join the pass as alternatives at the first depth and
# at each deeper one (whether they join is the pass costs' to say).
_RECYCLED_CHAIN = 8
_RECYCLED_PRIOR = 0.27
_RECYCLED_SIBLINGS = (WIDTH - 1, 3)
# A draft head's guess drafted alone, where nothing copies (its source is a draft model's, as the
# chat colours it). Its situation is how sure the head was (its probability for the guess): the
# least it was and the acceptance assumed before any evidence, measured along held-out greedy
# answers (docs/bench-log.md, session 58: below 0.6 about 0.14, up to 0.9 0.37, above 0.71).
_HEAD = "head"
_HEAD_SURENESS = ((0.9, "sure", 0.7), (0.6, "fair", 0.37), (0.0, "unsure", 0.14))
_THEN_COPY = "then copy"
# A copy whose first token the head guessed too is right far more often than one it did not
# (the dev half's greedy answers: after a one-token match 0.81 against 0.10, two tokens 0.91
# against 0.26, longer 0.97 against 0.60; docs/bench-log.md): before evidence, agreement keeps
# this share of the copy's prior miss rate, a difference this share of its hit rate.
_AGREE_MISS = 0.3
_DIFFER_HIT = 0.5
# Only a copy of a match this short is told apart by agreement: a longer one is mostly right
# either way, and learning its acceptance in two halves cost the copy-heavy categories more
# than it saved (held out, session 58: extraction 2.49x -> 2.18x, coding 1.32x -> 1.22x).
_AGREEMENT_MATCHES = 2


class SuffixDrafter:
    replayable = True  # its copies; recycled drafts are not replayed (they follow the logits)
    undrafted_is_plain = True

    def __init__(
        self,
        num_pred_tokens: int,
        candidates: int,
        factor: float,
        min_prob: float,
        policy: DraftLengthPolicy | None = None,
        recycle: bool = False,
        head: bool = False,
    ):
        # the decoder's policy: it prices a copy against the recycled chain
        self.policy = policy or DraftLengthPolicy()
        self._target: Backend | None = None
        self.num_pred_tokens = num_pred_tokens
        self.max_candidates = candidates
        self.factor, self.min_prob = factor, min_prob
        self.recycle = recycle
        # recycling learns from every pass's logits, an undrafted pass's too
        self.undrafted_is_plain = not recycle
        self._recycled: RecycledCandidates | None = None
        self._chain: list[int] = []  # the recycled chain planned for this step
        self.use_head = head
        self._head: DraftHead | None = None
        self._head_of: Backend | None = None  # the target whose head was looked for: `_head`
        self.head_problem: str | None = None  # why a head file there was not used
        self._guess: Guess | None = None  # the head's guess after the pending token, this step
        self._then: list[int] = []  # what followed the pending token and the guess, if planned
        # how often the pending token's candidate of each rank was the target's next token
        self._rank_hits = np.zeros(WIDTH)
        self._rank_trials = 0.0
        self._sources: DraftSources = NO_SOURCES
        self._conversation = NgramIndex(1, 3)  # this conversation: a recent occurrence
        self._trees = SequenceTrees()  # the regenerated answer
        self._turn_start = 0
        self._proposals: list[tuple[Continuation, str]] = []
        self._copies = CopyRegime()
        self._latest = Match([], 0, 0, -1)  # this conversation's match at the last lookup
        self._ends: frozenset[int] = frozenset()

    def prepare(self, target: Backend) -> None:
        self._ends = target.eos_ids
        self._target = target
        if self.recycle and self._recycled is None:
            self._recycled = RecycledCandidates.of(target)

    def finish(self) -> None:
        if self._recycled is not None:
            self._recycled.save()

    def reset(self, context: list[int], sources: DraftSources = NO_SOURCES) -> None:
        """An n-gram index of this conversation (it grows with the answer) and a tree of the
        answer being regenerated after the prompt's last tokens (so its start matches)."""
        self._sources = sources
        self._turn_start = min(sources.turn_start, len(context))
        self._conversation.reset(context)
        self._copies.reset(len(context))
        self._trees = SequenceTrees()
        if sources.previous_answer:
            self._trees.add(PREVIOUS, context[-DEPTH:] + list(sources.previous_answer))

    def proposals(self, context: list[int], limit: int) -> list[tuple[Continuation, str]]:
        """Every source's best continuation of `context`, best score first."""
        self._conversation.sync(context)
        found: list[tuple[Continuation, str]] = []
        latest = self._latest = self._conversation.match(limit)
        if latest.continuation:
            source = context_source(latest.end + 1, self._turn_start)
            found.append((_recency_continuation(latest), source))
        for name in self._trees.names():
            cont = self._trees.continuation(name, context, limit, self.factor, self.min_prob)
            if cont is not None:
                found.append((cont, name))
        saved = self._sources.saved
        if saved is not None:
            cont = saved.continuation(context, limit, self.factor, self.min_prob)
            own = latest.length if latest.continuation else 0
            if cont is not None and cont.match_length >= max(SAVED_MIN_MATCH, own + 1):
                found.append((cont, SAVED))
        found = [(cont.through_end(self._ends), name) for cont, name in found]
        found.sort(key=lambda item: (-item[0].score, _PREFERENCE.index(item[1])))
        return found

    def plan(self, context: list[int], room: int) -> Plan:
        """The best copy's plan, or the recycled chain's where the policy expects it to yield
        more tokens a second (a short copy the policy would not draft, or no copy at all), or,
        where nothing copies, the draft head's guess. With a head, a copy's situation also
        says whether the head guessed its first token."""
        limit = max(0, min(self.num_pred_tokens, room - 1))
        self._proposals = self.proposals(context, limit) if limit else []
        self._chain, self._guess = [], None
        target = self._target
        # a target's head is read at its first step; one without a head is not asked again
        asks_head = self.use_head and (self._head is not None or self._head_of is not target)
        if asks_head and limit and self._short_or_no_copy():
            self._guess = self._head_guess(context[-1])  # not asked beside a long copy
            if self._head is not None:  # the next step will likely ask again: the pass guesses
                target.ride_draft_head(self._head)
        copied = self._copy_plan(context) if self._proposals else Plan(0, key=("suffix",))
        plans = [copied] if copied.available else []
        if self._recycled is not None and limit:
            self._chain = self._recycled.chain(context[-1], min(limit, _RECYCLED_CHAIN))
            if self._chain:
                plans.append(
                    Plan(available=len(self._chain), key=(RECYCLED,), prior=self._first_rate(0))
                )
        self._then = []
        if self._guess is not None:
            plans += self._head_plans(context, limit)
        if not plans:
            return copied
        if len(plans) > 1 and target is not None:  # the most expected tokens a second
            values = [self.policy.value(target, plan, room) for plan in plans]
            plans = [plans[values.index(max(values))]]
        chosen = plans[0]
        if chosen.key != (RECYCLED,):
            self._chain = []
        if chosen.key[0] != _HEAD:
            self._guess = None
        if chosen.key[-1] != _THEN_COPY:
            self._then = []
        return chosen

    def _head_plans(self, context: list[int], limit: int) -> list[Plan]:
        """The guess alone where nothing copies, and the guess with what followed the pending
        token and the guess together where the conversation holds them (LogitSpec's order:
        guess, then retrieve); each learned apart by how sure the head was."""
        guess = self._guess
        _, name, prior = next(b for b in _HEAD_SURENESS if guess.sure >= b[0])
        plans = [] if self._proposals else [Plan(1, key=(_HEAD, name), prior=prior)]
        if limit > 1:
            after = self._conversation.match(limit - 1, tail=[*context, guess.token])
            if after.continuation and after.length >= 2:
                self._then = after.continuation
                key = (_HEAD, name, _THEN_COPY)
                plans.append(Plan(1 + len(after.continuation), key=key, prior=prior))
        return plans

    def _short_or_no_copy(self) -> bool:
        return not self._proposals or self._proposals[0][0].match_length <= _AGREEMENT_MATCHES

    def _head_guess(self, pending: int) -> Guess | None:
        """The draft head's guess at the token after `pending` (None: no features here, or no
        head). The head is read at the first step whose runtime gives the features it reads,
        so a runtime without them (llama.cpp, hf) never loads the int4 kernels for it."""
        target = self._target
        ridden = None if target is None else target.ridden_guess(pending)
        if ridden is not None:  # the pass guessed it (ride_draft_head)
            return Guess(*ridden)
        features = None if target is None else target.draft_features(pending)
        if features is None:
            return None
        if self._head_of is not self._target:  # a new target (or model): its own head, if any
            self._head, self.head_problem = head_for(self._target)
            self._head_of = self._target
        return None if self._head is None else self._head.guess(features)

    def _copy_plan(self, context: list[int]) -> Plan:
        best, source = self._proposals[0]
        bucket = match_bucket(best.match_length)
        if source in (PROMPT, CHAT):  # a copy, as prompt lookup's: its learned acceptance too
            key, prior = self._copies.situation(self._latest, len(context))
        else:
            sure = confidence_bucket(best.probs[0])
            streak = self._copies.streak
            key = ("suffix", bucket, sure, streak)
            prior = copy_prior(bucket, streak) * _CONFIDENCE_SCALE[sure]
        if self._guess is not None and self._short_or_no_copy():
            # whether the draft head guessed the short copy's first token
            agrees = self._guess.token == best.tokens[0]
            key += ("head agrees" if agrees else "head differs",)
            prior = 1.0 - (1.0 - prior) * _AGREE_MISS if agrees else prior * _DIFFER_HIT
        return Plan(available=len(best.tokens), key=key, prior=prior)

    def proposal(self, context: list[int]) -> list[int]:
        """What it would propose after `context` at most (a function of the context alone)."""
        found = self.proposals(context, self.num_pred_tokens)
        return found[0][0].tokens if found else []

    def draft(
        self, target: Backend, context: list[int], sampler: Sampler, plan: Plan, depth: int
    ) -> Draft:
        if depth and self._chain:
            return self._recycled_tree(target, context[-1], self._chain[:depth])
        if self._guess is not None:
            guess, self._guess = self._guess, None
            return Draft.chain(context[-1], [guess.token, *self._then][:depth], source=DRAFT)
        if not depth or not self._proposals:
            return Draft.chain(context[-1], [])
        best, source = self._proposals[0]
        tokens, parents = [context[-1]], [-1]
        children: dict[int, dict[int, int]] = {0: {}}
        node_sources: dict[int, str] = {}
        budget = target.block_cost(1 + depth) * (1 + _BRANCH_SLACK)
        longest = 0
        for rank, (cont, name) in enumerate(self._proposals[: self.max_candidates]):
            branch = cont.tokens[:depth]
            added = _new_nodes(children, branch)
            if rank and (not added or target.block_cost(len(tokens) + added) > budget):
                continue
            longest = max(longest, len(branch))
            insert_branch(tokens, parents, children, node_sources, branch, name)
        return Draft(tokens, parents, children, longest, source=source, node_sources=node_sources)

    def observe(self, draft: Draft, logits: np.ndarray, accepted: int) -> None:
        if draft.source not in (RECYCLED, DRAFT):
            self._copies.observe(draft.drafted, accepted)
        if self._recycled is None or logits is None:
            return
        path = draft.block.path_to(draft.reached)
        pending = draft.tokens[0]
        before = self._recycled.successors(pending).copy()
        self._recycled.learn([draft.tokens[node] for node in path], logits[path])
        if before[0] >= 0:  # which rank the target's next token had among the old candidates
            chosen = self._recycled.successors(pending)[0]
            self._rank_hits *= 0.995  # recent text counts most
            self._rank_trials = self._rank_trials * 0.995 + 1.0
            self._rank_hits[before == chosen] += 1.0

    def _first_rate(self, rank: int) -> float:
        """How often the pending token's candidate of `rank` was the next token (a prior of 2
        trials until there is evidence)."""
        prior = _RECYCLED_PRIOR if rank == 0 else _RECYCLED_PRIOR / (4 * rank)
        return (self._rank_hits[rank] + 2 * prior) / (self._rank_trials + 2)

    def _recycled_tree(self, target: Backend, pending: int, chain: list[int]) -> Draft:
        """The chain the policy sized, and other candidates beside its tokens while
        each adds more expected tokens than its share of the pass's cost: a sibling at depth d
        is right with about (first-rank rate)^(d-1) × its own rank's rate."""
        draft = Draft.chain(pending, chain, source=RECYCLED)
        rates = [self._first_rate(rank) for rank in range(WIDTH)]
        expected = sum(rates[0] ** (d + 1) for d in range(len(chain))) + 1.0
        # node d of the chain is reached with about rates[0]^d; its siblings join at every
        # depth while they pay: on a CPU the first depth or two, where a pass costs nearly the
        # same for many tokens (a GPU) deeper too
        for node, token in enumerate([pending, *chain[:-1]]):
            reach = rates[0] ** node
            most = _RECYCLED_SIBLINGS[min(node, len(_RECYCLED_SIBLINGS) - 1)]
            taken = set(draft.children.get(node, {}))
            offered = [int(t) for t in self._recycled.successors(token)[1:] if t >= 0]
            for rank, candidate in enumerate(offered[:most], start=1):
                if candidate in taken:
                    continue
                gain = reach * rates[rank]
                size = len(draft.tokens)
                extra = target.block_cost(size + 1) / target.block_cost(size) - 1.0
                if gain <= expected * extra:
                    break
                draft.add_child(node, candidate)
                expected += gain
        return draft


def _recency_continuation(latest: Match) -> Continuation:
    """The latest occurrence's continuation, each token's chance of being reached estimated from
    the match length (prompt lookup's measured priors), so it scores against the trees' counts."""
    bucket, count = match_bucket(latest.length), len(latest.continuation)
    probs = _reach(bucket, max(count, _REACH_KEPT))[:count]
    return Continuation(latest.continuation, probs, latest.length)


_REACH_KEPT = 64  # the default draft limit: longer continuations are rare, their powers not kept


@functools.lru_cache(maxsize=64)
def _reach(bucket: int, count: int) -> tuple[float, ...]:
    """rate^1 … rate^count for a match bucket's copy prior: asked for on every step, so kept
    (about a tenth of a step's own Python was these powers)."""
    rate = copy_prior(bucket, False)
    return tuple(rate ** (i + 1) for i in range(count))


def _new_nodes(children: dict[int, dict[int, int]], branch: list[int]) -> int:
    """How many nodes `branch` adds to the trie."""
    node = 0
    for i, token in enumerate(branch):
        child = children.get(node, {}).get(token)
        if child is None:
            return len(branch) - i
        node = child
    return 0


class SuffixDecoder(SpeculativeDecoder):
    name = "suffix"
    key = "f8"
    default_rank = 3
    description = (
        "SuffixDecoding: drafts from this chat, the answer being regenerated and every saved chat"
    )
    params = (
        Param("num_pred_tokens", int, 64, "most tokens drafted in one step", 1, 256),
        Param(
            "candidates",
            int,
            3,
            "most sources' proposals verified together (extra ones only while nearly free)",
            1,
            8,
        ),
        Param(
            "max_spec_factor",
            float,
            1.0,
            "a match of n tokens drafts at most factor × n (SuffixDecoding's limit)",
            0.1,
            64.0,
        ),
        Param(
            "min_token_prob",
            float,
            0.1,
            "stop a proposal where the share of occurrences continuing it falls below this",
            0.0,
            1.0,
        ),
        # off by default: on held-out first turns at this session's pass costs it lost to the
        # copies alone at both CPU levels (docs/bench-log.md, "Recycled candidates")
        Param(
            "recycle",
            bool,
            False,
            "draft the model's own likeliest successors (from earlier passes) where nothing copies",
        ),
        # on by default: 10-15% fewer steps on held-out first turns; the guess and its drafted
        # rows cost part of that, so what remains depends on the CPU. Asked after the pass (0.13
        # ms a step): 1.01-1.06x the copies alone on the AMD EPYC at avx512 (1.02x on code
        # edits), 1.01x at its avx2 level; on the Xeon 1.01-1.05x at avx512, 1.00x at avx2, 0.98x
        # on code edits (docs/bench-log.md, sessions 58 and 60). Riding the pass (0.03-0.06 ms)
        # made the default 5-8% faster again (session 61). Only a runtime that gives its hidden
        # state (int4) reads a head, and only a model with one shipped has it.
        Param(
            "head",
            bool,
            True,
            "draft the token after next from the model's draft head where one ships for it, and"
            " trust a copy more where the head guessed its first token",
        ),
    ) + SPECULATIVE_PARAMS
    reads_saved_chats = True

    @classmethod
    def unavailable_anywhere(cls) -> str | None:
        return unavailable_reason()  # ArcticInference's suffix trees, built by setup

    @classmethod
    def unavailable(cls, backend: Backend, values: Mapping[str, object]) -> str | None:
        return unavailable_reason() or super().unavailable(backend, values)

    def __init__(self, **values: object) -> None:
        super().__init__(**values)
        self.drafter = SuffixDrafter(
            int(values["num_pred_tokens"]),
            int(values["candidates"]),
            float(values["max_spec_factor"]),
            float(values["min_token_prob"]),
            self.policy,
            bool(values["recycle"]),
            bool(values["head"]),
        )

    def finish(self) -> None:
        super().finish()
        self.drafter.finish()
