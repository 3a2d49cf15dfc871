"""The remote backend against servers that misbehave, or report nothing: real HTTP servers on
127.0.0.1 (tests/servers.py), the real `openai` client, specchat's engine API.

A server that cannot be reached or refuses the request is a one-line error; one that breaks off
mid-answer (stalls past the timeout, drops the connection) ends the answer with that one line and
keeps what arrived; a cancel closes even a silent stream at once. Figures a server does not
report are not shown.
"""

from __future__ import annotations

import pytest

from specchat.backends.base import ChatMessage
from specchat.backends.remote import RemoteError
from specchat.decoding.registry import build_decoder, default_decoder
from specchat.decoding.sampling import SamplingParams
from specchat.engine.choice import engine_for
from specchat.engine.events import DoneEvent, StepEvent
from specchat.engine.protocol import GenerationRequest
from specchat.engine.server_steps import NONE, NOTES, TOTALS
from specchat.models import LoadOptions, load_model
from tests.servers import FaultServer, free_port

TEXT = "Hello, world"


def connect(base_url: str, timeout: float = 120.0):
    return load_model(None, LoadOptions(backend="openai", base_url=base_url, timeout=timeout))


def start(base_url: str, timeout: float = 120.0):
    """An answer to one question, running in its own thread (the handle yields its events)."""
    backend = connect(base_url, timeout)
    engine = engine_for(backend, build_decoder(default_decoder(backend), {}, backend))
    request = GenerationRequest(
        (), 64, (), SamplingParams(), messages=(ChatMessage("user", "Say hello to the world."),)
    )
    return engine, engine.start(request)


def test_a_refused_connection_is_one_line():
    with pytest.raises(RemoteError) as raised:
        connect(f"http://127.0.0.1:{free_port()}/v1")
    message = str(raised.value)
    assert "connection refused" in message and "\n" not in message


def test_an_error_status_is_one_line_with_the_servers_reason():
    with FaultServer("status") as server:
        _, handle = start(server.base_url)
        with pytest.raises(RemoteError) as raised:
            list(handle)
    message = str(raised.value)
    assert "500" in message and "the model crashed" in message and "\n" not in message


@pytest.mark.parametrize("behaviour, reason", [("stall", "stalled"), ("drop", "dropped")])
def test_an_answer_broken_off_keeps_what_arrived(behaviour, reason):
    with FaultServer(behaviour) as server:
        _, handle = start(server.base_url, timeout=1.0)  # the stall lasts until the server stops
        events = list(handle)
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert done.finish_reason == "error"
    assert reason in done.error and "\n" not in done.error
    assert done.text == TEXT == "".join(e.text for e in events if isinstance(e, StepEvent))


def test_cancel_closes_a_silent_stream_at_once_and_keeps_the_text():
    with FaultServer("stall") as server:
        # the server goes silent after the text and stays so for two minutes: only the cancel
        # can end this answer with "cancelled"
        _, handle = start(server.base_url, timeout=120.0)
        text = ""
        events = iter(handle)
        for event in events:
            text += event.text
            if text == TEXT:
                handle.cancel()
                break
        done = next(events)
    assert isinstance(done, DoneEvent)
    assert done.finish_reason == "cancelled" and done.error is None
    assert done.text == TEXT


def test_a_server_without_figures_streams_plain_text_and_says_so():
    with FaultServer("plain") as server:
        engine, handle = start(server.base_url)
        events = list(handle)
        sent = server.requests[-1]
    steps, done = events[:-1], events[-1]
    assert done.finish_reason == "eos" and done.text == TEXT
    # nothing is coloured: no step claims a token count or an accepted draft
    assert all(not s.tokens and s.accepted == 0 and s.drafted == 0 for s in steps)
    # the totals are the server's usage, and nothing it did not report
    assert done.stats.generated_tokens == 7 and done.stats.prompt_tokens == 9
    assert done.stats.steps == 0 and done.stats.drafted == 0
    assert engine.note == NOTES[NONE]
    # what went out: the conversation, streamed, asking for usage; no llama.cpp extras
    assert sent["messages"] == [{"role": "user", "content": "Say hello to the world."}]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert "timings_per_token" not in sent


def test_speculation_totals_only_are_shown_as_totals_never_as_runs():
    with FaultServer("totals") as server:
        engine, handle = start(server.base_url)
        events = list(handle)
    steps, done = events[:-1], events[-1]
    assert all(not s.tokens and s.accepted == 0 for s in steps)
    assert (done.stats.steps, done.stats.drafted, done.stats.accepted) == (4, 12, 3)
    assert engine.note == NOTES[TOTALS]
