"""The draft decoder copies where the answer quotes its prompt and drafts with the model elsewhere:
the bundled model on the transformers backend, its bundled GGUF as the (default) draft, against
plain greedy (float32: a divergence is allowed only where greedy's own top-2 margin is within
rounding)."""

from __future__ import annotations

import pytest

from specchat.backends.base import ChatMessage
from specchat.decoding.registry import default_decoder, default_race
from specchat.decoding.sampling import SamplingParams
from specchat.decoding.sources import DRAFT, PROMPT
from specchat.engine.events import DoneEvent, StepEvent
from specchat.evaluation.race import DecoderEntrant, RaceTurn, run_decoder
from specchat.prompting import chat_prompt_ids
from tests.decoding.test_hf_decoders import assert_greedy_up_to_rounding

QUOTED = (
    "Repeat this sentence exactly, then say what it is about: The lighthouse keeper climbed the "
    "one hundred and twelve steps every evening at dusk to light the great lamp for the ships."
)


def answer(backend, params: dict, text: str, tokens: int) -> tuple[list[StepEvent], DoneEvent]:
    ids = chat_prompt_ids(backend, [ChatMessage("user", text)])
    turn = RaceTurn((), tuple(ids), tokens, SamplingParams(), raw=True)
    events = list(DecoderEntrant(backend, "draft", params).run(turn))
    done = events[-1]
    assert isinstance(done, DoneEvent) and not done.error
    return [e for e in events if isinstance(e, StepEvent)], done


@pytest.mark.slow
def test_the_draft_decoder_copies_a_quoted_sentence_and_drafts_the_rest(hf_bundled):
    steps, done = answer(hf_bundled, {}, QUOTED, 96)
    taken = {e.source for e in steps if e.accepted}
    assert PROMPT in taken, "the quoted sentence is copied from the prompt"
    assert DRAFT in taken, "the model drafts what the prompt does not hold"
    alone, _ = answer(hf_bundled, {"copies": False}, QUOTED, 96)
    assert {e.source for e in alone if e.accepted} <= {DRAFT}  # copies off: the model alone
    ids = chat_prompt_ids(hf_bundled, [ChatMessage("user", QUOTED)])
    reference = run_decoder(hf_bundled, "greedy", {}, ids, 96, SamplingParams()).token_ids
    assert_greedy_up_to_rounding(hf_bundled, ids, reference, done.token_ids, "draft")


def test_the_draft_decoder_is_the_default_and_races_where_a_default_draft_exists(
    hf_bundled, llama_backend
):
    assert default_decoder(hf_bundled) == "draft"
    assert default_decoder(llama_backend) != "draft"  # no smaller sibling on llama.cpp
    assert default_decoder() != "draft"  # before the model is known
    # compare and the race screen race the default against the rest
    assert "draft" in default_race(hf_bundled) and "draft" not in default_race(llama_backend)
