"""A race's lane says it ended as its answer's done event comes: what the engine does after an
answer (writing the pass costs, a slice of a cost sweep: up to 0.2 s) runs after that, before
the next lane starts."""

from __future__ import annotations

from specchat.backends.base import ChatMessage
from specchat.evaluation.race import RaceTurn, RunProgress, line_up_entrants, race_runs
from specchat.evaluation.variants import parse_variant
from specchat.prompting import chat_prompt_ids


def test_a_lane_ends_before_the_work_that_follows_its_answer(fresh_llama, monkeypatch):
    order: list[str] = []
    keep_costs = fresh_llama.keep_costs

    def kept(time_slice: bool = True) -> None:
        order.append("keep_costs")
        keep_costs(time_slice)

    monkeypatch.setattr(fresh_llama, "keep_costs", kept)
    messages = (ChatMessage("user", "Name three colours."),)
    turn = RaceTurn(messages, tuple(chat_prompt_ids(fresh_llama, list(messages))), 16)
    variants = [parse_variant("greedy"), parse_variant("suffix")]
    entrants = line_up_entrants(variants, lambda v: fresh_llama, lambda v: dict(v.params))
    for event in race_runs(turn, entrants):
        if not isinstance(event, RunProgress):
            order.append(type(event).__name__)
    lane = ["RunStarted", "RunFinished", "keep_costs"]
    assert order == lane * 2
