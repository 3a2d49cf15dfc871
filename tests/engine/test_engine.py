"""The engine on the real bundled model: events, stats, stops, cancel, sampling, limits."""

from __future__ import annotations

import threading

import pytest

from specchat.backends.base import ChatMessage
from specchat.decoding.plain import GreedyDecoder, SampleDecoder
from specchat.decoding.sampling import SamplingParams
from specchat.engine.events import DoneEvent, StepEvent
from specchat.engine.local import Engine
from specchat.engine.protocol import GenerationRequest
from specchat.engine.stats import GenerationStats
from specchat.errors import SpecchatError
from specchat.prompting import chat_prompt_ids, raw_prompt_ids


def _generate(engine, ids, **kwargs):
    events = list(engine.generate(GenerationRequest(tuple(ids), **kwargs)))
    assert isinstance(events[-1], DoneEvent)
    return events[:-1], events[-1]


@pytest.fixture
def story_ids(fresh_llama):
    return chat_prompt_ids(fresh_llama, [ChatMessage("user", "Tell me a long story about a cat.")])


def test_events_add_up_to_the_answer(fresh_llama, story_ids):
    steps, done = _generate(Engine(fresh_llama, GreedyDecoder()), story_ids, max_tokens=30)
    assert done.finish_reason == "max_tokens"
    assert len(done.token_ids) == 30
    assert "".join(e.text for e in steps) == done.text
    assert [t for e in steps for t in e.tokens] == list(done.token_ids)
    stats = done.stats
    assert stats.generated_tokens == 30 and stats.steps == 30
    assert stats.tokens_per_step == 1.0 and stats.prompt_tokens == len(story_ids)
    assert stats.tokens_per_second > 0 and stats.prefill_seconds > 0


def test_step_events_add_up_to_the_stats(fresh_llama):
    """One event per step, also the step that only produced EOS: what a consumer sums from the
    events (the TUI's live status bar) is what the done event reports."""
    ids = chat_prompt_ids(fresh_llama, [ChatMessage("user", "Say just: yes")])
    steps, done = _generate(Engine(fresh_llama, GreedyDecoder()), ids, max_tokens=200)
    assert done.finish_reason == "eos" and steps[-1].tokens == ()
    live = GenerationStats()
    for event in steps:
        live = live.with_step(event)
    final = done.stats
    assert (live.steps, live.generated_tokens, live.drafted, live.accepted) == (
        final.steps,
        final.generated_tokens,
        final.drafted,
        final.accepted,
    )
    assert live.decode_seconds == final.decode_seconds
    assert final.steps == len(done.token_ids) + 1


def test_stop_string_ends_the_answer(fresh_llama, story_ids):
    engine = Engine(fresh_llama, GreedyDecoder())
    _, free = _generate(engine, story_ids, max_tokens=40)
    # a stop string made of the middle of the free answer, spanning token boundaries
    words = free.text.split()
    stop = " ".join(words[3:5])
    _, stopped = _generate(engine, story_ids, max_tokens=40, stop=(stop,))
    assert stopped.finish_reason == "stop"
    assert stopped.text == free.text[: free.text.index(stop)]
    assert len(stopped.token_ids) < len(free.token_ids)


def test_eos_ends_the_answer_and_is_not_in_token_ids(fresh_llama):
    ids = chat_prompt_ids(fresh_llama, [ChatMessage("user", "Say just: yes")])
    _, done = _generate(Engine(fresh_llama, GreedyDecoder()), ids, max_tokens=200)
    assert done.finish_reason == "eos"
    assert not set(done.token_ids) & fresh_llama.eos_ids


def test_cancel_stops_within_one_step(fresh_llama, story_ids):
    engine = Engine(fresh_llama, GreedyDecoder())
    handle = engine.start(GenerationRequest(tuple(story_ids), max_tokens=400))
    seen = after = 0
    done = None
    for event in handle:
        if isinstance(event, StepEvent):
            if seen == 5:
                handle.cancel()
            elif seen > 5:
                after += 1
            seen += 1
        else:
            done = event
    assert done.finish_reason == "cancelled"
    assert after <= 1
    assert len(done.token_ids) == seen  # what was generated is kept


def test_cancel_through_an_external_flag(fresh_llama, story_ids):
    flag = threading.Event()
    engine = Engine(fresh_llama, GreedyDecoder())
    count = 0
    for event in engine.generate(GenerationRequest(tuple(story_ids), 400), cancel=flag):
        if isinstance(event, StepEvent):
            count += 1
            if count == 3:
                flag.set()
        else:
            assert event.finish_reason == "cancelled" and len(event.token_ids) == 3


def test_cancel_before_the_first_step_is_kept(fresh_llama, story_ids):
    """Engine.cancel() reaches a generation from the moment generate() returned, before the
    consumer asked for its first event (a worker still preparing, say)."""
    engine = Engine(fresh_llama, GreedyDecoder())
    events = engine.generate(GenerationRequest(tuple(story_ids), 400))
    engine.cancel()
    *steps, done = list(events)
    assert steps == []
    assert done.finish_reason == "cancelled" and done.token_ids == ()


def test_cancel_right_after_start_is_kept(fresh_llama, story_ids):
    """The handle's own token exists before its thread starts: a Ctrl+C at once is never lost."""
    engine = Engine(fresh_llama, GreedyDecoder())
    handle = engine.start(GenerationRequest(tuple(story_ids), 400))
    handle.cancel()
    *steps, done = list(handle)
    assert steps == []
    assert done.finish_reason == "cancelled" and done.token_ids == ()


def test_a_cancel_while_idle_does_not_stop_the_next_answer(fresh_llama, story_ids):
    engine = Engine(fresh_llama, GreedyDecoder())
    engine.cancel()  # nothing asked for yet
    _, first = _generate(engine, story_ids, max_tokens=5)
    assert first.finish_reason == "max_tokens"
    engine.cancel()  # the answer that already ended
    _, second = _generate(engine, story_ids, max_tokens=5)
    assert second.finish_reason == "max_tokens"


def test_seeded_sampling_is_reproducible(fresh_llama, story_ids):
    engine = Engine(fresh_llama, SampleDecoder())
    runs = [
        _generate(engine, story_ids, max_tokens=25, sampling=SamplingParams(0.9, 50, 0.95, seed))[1]
        for seed in (7, 7, 8)
    ]
    assert runs[0].token_ids == runs[1].token_ids
    assert runs[0].token_ids != runs[2].token_ids


def test_prompt_past_the_context_window_is_refused(bundled_gguf):
    from specchat.backends.llama import LlamaBackend

    small = LlamaBackend(bundled_gguf, n_ctx=64, max_branches=1, threads=1)
    try:
        long_ids = raw_prompt_ids(small, "word " * 100)
        with pytest.raises(SpecchatError, match="context window"):
            list(Engine(small, GreedyDecoder()).generate(GenerationRequest(tuple(long_ids), 10)))
        # a prompt that fits but leaves little room ends with context_full
        ids = raw_prompt_ids(small, "word " * 50)[:56]
        _, done = _generate(Engine(small, GreedyDecoder()), ids, max_tokens=100)
        assert done.finish_reason == "context_full"
        assert len(ids) + len(done.token_ids) == 64
    finally:
        small.close()


def test_a_second_turn_reuses_the_cached_prefix_with_identical_output(fresh_llama):
    engine = Engine(fresh_llama, GreedyDecoder())
    first = [ChatMessage("user", "Name a colour.")]
    _, a = _generate(engine, chat_prompt_ids(fresh_llama, first), max_tokens=10)
    history = first + [ChatMessage("assistant", a.text), ChatMessage("user", "And another?")]
    ids = chat_prompt_ids(fresh_llama, history)
    _, reused = _generate(engine, ids, max_tokens=15)
    fresh_llama.rollback(0)
    _, cold = _generate(Engine(fresh_llama, GreedyDecoder()), ids, max_tokens=15)
    assert reused.token_ids == cold.token_ids


def test_switching_to_sampling_mid_answer_starts_sampling(fresh_llama, story_ids):
    greedy_ids = _generate(Engine(fresh_llama, GreedyDecoder()), story_ids, max_tokens=40)[
        1
    ].token_ids
    fresh_llama.rollback(0)
    engine = Engine(fresh_llama, GreedyDecoder())
    steps = 0
    for event in engine.generate(GenerationRequest(tuple(story_ids), 40)):
        if isinstance(event, StepEvent):
            steps += 1
            if steps == 5:
                engine.switch(SampleDecoder(), SamplingParams(1.5, seed=3))
        else:
            done = event
    assert done.token_ids[:5] == greedy_ids[:5]
    assert done.token_ids[6:] != greedy_ids[6:]  # sampled at a high temperature after the switch
    assert set(done.stats.decoders) == {"greedy", "sample"}
