"""Plain autoregressive decoding: one target pass, one token. Greedy or sampled by the sampler."""

from __future__ import annotations

import time

from specchat.backends.base import Backend, Block
from specchat.decoding.base import Decoder
from specchat.decoding.sampling import Sampler
from specchat.decoding.step import Step


def plain_step(target: Backend, context: list[int], sampler: Sampler) -> Step:
    """The baseline step every speculative step must reproduce (greedy) or match in law."""
    started = time.perf_counter()
    logits = target.evaluate(Block.chain([context[-1]]))
    pass_seconds = time.perf_counter() - started
    target.commit([0])
    return Step(tokens=(sampler.next_token(logits[0]),), pass_seconds=pass_seconds)


class GreedyDecoder(Decoder):
    name = "greedy"
    key = "f2"
    default_rank = 1
    description = "plain greedy decoding: one pass, one token (the baseline)"
    takes_temperature = False
    baseline = True

    def step(self, target: Backend, context: list[int], sampler: Sampler, room: int) -> Step:
        return plain_step(target, context, sampler)


class SampleDecoder(Decoder):
    name = "sample"
    key = "f3"
    description = "plain sampling with temperature, top-k, top-p and a seed"
    greedy_family = False
    default_temperature = 0.8

    def step(self, target: Backend, context: list[int], sampler: Sampler, room: int) -> Step:
        return plain_step(target, context, sampler)
