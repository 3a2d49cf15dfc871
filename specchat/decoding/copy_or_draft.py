"""A draft model that copies where copying pays more: each step drafts from the chat (as `suffix`
does: this conversation, the answer being regenerated, saved chats) or from the draft model,
whichever the draft-length policy expects to yield more tokens a second.

The two are strong in different places. On transformers a draft model of the target's family
agrees with it over most prose, but each of its tokens costs a pass of its own; a copy is free to
draft and, where the answer quotes or rewrites its prompt (extraction, RAG, code edits), is taken
far deeper. Both plans are priced by the one policy that sizes every draft (learned acceptance per
situation, the measured pass costs, the draft's own cost per token), so the choice is the policy's
own comparison of the two steps it would take. The draft model's cache catches up with copied
tokens at its next draft.
"""

from __future__ import annotations

import numpy as np

from specchat.backends.base import Backend
from specchat.decoding.draft_policy import DraftLengthPolicy, Plan
from specchat.decoding.prompt_lookup import PromptLookupDecoder
from specchat.decoding.sampling import Sampler
from specchat.decoding.sources import NO_SOURCES, DraftSources
from specchat.decoding.speculative import Draft, Drafter
from specchat.decoding.suffix import SuffixDecoder


def chat_copier() -> Drafter:
    """What copies from the chat: suffix's drafter as `suffix` runs by default, or prompt
    lookup's where suffix's trees are not built."""
    if SuffixDecoder.unavailable_anywhere() is None:
        return SuffixDecoder.create().drafter
    return PromptLookupDecoder.create().drafter


class CopyOrDraftDrafter:
    replayable = False  # the draft model's drafts depend on more than the context
    undrafted_is_plain = False  # as the draft model's: an undrafted step probes its cost

    def __init__(self, copier: Drafter, model: Drafter, policy: DraftLengthPolicy) -> None:
        self.copier, self.model, self.policy = copier, model, policy
        self._chosen: Drafter = model
        self._target: Backend | None = None

    def prepare(self, target: Backend) -> None:
        self.copier.prepare(target)
        self.model.prepare(target)
        self._target = target

    def proposal(self, context: list[int]) -> list[int]:
        return []

    def reset(self, context: list[int], sources: DraftSources = NO_SOURCES) -> None:
        self.copier.reset(context, sources)
        self.model.reset(context, sources)

    def plan(self, context: list[int], room: int) -> Plan:
        drafted = self.model.plan(context, room)
        copied = self.copier.plan(context, room)
        self._chosen = self.model
        target = self._target
        if target is None or not copied.available:
            return drafted
        if self.policy.value(target, copied, room) > self.policy.value(target, drafted, room):
            self._chosen = self.copier
            return copied
        return drafted

    def draft(
        self, target: Backend, context: list[int], sampler: Sampler, plan: Plan, depth: int
    ) -> Draft:
        return self._chosen.draft(target, context, sampler, plan, depth)

    def observe(self, draft: Draft, logits: np.ndarray | None, accepted: int) -> None:
        self._chosen.observe(draft, logits, accepted)
