"""A chat longer than the model's context window goes on: the oldest turns are left out of the
prompt and the transcript says so; a single message too long for the window is refused with a
clear notice, never an error mid-answer. The bundled model with a 256-token window."""

from __future__ import annotations

import pytest

from specchat.app.tui.app import SpecchatApp
from specchat.app.tui.widgets.message import AssistantMessage
from specchat.history import HistoryStore, StoredMessage
from specchat.options import RunConfig

from .conftest import wait_until

pytestmark = pytest.mark.anyio
SIZE = (110, 34)
N_CTX = 256


@pytest.fixture(scope="module")
def small_window():
    """The bundled model with a small context window, so a short chat outgrows it."""
    from specchat.models import LoadOptions, load_model

    loaded = load_model(None, LoadOptions(threads=1, n_ctx=N_CTX))
    yield loaded
    loaded.close()


@pytest.fixture
def long_chat(private_dirs) -> tuple[HistoryStore, int]:
    """Twelve exchanges of some twenty words each: far more than 256 tokens."""
    store = HistoryStore(private_dirs / "data" / "long.sqlite3")
    chat = store.new_chat("A long chat")
    for turn in range(12):
        store.add_message(
            chat, StoredMessage("user", f"Question {turn}: tell me one more fact about the sea.")
        )
        store.add_message(
            chat,
            StoredMessage(
                "assistant", f"Fact {turn}: the sea covers most of the planet and is deep and wide."
            ),
        )
    return store, chat


def transcript_text(app) -> str:
    return " ".join(str(w.render()) for w in app.screen.query(".notice"))


async def test_a_chat_longer_than_the_window_leaves_out_its_oldest_turns(small_window, long_chat):
    store, chat = long_chat
    small_window.rollback(0)
    app = SpecchatApp(
        settings=RunConfig(max_tokens=16), backend=small_window, history=store, chat_id=chat
    )
    async with app.run_test(size=SIZE) as pilot:
        app.screen.query_one("#prompt").insert("And one last fact, please.")
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        notice = transcript_text(app)
        assert "earliest messages were left out" in notice and f"{N_CTX}-token" in notice
        assert any("left out" in n.message for n in app._notifications)
        answer = app.screen.messages[-1]
        assert answer.role == "assistant" and answer.content.strip()
        assert answer.finish_reason in ("eos", "max_tokens")
        assert not any(n.severity == "error" for n in app._notifications)
        # the whole chat stays in the store and on screen; only the prompt was shorter
        assert len(store.messages(chat)) == 26
        assert len(app.screen.query(AssistantMessage)) == 13


async def test_a_message_too_long_for_the_window_is_refused_clearly(small_window):
    small_window.rollback(0)
    app = SpecchatApp(settings=RunConfig(max_tokens=16), backend=small_window)
    async with app.run_test(size=SIZE) as pilot:
        app.screen.query_one("#prompt").insert("word " * 400)
        await pilot.press("enter")
        await wait_until(pilot, lambda: any("shorten it" in n.message for n in app._notifications))
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert not app.session.busy
        # no answer, no crash: the question is taken back into the input to be shortened
        assert app.screen.messages == []
        prompt = app.screen.query_one("#prompt")
        assert prompt.text.split() == ["word"] * 400
        prompt.clear()
        prompt.insert("Hi")
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        # the next, short question is answered
        assert app.screen.messages[-1].role == "assistant"
