"""Prompt lookup decoding: draft the tokens that followed the latest earlier occurrence of the
context's longest recent n-gram, verify them in one target pass.

The draft length is chosen per step from the running acceptance and the backend's measured block
costs (see draft_policy), so on a compute-bound CPU it drafts little or nothing rather than lose.
Acceptance is bursty — a draft copied from a passage being quoted keeps being right, one matched on
a single common token rarely is — so it is estimated separately by the length of the matched
n-gram and by whether the previous draft was accepted in full.
"""

from __future__ import annotations

from specchat.backends.base import Backend, Block
from specchat.decoding.draft_policy import AcceptanceEstimate, best_draft_length
from specchat.decoding.ngram_index import NgramIndex
from specchat.decoding.sampling import Sampler, verify_chain
from specchat.decoding.step import Step


class PromptLookupDecoder:
    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, num_pred_tokens: int = 10) -> None:
        self.name = "pld"
        self.max_ngram, self.min_ngram = int(max_ngram), int(min_ngram)
        self.num_pred_tokens = int(num_pred_tokens)
        self._index = NgramIndex(self.min_ngram, self.max_ngram)
        self._acceptance: dict[tuple[int, bool], AcceptanceEstimate] = {}
        self._streak = False  # the previous draft was accepted in full

    def params(self) -> dict[str, object]:
        return {
            "max_ngram": self.max_ngram,
            "min_ngram": self.min_ngram,
            "num_pred_tokens": self.num_pred_tokens,
        }

    def prepare(self, target: Backend) -> None:
        target.block_cost(1)

    def reset(self, context: list[int]) -> None:
        self._index.reset(context)

    def step(self, target: Backend, context: list[int], sampler: Sampler, room: int) -> Step:
        self._index.sync(context)
        proposal, matched = self._index.continuation(self.num_pred_tokens)
        estimate = self._acceptance.setdefault((matched, self._streak), AcceptanceEstimate())
        k = best_draft_length(target, estimate.rate, len(proposal), room - 1)
        draft = proposal[:k]
        logits = target.evaluate(Block.chain([context[-1], *draft]))
        accepted, next_token = verify_chain(logits, draft, sampler)
        target.commit(list(range(accepted + 1)))
        if draft:
            estimate.update(len(draft), accepted)
            self._streak = accepted == len(draft)
        return Step(tokens=(*draft[:accepted], next_token), drafted=len(draft), accepted=accepted)
