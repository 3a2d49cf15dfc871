"""The TUI under faults a user causes: a resize while an answer streams, an answer of thousands of
tokens, a prompt past the context window, an empty prompt, a hundred Esc-and-ask-again cycles.
The app keeps running and says what happened; nothing shown differs from what is stored."""

from __future__ import annotations

import threading

import pytest

from specchat.app.tui.app import SpecchatApp
from specchat.app.tui.widgets.message import AssistantMessage, UserMessage
from specchat.settings import Settings

from .conftest import StepGate, wait_until

pytestmark = pytest.mark.anyio

SIZE = (110, 34)


async def type_and_send(pilot, text: str) -> None:
    pilot.app.screen.query_one("#prompt").insert(text)
    await pilot.press("enter")


def shown_equals_stored(app) -> None:
    """The last answer on screen is the stored one."""
    widget = app.screen.query(AssistantMessage).last()
    assert widget.text == app.screen.messages[-1].content


async def test_a_resize_while_streaming_loses_nothing(backend):
    app = SpecchatApp(settings=Settings(max_tokens=60), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        with StepGate(app.session.engine, after=3) as gate:
            await type_and_send(pilot, "Tell me a story about a lighthouse keeper.")
            await wait_until(pilot, gate.held.is_set)
            await pilot.resize_terminal(48, 16)  # narrower than the status bar's line
            await pilot.pause()
            gate.release()
            for size in ((140, 44), (60, 20), SIZE):  # more resizes while the answer streams
                await pilot.resize_terminal(*size)
                await pilot.pause()
            await app.workers.wait_for_complete()
            await wait_until(pilot, lambda: not app.session.busy)
        assert app.screen.messages[-1].finish_reason in ("eos", "max_tokens")
        shown_equals_stored(app)


async def test_an_answer_of_thousands_of_tokens_keeps_the_ui_responsive(char_ngram_model):
    """The numpy model (a token a byte) with its end-of-text token ignored talks on for ever:
    keys typed while it streams its thousands of tokens reach the input box before it ends, and
    Esc stops it."""
    from tests.numpy_backend import NumpyBackend

    endless = NumpyBackend(char_ngram_model, n_ctx=100_000)
    endless.eos_ids = frozenset()
    app = SpecchatApp(settings=Settings(max_tokens=90_000), backend=endless)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "Row, row, row your boat. Merrily, merrily,")
        chat = app.screen
        await wait_until(pilot, lambda: chat.figures.stats.generated_tokens >= 1000)
        await pilot.press(*"still")
        prompt = chat.query_one("#prompt")
        await wait_until(pilot, lambda: prompt.text == "still")
        assert app.session.busy, "the keys were handled while the answer streamed"
        await wait_until(pilot, lambda: chat.figures.stats.generated_tokens >= 3000)
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.session.busy)
        await pilot.pause()
        answer = chat.messages[-1]
        assert answer.finish_reason == "cancelled" and answer.stats.generated_tokens >= 3000
        shown_equals_stored(app)


async def test_a_prompt_past_the_context_window_is_a_notification_and_the_app_goes_on(backend):
    app = SpecchatApp(settings=Settings(max_tokens=8), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "word " * (backend.n_ctx + 10))
        await wait_until(pilot, lambda: not app.session.busy)
        await pilot.pause()
        assert any("context window" in n.message for n in app._notifications)
        await type_and_send(pilot, "Say hi.")
        await app.workers.wait_for_complete()
        await wait_until(pilot, lambda: not app.session.busy)
        await pilot.pause()
        assert app.screen.messages[-1].role == "assistant" and app.screen.messages[-1].content
        shown_equals_stored(app)


async def test_an_empty_prompt_sends_nothing(backend):
    app = SpecchatApp(settings=Settings(max_tokens=8), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "   ")
        await pilot.press("enter")
        await pilot.pause()
        assert not app.session.busy and app.screen.messages == []
        assert not app.screen.query(UserMessage)


async def test_a_hundred_escapes_and_new_questions_leave_no_thread_behind(backend):
    app = SpecchatApp(settings=Settings(max_tokens=400), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.screen
        before: set[threading.Thread] | None = None
        for cycle in range(101):
            with StepGate(app.session.engine, after=1) as gate:
                await type_and_send(pilot, f"Tell me a long story, number {cycle}.")
                await wait_until(pilot, gate.held.is_set)
                await pilot.press("escape")
                gate.release()
                await app.workers.wait_for_complete()
                await wait_until(pilot, lambda: not app.session.busy)
            assert chat.messages[-1].finish_reason == "cancelled"
            if cycle == 0:  # the first answer starts what lives as long as the app
                before = set(threading.enumerate())
        await wait_until(pilot, lambda: set(threading.enumerate()) <= before)
        assert len(chat.messages) == 2 * 101
