"""Faults inside answers, on both backends: hundreds of random decoder switches between steps
leave greedy-family output identical to plain greedy, and an answer that runs into the context
window ends with `context_full` — also while a drafter proposes more than there is room for.

The switch is what the TUI's decoder keys do: `Engine.switch` from another moment than the
engine's own, taken at the next step boundary (rollback to the committed context, the new
decoder reset on it). Drafting is forced (flat pass costs) so every switch lands on a decoder
that really drafts and verifies.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pytest

from specchat.backends.base import Backend, ChatMessage
from specchat.backends.hf.backend import HFBackend
from specchat.decoding.base import Decoder
from specchat.decoding.draft_model import DraftModelDecoder
from specchat.decoding.registry import DECODERS
from specchat.engine.events import DoneEvent, StepEvent
from specchat.engine.local import Engine
from specchat.engine.protocol import GenerationRequest
from specchat.prompting import chat_prompt_ids
from tests.decoding.test_speculative import LLAMA_PROMPTS, TINY_PROMPTS, _ForceDraft
from tests.tiny_models import tiny_backend, tiny_model, tiny_tokenizer

SWITCHES = 200  # at least this many switches inside answers, per backend


def greedy_family(backend: Backend, with_draft: bool) -> list[str]:
    """The greedy-family decoders that can run here (suffix needs ArcticInference)."""
    return [
        name
        for name, cls in DECODERS.items()
        if cls.greedy_family
        and not cls.needs_server
        and (with_draft or not cls.needs_draft_model)
        and cls.unavailable(backend, {}) is None
    ]


def make_decoder(name: str, draft: Backend | None) -> Decoder:
    if name == "draft":  # a model built or loaded in the test, handed in as the registry does
        return DraftModelDecoder(draft_model=draft, **DraftModelDecoder.validate({"k": 3}))
    if name == "lookahead":
        return DECODERS[name].create(fixed_draft=3)
    return DECODERS[name].create()


def answer(engine: Engine, prompt: Sequence[int], max_tokens: int, on_step=None) -> DoneEvent:
    for event in engine.generate(GenerationRequest(tuple(prompt), max_tokens)):
        if isinstance(event, DoneEvent):
            return event
        if on_step is not None:
            on_step(event)
    raise AssertionError("no done event")


def switch_randomly(
    target: Backend,
    prompts: list[list[int]],
    names: list[str],
    make: Callable[[str], Decoder],
    max_tokens: int,
) -> tuple[int, int, set[str]]:
    """Answer each prompt again and again, switching to a random decoder after every step,
    until SWITCHES switches happened; every answer must equal greedy's. Returns the switches,
    the accepted draft tokens and the decoders that ran."""
    rng = random.Random(14)
    references = {}
    for prompt in prompts:
        target.rollback(0)
        references[tuple(prompt)] = answer(Engine(target, make("greedy")), prompt, max_tokens)
    switches = accepted = 0
    ran: set[str] = set()
    while switches < SWITCHES:
        for prompt in prompts:
            target.rollback(0)
            engine = Engine(target, _ForceDraft(make(rng.choice(names))))

            def on_step(event: StepEvent, engine: Engine = engine) -> None:
                nonlocal switches
                ran.add(event.decoder)
                engine.switch(_ForceDraft(make(rng.choice(names))))
                switches += 1

            done = answer(engine, prompt, max_tokens, on_step)
            reference = references[tuple(prompt)]
            assert done.token_ids == reference.token_ids, (prompt, switches)
            assert done.finish_reason == reference.finish_reason
            accepted += done.stats.accepted
    return switches, accepted, ran


@pytest.mark.slow
def test_hundreds_of_switches_on_llama_cpp_equal_greedy(bundled_gguf):
    from specchat.backends.llama import LlamaBackend

    # one thread each: two spinning llama.cpp threads crawl on a shared two-core machine
    target = LlamaBackend(bundled_gguf, n_ctx=512, threads=1)
    draft = LlamaBackend(bundled_gguf, n_ctx=512, threads=1)
    try:
        names = greedy_family(target, with_draft=True)
        prompts = [chat_prompt_ids(target, [ChatMessage("user", t)]) for t in LLAMA_PROMPTS]
        switches, accepted, ran = switch_randomly(
            target, prompts, names, lambda n: make_decoder(n, draft), max_tokens=16
        )
    finally:
        target.close()
        draft.close()
    assert switches >= SWITCHES and accepted > 0
    assert ran == set(names), "every greedy-family decoder ran inside an answer"


def test_hundreds_of_switches_on_transformers_equal_greedy():
    target = tiny_backend("tiny-target", peaked=25.0)
    draft = tiny_backend("tiny-draft", peaked=25.0, noise=0.02)
    names = greedy_family(target, with_draft=True)
    switches, accepted, ran = switch_randomly(
        target, TINY_PROMPTS, names, lambda n: make_decoder(n, draft), max_tokens=40
    )
    assert switches >= SWITCHES and accepted > 0
    assert ran == set(names)


# -- the context window ----------------------------------------------------------------------


def _to_the_edge(target: Backend, prompt: list[int], names: list[str], make) -> None:
    """Every decoder runs into the context window: `context_full`, the window exactly filled,
    and the same tokens as greedy (a draft longer than the room left is cut, never overflows)."""
    target.rollback(0)
    reference = answer(Engine(target, make("greedy")), prompt, 10_000)
    assert reference.finish_reason == "context_full"
    assert len(prompt) + len(reference.token_ids) == target.n_ctx
    for name in names:
        target.rollback(0)
        done = answer(Engine(target, _ForceDraft(make(name))), prompt, 10_000)
        assert done.finish_reason == "context_full", name
        assert done.token_ids == reference.token_ids, name


@pytest.mark.slow
def test_every_decoder_reaching_the_context_window_ends_with_context_full_on_llama(bundled_gguf):
    from specchat.backends.llama import LlamaBackend

    small = LlamaBackend(bundled_gguf, n_ctx=96, threads=1)
    draft = LlamaBackend(bundled_gguf, n_ctx=96, threads=1)
    try:
        # raw text the model keeps repeating: no EOS before the window is full
        prompt = small.tokenize("one two three four, " * 8)[:60]
        names = greedy_family(small, with_draft=True)
        _to_the_edge(small, prompt, names, lambda n: make_decoder(n, draft))
    finally:
        small.close()
        draft.close()


def test_every_decoder_reaching_the_context_window_ends_with_context_full_on_transformers():
    def backend(name: str, noise: float) -> HFBackend:
        model = tiny_model(peaked=25.0, noise=noise)
        return HFBackend(model, tiny_tokenizer(), model_name=name, device="cpu", n_ctx=48)

    target, draft = backend("tiny-edge", 0.0), backend("tiny-edge-draft", 0.02)
    prompt = [5, 6, 7, 8] * 5
    names = greedy_family(target, with_draft=True)
    _to_the_edge(target, prompt, names, lambda n: make_decoder(n, draft))
