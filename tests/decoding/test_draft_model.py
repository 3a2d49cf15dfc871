"""What a draft model's drafting costs, as the draft-length policy is told it: the draft's own
passes, on a draft runtime whose clock the test holds (no real runtime could show the bookkeeping
deterministically)."""

from __future__ import annotations

import pytest

from specchat.decoding import draft_model
from specchat.decoding.draft_model import DraftModelDrafter
from specchat.decoding.sampling import Sampler, SamplingParams
from tests.numpy_backend import CORPUS, NumpyBackend


@pytest.mark.parametrize(
    "sat_out, threshold",
    [(0, 0.0), (40, 0.0), (0, 1.0)],
    ids=["drafting-on", "after-plain-steps", "stopped-early"],
)
def test_a_drafted_token_costs_one_draft_pass(
    sat_out: int, threshold: float, char_ngram_model, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither catching the draft up on the tokens of the plain steps since its last draft nor
    a pass whose token it did not keep (it stopped, unsure) is priced as drafting: counted in,
    they made drafting look dearer than a target pass, and the draft decoder stopped drafting
    for the rest of the answer."""
    target = NumpyBackend(char_ngram_model)
    draft = NumpyBackend(char_ngram_model, overhead=0.004, per_token=0.0005)
    monkeypatch.setattr(draft_model.time, "perf_counter", lambda: draft.clock)
    drafter = DraftModelDrafter(draft, k_max=12, threshold=threshold)
    drafter.prepare(target)
    text = target.tokenize(CORPUS[0])
    prompt, context = text[:20], text[: 20 + sat_out]
    drafter.reset(prompt)
    plan = drafter.plan(context, 100)
    assert plan.draft_cost == pytest.approx(draft.block_cost(1))
    made = drafter.draft(target, context, Sampler(SamplingParams()), plan, 4)
    assert made.drafted == (1 if threshold else 4)
    assert drafter.plan(context, 100).draft_cost == pytest.approx(draft.block_cost(1))
