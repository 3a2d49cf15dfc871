"""Draft-model speculation: a small model with the target's vocabulary drafts K tokens one by one,
the target verifies them in one pass.

K adapts (+2 after a fully accepted draft, -1 after a rejection) and drafting stops early when the
draft's own top probability falls below a threshold. The draft may run on another backend or
device than the target: it only ever exchanges token ids with it.
"""

from __future__ import annotations

import time
from functools import lru_cache

import numpy as np

from specchat.backends.base import Backend, Block, sync_cache
from specchat.decoding.draft_policy import AcceptanceEstimate, best_draft_length
from specchat.decoding.sampling import (
    Sampler,
    SamplingParams,
    logits_to_probs,
    sample,
    verify_chain,
)
from specchat.decoding.step import Step
from specchat.errors import SpecchatError

_PLAIN = SamplingParams(temperature=1.0)


@lru_cache(maxsize=2)
def load_draft_backend(
    spec: str | None, backend: str | None, device: str, threads: int | None = None
) -> Backend:
    """Drafts are loaded once per process and shared by every decoder instance that uses them."""
    from specchat.models import load_backend

    return load_backend(spec, backend=backend, device=device, n_ctx=8192, threads=threads)


def default_draft_reason(target: Backend) -> str | None:
    """Why there is no default draft for this target (None when there is one)."""
    from specchat.models import BUNDLED_FILE

    if target.name == "hf" and target.model_name == BUNDLED_FILE.removesuffix(".gguf"):
        return None
    if target.name == "llama":
        return "the bundled model has no smaller sibling on llama.cpp: pass --draft MODEL"
    return "no default draft for this model: pass --draft MODEL"


def check_same_vocabulary(target: Backend, draft: Backend) -> None:
    """Refuse a draft whose tokens mean something else: its drafts would all be rejected."""
    common = min(target.vocab_size, draft.vocab_size)
    if abs(target.vocab_size - draft.vocab_size) > 256 or common == 0:
        raise SpecchatError(
            f"the draft's vocabulary ({draft.vocab_size} tokens) does not match the target's "
            f"({target.vocab_size})"
        )
    for token_id in range(0, common, max(1, common // 512)):
        if target.token_bytes(token_id) != draft.token_bytes(token_id):
            raise SpecchatError(
                f"the draft's vocabulary does not match the target's (token {token_id} differs)"
            )


class DraftModelDecoder:
    def __init__(
        self,
        draft: str | None = None,
        draft_backend: str | None = None,
        draft_device: str = "cpu",
        k: int = 4,
        k_max: int = 12,
        threshold: float = 0.3,
    ) -> None:
        self.name = "draft"
        self.draft_spec, self.draft_backend_name, self.draft_device = (
            draft,
            draft_backend,
            draft_device,
        )
        self.k, self.k_max, self.threshold = int(k), int(k_max), float(threshold)
        self._draft: Backend | None = None
        self._draft_tokens: list[int] = []  # what the draft's cache holds
        self._acceptance = AcceptanceEstimate(accepted=4.0, trials=5.0)  # same-family prior
        # Seconds per drafted token as actually paid: alternating two runtimes' thread pools on
        # shared cores can cost several times the draft's stand-alone block cost.
        self._draft_cost: float | None = None
        self._probe_countdown = 16

    def params(self) -> dict[str, object]:
        return {
            "draft": self.draft_spec or "(bundled, llama.cpp)",
            "k": self.k,
            "k_max": self.k_max,
            "threshold": self.threshold,
        }

    def prepare(self, target: Backend) -> None:
        if self._draft is not None:
            return
        if self.draft_spec is not None and self.draft_spec.startswith("self:"):
            from specchat.backends.hf import early_exit_draft

            if target.name != "hf":
                raise SpecchatError("self-speculation (draft self:L) needs the hf backend")
            try:
                layers = int(self.draft_spec.removeprefix("self:"))
            except ValueError:
                raise SpecchatError(f"draft {self.draft_spec!r}: use self:LAYERS") from None
            draft = early_exit_draft(target, layers)
        elif self.draft_spec is None:
            reason = default_draft_reason(target)
            if reason:
                raise SpecchatError(f"decoder 'draft' is unavailable: {reason}")
            draft = load_draft_backend(None, "llama", self.draft_device)
        else:
            draft = load_draft_backend(self.draft_spec, self.draft_backend_name, self.draft_device)
        check_same_vocabulary(target, draft)
        draft.block_cost(1)
        target.block_cost(1)
        self._draft = draft
        self._draft_tokens = []
        draft.rollback(0)

    def reset(self, context: list[int]) -> None:
        """Bring the draft's cache up to the prompt now, so that it counts as prefill."""
        if self._draft is not None:
            self._sync(context[:-1])

    def _sync(self, committed: list[int]) -> None:
        sync_cache(self._draft, self._draft_tokens, committed)
        self._draft_tokens = list(committed)

    def step(self, target: Backend, context: list[int], sampler: Sampler, room: int) -> Step:
        draft = self._draft
        assert draft is not None, "prepare() loads the draft"
        if self._draft_cost is None:
            self._draft_cost = draft.block_cost(1)
        drafts: list[int] = []
        draft_probs: list[np.ndarray] = []
        last = context[-1]
        # K bounds the draft; the cost model (draft passes + the longer target block) picks within.
        planned = best_draft_length(
            target, self._acceptance.rate, self.k, room - 1, extra_cost=self._draft_cost
        )
        started = time.perf_counter()
        if planned:
            self._sync(context[:-1])
        for _ in range(planned):
            logits = draft.evaluate(Block.chain([last]))[0]
            draft.commit([0])
            self._draft_tokens.append(last)
            if sampler.greedy:  # its probabilities only measure the draft's confidence
                probs = logits_to_probs(logits, _PLAIN)
                token = int(np.argmax(logits))
            else:  # the q the token is sampled from, which verification needs
                probs = sampler.probs(logits)
                token = sample(probs, sampler.rng)
            if drafts and probs.max() < self.threshold:
                break
            drafts.append(token)
            draft_probs.append(probs)
            last = token
        if drafts:
            spent = (time.perf_counter() - started) / len(drafts)
            self._draft_cost = 0.8 * self._draft_cost + 0.2 * spent
        else:
            self._probe_countdown -= 1
            if self._probe_countdown <= 0:
                # Costs drift (load, cache length): let the estimate recover now and then.
                self._draft_cost *= 0.9
                self._probe_countdown = 16
        logits = target.evaluate(Block.chain([context[-1], *drafts]))
        q = np.stack(draft_probs) if drafts and not sampler.greedy else None
        accepted, next_token = verify_chain(logits, drafts, sampler, q)
        target.commit(list(range(accepted + 1)))
        if drafts:
            self._acceptance.update(len(drafts), accepted)
            self.k = min(self.k_max, self.k + 2) if accepted == len(drafts) else max(1, self.k - 1)
        return Step(tokens=(*drafts[:accepted], next_token), drafted=len(drafts), accepted=accepted)
