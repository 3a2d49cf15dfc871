"""A hundred cancel/restart cycles in one process, as Esc and a new question make them: no thread
is left behind and the engine still answers exactly as a fresh one. (Resident memory over such
cycles is measured, not asserted, by benchmarks/measure_cancel_cycles.py.)"""

from __future__ import annotations

import threading
import time

import pytest

from specchat.backends.base import ChatMessage
from specchat.decoding.registry import DECODERS
from specchat.engine.events import DoneEvent, StepEvent
from specchat.engine.local import Engine
from specchat.engine.protocol import GenerationRequest
from specchat.prompting import chat_prompt_ids

CYCLES = 100


def wait_for(condition, limit: float = 60.0) -> None:
    """Poll until `condition()`; `limit` only guards against a hang."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


@pytest.mark.slow
def test_a_hundred_cancel_restart_cycles_leave_no_thread_behind(fresh_llama):
    names = [
        n
        for n in ("greedy", "pld", "lookahead", "suffix")
        if DECODERS[n].unavailable(fresh_llama, {}) is None
    ]
    ids = tuple(
        chat_prompt_ids(fresh_llama, [ChatMessage("user", "Tell me a long story about a cat.")])
    )
    reference = list(
        Engine(fresh_llama, DECODERS["greedy"].create()).generate(GenerationRequest(ids, 24))
    )[-1]
    fresh_llama.rollback(0)
    engine = Engine(fresh_llama, DECODERS["greedy"].create())
    before = set(threading.enumerate())
    for cycle in range(CYCLES):
        engine.switch(DECODERS[names[cycle % len(names)]].create())
        handle = engine.start(GenerationRequest(ids, 400))
        events = iter(handle)
        assert isinstance(next(events), StepEvent)  # the answer is running
        handle.cancel()
        rest = list(events)
        assert isinstance(rest[-1], DoneEvent) and rest[-1].finish_reason == "cancelled"
    wait_for(lambda: set(threading.enumerate()) <= before)
    # what the cycles left in the cache and the decoders' state changes no answer
    engine.switch(DECODERS["greedy"].create())
    again = list(engine.generate(GenerationRequest(ids, 24)))[-1]
    assert again.token_ids == reference.token_ids
