"""One speculative step for every drafter: draft, one target pass, verify, commit, learn.

A drafter only proposes (prompt lookup, lookahead's pool and window, a draft model); this module
verifies every kind of draft the same way (sampling.verify_tree). Greedy verification follows the
target's argmax through the draft's trie; with a temperature, each node's children are tried in
turn by SpecInfer's multi-branch rule, with the draft model's q where one drew them and q = 1 for
copied drafts. The draft-length policy is the one visible decision around the pass: it alone sizes
every draft, whoever drafts it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from specchat.backends.base import Backend, Block
from specchat.decoding.base import Decoder
from specchat.decoding.draft_policy import DraftLengthPolicy, Plan
from specchat.decoding.params import Param
from specchat.decoding.plain import plain_step
from specchat.decoding.sampling import Sampler, verify_tree
from specchat.decoding.sources import NO_SOURCES, DraftSources
from specchat.decoding.step import Step


@dataclass
class Draft:
    """A block after the pending token (index 0), and which of its nodes are drafts to verify.

    `children[node]` maps a drafted token to its block index (a trie rooted at 0); block nodes
    outside the trie (lookahead's window) are evaluated but never accepted. `q[node]` is the
    distribution a draft model drew that node's children from (in their order, without
    replacement), for sampled verification; `drafted` is the most the pass can accept, `sized`
    the depth the policy's choice drafted where that is less (a token tree's alternatives where
    its chain stopped: the policy learns from what it sized, never from them). `soft` is
    soft matching's β (0: exact; see sampling.verify_tree). `source` says where the drafts came
    from; a trie merged from several sources names each node's in `node_sources` (a node shared
    by several keeps the first's).
    """

    tokens: list[int]
    parents: list[int]
    children: dict[int, dict[int, int]]
    drafted: int
    q: dict[int, np.ndarray] | None = None
    state: Any = None  # the drafter's own bookkeeping for `observe`
    source: str = ""
    node_sources: dict[int, str] | None = None
    soft: float = 0.0
    sized: int | None = None
    reached: int = 0  # the block node verification ended at (set before `observe`)

    @classmethod
    def chain(
        cls,
        pending: int,
        tokens: list[int],
        q: Sequence[np.ndarray] | None = None,
        source: str = "",
        soft: float = 0.0,
    ) -> Draft:
        """One draft after the pending token; `q[i]`: the distribution token i was drawn from."""
        children = {i: {token: i + 1} for i, token in enumerate(tokens)}
        by_node = None if q is None else dict(enumerate(q))
        parents = list(range(-1, len(tokens)))
        return cls(
            [pending, *tokens], parents, children, len(tokens), by_node, None, source, soft=soft
        )

    def add_child(self, node: int, token: int) -> int:
        """Hang `token` under block node `node` (after its other children); its block index."""
        self.tokens.append(token)
        self.parents.append(node)
        child = len(self.tokens) - 1
        self.children.setdefault(node, {})[token] = child
        return child

    def source_of(self, node: int) -> str:
        """Where the draft that reached block node `node` came from; at the root (nothing
        taken), where the draft's first branch came from — the one `rejected_after` reports."""
        if node <= 0:
            first = next(iter(self.children.get(0, {}).values()), 0)
            return self.source_of(first) if first > 0 else ""
        if self.node_sources is not None:
            return self.node_sources.get(node, self.source)
        return self.source

    @property
    def block(self) -> Block:
        return Block(tuple(self.tokens), tuple(self.parents))

    def rejected_after(self, node: int) -> tuple[int, ...]:
        """The drafted tokens below `node` that the target did not take: its first child's
        branch (a chain draft's rest)."""
        tail = []
        while self.children.get(node):
            token, node = next(iter(self.children[node].items()))
            tail.append(token)
        return tuple(tail)


def insert_branch(
    tokens: list[int],
    parents: list[int],
    children: dict[int, dict[int, int]],
    node_sources: dict[int, str],
    branch: list[int],
    source: str,
) -> None:
    """Add `branch` below the root of a draft trie being built (shared prefixes reuse nodes; a
    new node remembers `source`)."""
    node = 0
    for token in branch:
        child = children[node].get(token)
        if child is None:
            tokens.append(token)
            parents.append(node)
            child = len(tokens) - 1
            children[node][token] = child
            children[child] = {}
            node_sources[child] = source
        node = child


class Drafter(Protocol):
    """Proposes drafts; hears back what the target accepted. A `replayable` drafter's proposals
    are a function of the context alone (`proposal`), so the oracle and the policy replay can
    ask for them without running the target."""

    replayable: bool
    # a step it drafts nothing for is a plain step: it evaluates nothing else then and learns
    # nothing from it (lookahead's window does both)
    undrafted_is_plain: bool

    def prepare(self, target: Backend) -> None: ...

    def proposal(self, context: list[int]) -> Sequence[int]:
        """What it would propose after `context`, at most (replayable drafters)."""

    def reset(self, context: list[int], sources: DraftSources) -> None: ...

    def plan(self, context: list[int], room: int) -> Plan: ...

    def draft(
        self, target: Backend, context: list[int], sampler: Sampler, plan: Plan, depth: int
    ) -> Draft: ...

    def observe(self, draft: Draft, logits: np.ndarray | None, accepted: int) -> None:
        """The target kept `accepted` drafted tokens; `logits` are the pass's (None in a
        replay, which has none: a replayable drafter must not need them)."""


SPECULATIVE_PARAMS = (
    Param(
        "fixed_draft",
        int,
        0,
        "0: the learned policy sizes each draft; N: always draft up to N (no policy)",
        0,
        256,
    ),
)


class SpeculativeDecoder(Decoder):
    """A decoder made of a drafter; subclasses declare themselves (their own parameters followed
    by SPECULATIVE_PARAMS) and build their drafter."""

    speculative = True
    drafter: Drafter
    # A payoff guard (plain stretches while speculation measured slower) lost to the policy alone
    # and is gone; settings that still name it keep working.
    retired = ("guard",)

    def __init__(self, **values: Any) -> None:
        super().__init__(**values)
        self.policy = DraftLengthPolicy()
        self.fixed_draft = int(values.get("fixed_draft", 0))
        self._model_key: str | None = None  # whose learned acceptance the policy holds

    def prepare(self, target: Backend) -> None:
        target.block_cost(1)
        self.drafter.prepare(target)
        model_key = f"{target.name}|{target.model_name}"
        if model_key != self._model_key:
            self._model_key = model_key
            self.policy.load(model_key)

    def finish(self) -> None:
        if self._model_key is not None:
            self.policy.save(self._model_key)

    def reset(self, context: list[int], sources: DraftSources = NO_SOURCES) -> None:
        self.drafter.reset(context, sources)
        self.policy.start_answer()

    def step(self, target: Backend, context: list[int], sampler: Sampler, room: int) -> Step:
        return self.speculative_step(target, context, sampler, room)

    def choose_depth(self, target: Backend, plan: Plan, room: int) -> int:
        """How many tokens to draft: the fixed length, or the policy's choice. The live step and
        the policy replay both ask this."""
        if self.fixed_draft:
            return max(0, min(self.fixed_draft, plan.available, room - 1))
        return self.policy.depth(target, plan, room)

    def speculative_step(
        self, target: Backend, context: list[int], sampler: Sampler, room: int
    ) -> Step:
        plan = self.drafter.plan(context, room)
        depth = self.choose_depth(target, plan, room)
        if not depth and self.drafter.undrafted_is_plain:
            return plain_step(target, context, sampler)  # no empty draft built and verified
        draft = self.drafter.draft(target, context, sampler, plan, depth)
        block = draft.block
        started = time.perf_counter()
        logits = target.evaluate(block)
        pass_seconds = time.perf_counter() - started
        verdict = verify_tree(logits, draft.children, sampler, draft.q, draft.soft)
        accepted, node = verdict.accepted, verdict.node
        target.commit(block.path_to(node))
        draft.reached = node
        sized = draft.drafted if draft.sized is None else draft.sized
        if sized:
            self.policy.update(target, plan, sized, min(len(accepted), sized))
        self.drafter.observe(draft, logits, len(accepted))
        return Step(
            tokens=(*accepted, verdict.next_token),
            drafted=draft.drafted,
            accepted=len(accepted),
            source=draft.source_of(node),
            rejected=draft.rejected_after(node),
            depth=depth,
            pass_seconds=pass_seconds,
            distance=verdict.distance,
        )
