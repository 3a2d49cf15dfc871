"""Decoders on the transformers backend with the bundled model, against transformers' own
`generate` as the oracle, and speculative decoders against plain greedy (float32: a divergence is
allowed only where greedy's own top-2 margin is within rounding)."""

from __future__ import annotations

import pytest
import torch

from specchat.backends.base import ChatMessage
from specchat.decoding.sampling import SamplingParams
from specchat.evaluation.race import first_divergence, greedy_margin, run_decoder
from specchat.prompting import chat_prompt_ids

# float32 logits of a block and of one token differ by ~1e-5; a flip needs a margin that small.
MARGIN_TOLERANCE = 1e-3


@pytest.fixture
def smol_hf(hf_bundled):
    """The bundled model on the transformers backend, one thread (tests/conftest.py)."""
    return hf_bundled


PROMPTS = [
    "Write a haiku about the sea.",
    "Give me three tips for learning a new language.",
    "Summarize: The quick brown fox jumps over the lazy dog. The dog was not amused by the fox, "
    "and the fox ran away into the forest where it met another fox.",
]


def assert_greedy_up_to_rounding(backend, ids, reference, tokens, name: str) -> None:
    """`tokens` are greedy's `reference` or part from it only where greedy's own top-2 margin is
    within float32 rounding."""
    index = first_divergence(reference, tokens)
    if index is not None:
        margin = greedy_margin(backend, ids, reference, index)
        assert margin < MARGIN_TOLERANCE, f"{name} diverged at {index}, margin {margin}"


def _hf_generate(backend, ids, **kwargs):
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        out = backend.model.generate(
            input_ids, attention_mask=torch.ones_like(input_ids), pad_token_id=2, **kwargs
        )
    generated = out[0, len(ids) :].tolist()
    cut = [i for i, t in enumerate(generated) if t in backend.eos_ids]
    return generated[: cut[0]] if cut else generated


@pytest.mark.parametrize("length_penalty", [1.0, 0.5])
@pytest.mark.parametrize("text", PROMPTS[:2])
@pytest.mark.slow
def test_beam_search_equals_transformers_generate(smol_hf, text, length_penalty):
    ids = chat_prompt_ids(smol_hf, [ChatMessage("user", text)])
    expected = _hf_generate(
        smol_hf,
        ids,
        num_beams=3,
        do_sample=False,
        max_new_tokens=24,
        length_penalty=length_penalty,
        early_stopping=False,
    )
    done = run_decoder(
        smol_hf,
        "beam",
        {"num_beams": 3, "length_penalty": length_penalty},
        ids,
        24,
        SamplingParams(),
    )
    assert list(done.token_ids) == expected


@pytest.mark.slow
def test_greedy_equals_transformers_generate(smol_hf):
    ids = chat_prompt_ids(smol_hf, [ChatMessage("user", PROMPTS[1])])
    expected = _hf_generate(smol_hf, ids, do_sample=False, max_new_tokens=40)
    done = run_decoder(smol_hf, "greedy", {}, ids, 40, SamplingParams())
    assert list(done.token_ids) == expected


# Drafting is forced (`fixed_draft`): on a compute-bound CPU the learned policy may well decide
# not to draft at all (lookahead does not, here), and plain steps would pass this test vacuously.
@pytest.mark.parametrize(
    "name,params",
    [
        ("pld", {"fixed_draft": 10}),
        ("lookahead", {"fixed_draft": 3}),
        ("draft", {"fixed_draft": 4}),
        ("draft", {"fixed_draft": 4, "tree_width": 4}),
        ("draft", {"draft": "self:24", "fixed_draft": 4}),
        ("suffix", {"fixed_draft": 10}),
    ],
    ids=["pld", "lookahead", "draft", "draft-tree", "self-speculation", "suffix"],
)
@pytest.mark.slow
def test_speculative_equals_greedy_up_to_rounding(smol_hf, name, params):
    accepted = 0
    for text in PROMPTS:
        ids = chat_prompt_ids(smol_hf, [ChatMessage("user", text)])
        reference = run_decoder(smol_hf, "greedy", {}, ids, 64, SamplingParams()).token_ids
        done = run_decoder(smol_hf, name, params, ids, 64, SamplingParams())
        accepted += done.stats.accepted
        assert_greedy_up_to_rounding(smol_hf, ids, reference, done.token_ids, name)
    assert accepted > 0, "the test must exercise accepted drafts"
