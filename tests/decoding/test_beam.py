"""Beam search on the int4 runtime, which holds a beam's tree from pass to pass: each step
evaluates the token each beam grew, not every beam's whole suffix again. The bundled model's beams
for an ocean poem disagree for a hundred tokens and more (their sentences repeat in turns)."""

from __future__ import annotations

import pytest

from specchat.backends.base import ChatMessage
from specchat.decoding.sampling import SamplingParams
from specchat.errors import SpecchatError
from specchat.evaluation.race import run_decoder
from specchat.prompting import chat_prompt_ids

POEM = "Write a poem about the ocean."


def _poem_ids(backend) -> list[int]:
    return chat_prompt_ids(backend, [ChatMessage("user", POEM)])


@pytest.mark.slow
def test_a_grown_tree_answers_as_the_whole_tree_evaluated_every_step(int4_backend, monkeypatch):
    """The same answer, token for token, whether each step evaluates only the rows the beams
    grew (their keys written after the tree's earlier rows, which they attend to where those are
    their ancestors) or the whole tree again; and grown, a step's pass holds a row a beam."""
    ids = _poem_ids(int4_backend)
    grown_rows: list[int] = []
    evaluate_more = int4_backend.evaluate_more

    def counted(tree, evaluated):
        logits = evaluate_more(tree, evaluated)
        if logits is not None:
            grown_rows.append(len(tree) - evaluated)
        return logits

    monkeypatch.setattr(int4_backend, "evaluate_more", counted)
    grown = run_decoder(int4_backend, "beam", {}, ids, 64, SamplingParams())
    assert len(grown_rows) > 32 and max(grown_rows) <= 4, grown_rows  # 4 beams
    monkeypatch.setattr(int4_backend, "evaluate_more", lambda tree, evaluated: None)
    whole = run_decoder(int4_backend, "beam", {}, ids, 64, SamplingParams())
    assert list(grown.token_ids) == list(whole.token_ids)
    assert len(grown.token_ids) == 64


@pytest.mark.slow
def test_beams_that_disagree_for_long_still_answer(int4_backend):
    """200 tokens of the poem, whose beams share no new token for long stretches: the whole tree
    grew past the 512 rows one pass takes, and the answer failed after a minute ("a block of
    515 tokens exceeds 512"); held from pass to pass, it answers."""
    try:
        done = run_decoder(int4_backend, "beam", {}, _poem_ids(int4_backend), 200, SamplingParams())
    except SpecchatError as error:
        pytest.fail(f"beam search failed: {error}")
    assert len(done.token_ids) == 200 and done.finish_reason == "max_tokens"
