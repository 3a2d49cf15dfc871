"""Draft-model speculation: a small model with the target's vocabulary drafts tokens one by one,
the target verifies them in one pass.

How far to draft is the draft-length policy's call, as for every drafter (`draft_policy.py`): it
learns how often the draft's tokens are taken at each depth, starting from a prior that a draft
of the same family agrees most of the time, and weighs that against the draft's own pass cost and
the target's; `k_max` caps it. Drafting also stops early where the draft's own top probability
falls below a threshold. With `tree_width` above 1 the chain becomes a
SpecInfer token tree: the draft's next-likeliest tokens join where it is unsure, as far as the
target's pass costs and the chances the target takes them (learned from greedy verification) pay
for them (token_tree.py). With `soft_match` β above 0 (opt-in) sampled drafts are verified by soft
matching, which is faster and NOT sampled from the target's distribution; every step so verified
says so (Step.distance). The draft may run on another backend or device than the target: it only
ever exchanges token ids with it, and it is handed in loaded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from specchat.backends.base import Backend, Block, sync_cache
from specchat.backends.registry import LOCAL_RUNTIMES
from specchat.decoding.copy_or_draft import CopyOrDraftDrafter, chat_copier
from specchat.decoding.draft_policy import Plan
from specchat.decoding.params import Param
from specchat.decoding.sampling import Sampler, SamplingParams, logits_to_probs, sample
from specchat.decoding.sources import DRAFT, NO_SOURCES, DraftSources
from specchat.decoding.speculative import SPECULATIVE_PARAMS, Draft, SpeculativeDecoder
from specchat.decoding.token_tree import Position, TakeRates, as_drafted, chain_positions, widen

_PLAIN = SamplingParams(temperature=1.0)
_PRIOR = 0.8  # a draft of the same family agrees most of the time
# The draft reads at most this many of the prompt's last tokens: reading a prompt costs a draft
# pass per few tokens, and a long (RAG) prompt cost the draft more than the answer's drafts
# saved; what it drafts is still verified.
_PROMPT_WINDOW = 128


@dataclass(frozen=True)
class _Drafted:
    """What `observe` needs of a draft: for a greedy tree, the positions whose verification
    teaches the take rates."""

    positions: list[Position] | None = None


class DraftModelDrafter:
    replayable = False
    undrafted_is_plain = False  # an undrafted step probes whether drafting got cheaper

    def proposal(self, context: list[int]) -> list[int]:
        """Its drafts depend on more than the context: nothing to replay."""
        return []

    def __init__(
        self,
        draft: Backend,
        k_max: int,
        threshold: float,
        tree_width: int = 1,
        soft_match: float = 0.0,
    ) -> None:
        self.model = draft
        self.k_max, self.threshold = k_max, threshold
        self.tree_width, self.soft_match = tree_width, soft_match
        self._tokens: list[int] = []  # what the draft's cache holds
        # Seconds per pass of its own while drafting, as actually paid: alternating two runtimes'
        # thread pools on shared cores can cost several times the draft's stand-alone block cost.
        self._cost: float | None = None
        self._probe_countdown = 16
        self._prepared = False
        self._ends: frozenset[int] = frozenset()
        self._rates = TakeRates()
        # an answer's first step is the target's alone (see `reset`); off, the draft reads the
        # prompt before the first token and drafts it (what statistics over 2-token answers need)
        self.first_step_alone = True
        self._first_step = True
        self._start = 0  # the context's first token the draft reads (see `reset`)

    def prepare(self, target: Backend) -> None:
        self._ends = target.eos_ids  # a token drafted after an end of answer is never kept
        if self._prepared:
            return
        self.model.block_cost(1)
        self.model.rollback(0)  # the draft may be shared: start from a cache this drafter knows
        self._prepared = True

    def reset(self, context: list[int], sources: DraftSources = NO_SOURCES) -> None:
        """A new answer: its first step is the target's alone. The draft's cache catches up with
        the prompt's last `_PROMPT_WINDOW` tokens at its first draft, after the first token: read
        at once beside the target's prefill, the whole prompt made the first token wait several
        times as long on transformers (README, the draft decoder)."""
        self._first_step = self.first_step_alone
        self._start = max(0, len(context) - 1 - _PROMPT_WINDOW)  # where the draft's view begins

    def _sync(self, committed: list[int]) -> None:
        sync_cache(self.model, self._tokens, committed)
        self._tokens = list(committed)

    def plan(self, context: list[int], room: int) -> Plan:
        if self._cost is None:
            self._cost = self.model.block_cost(1)
        # a tree's alternatives make deeper tokens likelier to be kept: learned apart
        key = ("draft", "tree") if self.tree_width > 1 else ("draft",)
        available = 0 if self._first_step else self.k_max
        self._first_step = False
        return Plan(available=available, key=key, draft_cost=self._cost, prior=_PRIOR)

    def draft(
        self, target: Backend, context: list[int], sampler: Sampler, plan: Plan, depth: int
    ) -> Draft:
        tokens: list[int] = []
        probs_seen: list[np.ndarray] = []
        stopped: tuple[int, np.ndarray] | None = None  # where the draft lost confidence
        last = context[-1]
        if depth:
            self._sync(context[self._start : -1])
        started = time.perf_counter()
        for _ in range(depth):
            logits = self.model.evaluate(Block.chain([last]))[0]
            self.model.commit([0])
            self._tokens.append(last)
            if sampler.greedy:  # its probabilities only measure the draft's confidence
                probs = logits_to_probs(logits, _PLAIN)
                token = int(np.argmax(logits))
            else:  # the q the token is sampled from, which verification needs
                probs = sampler.probs(logits)
                token = sample(probs, sampler.rng)
            if tokens and probs.max() < self.threshold:
                stopped = (token, probs)
                break
            tokens.append(token)
            probs_seen.append(probs)
            last = token
            if token in self._ends:
                break
        if tokens:
            # per pass of its own, as the policy charges it: neither the catch-up above (the
            # tokens since its last draft, evaluated at once) nor a pass whose token it did not
            # keep is a drafted token's price — counted in, after a stretch of plain steps they
            # priced drafting above a target pass, and it stopped drafting for good
            passes = len(tokens) + (stopped is not None)
            spent = (time.perf_counter() - started) / passes
            self._cost = 0.8 * self._cost + 0.2 * spent
        else:
            self._probe_countdown -= 1
            if self._probe_countdown <= 0:
                # Costs drift (load, cache length): let the estimate recover now and then.
                self._cost *= 0.9
                self._probe_countdown = 16
        sampled = not sampler.greedy
        soft = self.soft_match if sampled else 0.0
        draft = Draft.chain(
            context[-1], tokens, probs_seen if sampled and tokens else None, DRAFT, soft
        )
        positions = None
        if self.tree_width > 1 and tokens and not soft:  # soft matching verifies chains
            rate = as_drafted if sampled else self._rates
            positions = chain_positions(tokens, probs_seen, stopped, self.tree_width, rate)
            rng = sampler.rng if sampled else None
            widen(draft, positions, self.tree_width, target.block_cost, rng, rate)
        draft.state = _Drafted(None if sampled else positions)
        return draft

    def observe(self, draft: Draft, logits: np.ndarray, accepted: int) -> None:
        drafted: _Drafted = draft.state
        if drafted.positions is not None:
            self._rates.learn(drafted.positions, logits, self.tree_width)


class DraftModelDecoder(SpeculativeDecoder):
    name = "draft"
    key = "f7"
    description = "draft model: a small model with the same vocabulary drafts the tokens"
    params = (
        Param(
            "draft",
            str,
            None,
            "draft model spec (default: the bundled model's sibling, where there is one); self:L "
            "= the target's first L layers (self-speculation)",
            optional=True,
        ),
        Param(
            "draft_backend",
            str,
            None,
            f"{', '.join(LOCAL_RUNTIMES)} (default: by the draft's format; the bundled default "
            "draft runs on the runtime whose one-token pass is measured fastest here)",
            choices=LOCAL_RUNTIMES,
            optional=True,
        ),
        Param("draft_device", str, "cpu", "cpu or cuda", choices=("cpu", "cuda")),
        Param("k_max", int, 12, "longest draft (the policy sizes each one)", 1, 64),
        Param(
            "threshold", float, 0.3, "stop drafting when the draft's top probability is lower", 0, 1
        ),
        Param(
            "tree_width",
            int,
            1,
            "1: a chain; N: a token tree, up to N of the draft's likeliest tokens where it is "
            "unsure, as many as the pass costs pay for (SpecInfer)",
            1,
            16,
        ),
        Param(
            "copies",
            bool,
            True,
            "also copy from the chat (as suffix does) wherever a copy promises more tokens a "
            "second than the draft model",
        ),
        Param(
            "soft_match",
            float,
            0.0,
            "β, sampling only: also keep a drafted token when 1 − p/q ≤ β — faster, and the "
            "answer is NOT sampled from the target's distribution (0: exact)",
            0,
            0.99,
        ),
    ) + SPECULATIVE_PARAMS
    needs_draft_model = True
    # `k`, the draft's own adapting length (+2 when taken whole, -1 on a miss), capped the
    # policy's depth: the policy alone sizes drafts now, from its prior and what it learns
    retired = ("k", *SpeculativeDecoder.retired)
    # where a default draft exists (transformers with the bundled model), ahead of suffix: it
    # copies as suffix does and drafts with the model elsewhere
    default_rank = 4

    def __init__(self, draft_model: Backend, **values: object) -> None:
        # a draft found among the user's models (or the bundled sibling) is named where the
        # answer's parameters are shown (`ask --json`, the status line): the file it runs, or its name
        named = values.get("draft") or draft_model.model_path or draft_model.model_name
        super().__init__(**{**values, "draft": named})
        model = DraftModelDrafter(
            draft_model,
            int(values["k_max"]),
            float(values["threshold"]),
            int(values["tree_width"]),
            float(values["soft_match"]),
        )
        self.drafter = (
            CopyOrDraftDrafter(chat_copier(), model, self.policy) if values["copies"] else model
        )
