"""The TUI under faults a user causes: a resize while an answer streams, an answer of thousands of
tokens, a prompt past the context window, an empty prompt.
The app keeps running and says what happened; nothing shown differs from what is stored."""

from __future__ import annotations

import pytest

from specchat.app.tui.app import SpecchatApp
from specchat.app.tui.widgets.message import AssistantMessage, UserMessage
from specchat.options import RunConfig

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
    app = SpecchatApp(settings=RunConfig(max_tokens=60), backend=backend)
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
    """The numpy model (a token a byte, thousands a second) with its end-of-text token ignored
    streams 5,000 tokens: keys typed during it reach the input box, and everything streamed is
    shown and stored. (Whether the keys land before the last token depends on the machine, so
    it is not asserted.)"""
    from tests.numpy_backend import NumpyBackend

    endless = NumpyBackend(char_ngram_model, n_ctx=10_000)
    endless.eos_ids = frozenset()
    # the model loops: the chat would end its answer as repeating (the next test)
    app = SpecchatApp(settings=RunConfig(max_tokens=5_000, end_loops=False), backend=endless)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "Row, row, row your boat. Merrily, merrily,")
        chat = app.screen
        await wait_until(pilot, lambda: chat.figures.stats.generated_tokens >= 1000)
        await pilot.press(*"still")
        prompt = chat.query_one("#prompt")
        await wait_until(pilot, lambda: prompt.text == "still")
        await wait_until(pilot, lambda: not app.session.busy)
        await pilot.pause()
        answer = chat.messages[-1]
        assert answer.finish_reason == "max_tokens" and answer.stats.generated_tokens == 5_000
        shown_equals_stored(app)


async def test_an_answer_that_loops_ends_as_repeating_and_is_kept(char_ngram_model):
    """The same endless model in the chat as it opens (loops ended by default): the answer ends
    long before its 5,000 tokens, as "repeating", and what was streamed is shown and stored."""
    from tests.numpy_backend import NumpyBackend

    endless = NumpyBackend(char_ngram_model, n_ctx=10_000)
    endless.eos_ids = frozenset()
    app = SpecchatApp(settings=RunConfig(max_tokens=5_000), backend=endless)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "Row, row, row your boat. Merrily, merrily,")
        await wait_until(pilot, lambda: not app.session.busy)
        await pilot.pause()
        answer = app.screen.messages[-1]
        assert answer.finish_reason == "repeating"
        assert 0 < answer.stats.generated_tokens < 1_000
        shown_equals_stored(app)


async def test_a_prompt_past_the_context_window_is_a_notification_and_the_app_goes_on(backend):
    app = SpecchatApp(settings=RunConfig(max_tokens=8), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        too_long = "word " * (backend.n_ctx + 10)
        await type_and_send(pilot, too_long)
        await wait_until(pilot, lambda: not app.session.busy)
        await pilot.pause()
        assert any("context window" in n.message for n in app._notifications)
        # the question is taken back into the input: it would fail every later prompt
        prompt = app.screen.query_one("#prompt")
        assert prompt.text == too_long.strip() and app.screen.messages == []
        assert not app.screen.query(UserMessage)
        prompt.clear()
        await type_and_send(pilot, "Say hi.")
        await app.workers.wait_for_complete()
        await wait_until(pilot, lambda: not app.session.busy)
        await pilot.pause()
        assert [m.role for m in app.screen.messages] == ["user", "assistant"]
        assert app.screen.messages[-1].content
        shown_equals_stored(app)
        chat_id = app.screen.chat_id
        stored = app.session.history.messages(chat_id)
        assert [m.content for m in stored] == [m.content for m in app.screen.messages]


async def test_an_empty_prompt_sends_nothing(backend):
    app = SpecchatApp(settings=RunConfig(max_tokens=8), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "   ")
        await pilot.press("enter")
        await pilot.pause()
        assert not app.session.busy and app.screen.messages == []
        assert not app.screen.query(UserMessage)
