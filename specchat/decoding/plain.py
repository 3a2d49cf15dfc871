"""Plain autoregressive decoding: one target pass, one token. Greedy or sampled by the sampler."""

from __future__ import annotations

from specchat.backends.base import Backend, Block
from specchat.decoding.sampling import Sampler
from specchat.decoding.step import Step


class PlainDecoder:
    """The baseline every speculative decoder must reproduce (greedy) or match in law (sampling)."""

    def __init__(self, name: str = "greedy") -> None:
        self.name = name

    def reset(self, context: list[int]) -> None:
        pass

    def step(self, target: Backend, context: list[int], sampler: Sampler, room: int) -> Step:
        logits = target.evaluate(Block.chain([context[-1]]))
        target.commit([0])
        return Step(tokens=(sampler.next_token(logits[0]),))

    def params(self) -> dict[str, object]:
        return {}
