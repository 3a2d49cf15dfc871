"""What a new user found wrong in the chat (issue 48), each driven as a person drives it: the
pilot pressing keys against the real bundled model."""

from __future__ import annotations

import threading

import pytest

from specchat.app.model_thread import MODEL_THREAD
from specchat.app.tui.app import SpecchatApp
from specchat.app.tui.screens.decoder_settings import DecoderSettingsScreen
from specchat.app.tui.widgets.legend import Legend
from specchat.app.tui.widgets.message import AssistantMessage, UserMessage
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.app.tui.widgets.status_bar import StatusBar
from specchat.decoding.registry import DECODERS
from specchat.history import HistoryStore, StoredMessage
from specchat.options import RunConfig
from specchat.settings import load_settings

from .conftest import StepGate, wait_until

pytestmark = pytest.mark.anyio
SIZE = (120, 36)
LONG_PROMPT = "Write a long story about a dragon who learns to bake bread. Use many details."


def status_of(app) -> str:
    return str(app.screen.query_one(StatusBar).render())


async def ask(pilot, text: str) -> None:
    pilot.app.screen.query_one(PromptInput).insert(text)
    await pilot.press("enter")


async def answered(pilot) -> None:
    app = pilot.app
    await wait_until(pilot, lambda: not app.screen.answering and not app.session.busy)
    await app.workers.wait_for_complete()
    await pilot.pause()


async def test_passes_stay_on_the_model_thread_after_a_switch_mid_answer(backend, monkeypatch):
    """The cause of answers 3-5x slower after F3 or F4 mid-answer: the switch occupied a second
    worker thread, the next answer ran there, and libgomp gave that thread an OpenMP pool of its
    own — with more OpenMP threads than cores, every pass sleeps at its barriers. Every pass must
    run on the one model thread, before, during and after any switch."""
    threads: list[str] = []
    evaluate = backend.evaluate

    def recording(block):
        threads.append(threading.current_thread().name)
        return evaluate(block)

    monkeypatch.setattr(backend, "evaluate", recording)
    app = SpecchatApp(settings=RunConfig(max_tokens=24, decoder="greedy"), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, "Name three colours.")
        await answered(pilot)
        for key in (DECODERS["sample"].key, DECODERS["beam"].key):
            with StepGate(app.session.engine, after=2) as gate:
                await ask(pilot, LONG_PROMPT)
                await wait_until(pilot, gate.held.is_set)
                await pilot.press(key)
                await wait_until(pilot, lambda: app.screen.figures.pending is not None)
                gate.release()
                await answered(pilot)
            await pilot.press(DECODERS["greedy"].key)
            await wait_until(pilot, lambda: app.session.decoder_name == "greedy")
            await pilot.press("ctrl+n")
            await ask(pilot, "Name three colours.")
            await answered(pilot)
    assert threads and {name.split("_")[0] for name in threads} == {MODEL_THREAD}, set(threads)


async def test_an_answer_switched_mid_stream_names_every_decoder(backend):
    app = SpecchatApp(settings=RunConfig(max_tokens=24, decoder="greedy"), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        with StepGate(app.session.engine, after=2) as gate:
            await ask(pilot, LONG_PROMPT)
            await wait_until(pilot, gate.held.is_set)
            await pilot.press(DECODERS["sample"].key)
            await wait_until(pilot, lambda: app.screen.figures.pending == "sample")
            gate.release()
            await answered(pilot)
        header = str(app.screen.query(AssistantMessage).last().query_one(".role").render())
        assert "greedy → sample" in header
        # the active decoder heads the line; the figures say they are the switched answer's
        head, figures = status_of(app).split("\n")[:2]
        assert head.split()[0] == "sample" and "by greedy → sample" in figures


async def test_status_line_names_the_active_decoder_not_the_opened_answers(backend, private_dirs):
    """A chat whose last answer ran beam on another runtime: the status line names the decoder
    that will answer next; the old figures say whose they are, and a key does not relabel them."""
    store = HistoryStore(private_dirs / "data" / "beam.sqlite3")
    chat = store.new_chat("An old beam answer")
    store.add_message(chat, StoredMessage("user", "Say hi."))
    store.add_message(chat, StoredMessage("assistant", "Hi!", "beam", "eos", params="num_beams=4"))
    app = SpecchatApp(
        settings=RunConfig(decoder="greedy"), backend=backend, history=store, chat_id=chat
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        head, figures = status_of(app).split("\n")[:2]
        assert head.split()[0] == "greedy" and "num_beams" not in head
        assert "by beam" in figures
        await pilot.press(DECODERS["pld"].key)
        await wait_until(pilot, lambda: app.session.decoder_name == "pld")
        await pilot.pause()
        head, figures = status_of(app).split("\n")[:2]
        assert head.split()[0] == "pld" and "by beam" in figures


async def test_typing_after_ctrl_n_reaches_the_prompt_when_a_message_had_the_focus(
    backend, fixed_chat
):
    store, chat = fixed_chat
    app = SpecchatApp(
        settings=RunConfig(max_tokens=8), backend=backend, history=store, chat_id=chat
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+up")
        assert not isinstance(app.focused, PromptInput)
        await pilot.press("ctrl+n")
        await pilot.press(*"hello", "enter")
        await wait_until(pilot, lambda: bool(app.screen.query(UserMessage)))
        assert str(app.screen.query(UserMessage).last().stored.content) == "hello"
        await answered(pilot)


async def test_ctrl_g_offers_no_temperature_for_a_decoder_that_never_samples(backend):
    app = SpecchatApp(settings=RunConfig(decoder="greedy"), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: isinstance(app.screen, DecoderSettingsScreen))
        await pilot.pause()
        assert not app.screen.query("#s-temperature")
        assert app.screen.query("#s-top_p")
        labels = [str(label.render()) for label in app.screen.query(".ds-label")]
        assert any(label.endswith("(shared by all decoders)") for label in labels)
        await pilot.click("#ds-save")
        await pilot.pause()
    saved, error = load_settings()
    assert error is None and "temperature" not in saved.decoders.get("greedy", {})


async def test_the_colours_off_hint_names_what_ctrl_t_will_show(backend):
    app = SpecchatApp(settings=RunConfig(), backend=backend, save_settings_file=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+f")  # colour by source
        await pilot.press("ctrl+t")  # colours off
        await pilot.pause()
        hint = str(app.screen.query_one(Legend).render())
        assert "where drafts came from" in hint and "tokens per step" not in hint
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert "from:" in str(app.screen.query_one(Legend).render())


async def test_ctrl_q_mid_answer_keeps_what_was_generated(backend, private_dirs):
    store = HistoryStore(private_dirs / "data" / "quit.sqlite3")
    app = SpecchatApp(
        settings=RunConfig(max_tokens=200, decoder="greedy"), backend=backend, history=store
    )
    async with app.run_test(size=SIZE) as pilot:
        with StepGate(app.session.engine, after=3) as gate:
            await ask(pilot, LONG_PROMPT)
            await wait_until(pilot, gate.held.is_set)
            # the worker goes on to its next step boundary a moment after Ctrl+Q stopped it
            threading.Timer(0.3, gate.release).start()
            await pilot.press("ctrl+q")
    store = HistoryStore(private_dirs / "data" / "quit.sqlite3")  # the app closed its own
    chat = store.list_chats()[0]
    last = store.messages(chat.id)[-1]
    store.close()
    assert last.role == "assistant" and last.finish_reason == "cancelled"
    assert last.content and last.stats.generated_tokens >= 3


async def test_an_answer_ends_before_the_pass_cost_slice_that_follows_it(
    backend, private_dirs, monkeypatch
):
    """A fresh install's first answers ended 0.2-0.35 s after their last token: a slice of a
    pass-cost sweep (`block_cost.py`) ran before the done event. The answer must show it ended,
    and be stored, while what follows it still holds the model; a question sent then is
    answered once that is over."""
    following, release = threading.Event(), threading.Event()
    keep_costs = backend.keep_costs

    def held(time_slice: bool = True) -> None:
        following.set()
        release.wait(60)
        keep_costs(time_slice)

    monkeypatch.setattr(backend, "keep_costs", held)
    store = HistoryStore(private_dirs / "data" / "slice.sqlite3")
    app = SpecchatApp(
        settings=RunConfig(max_tokens=12, decoder="greedy"), backend=backend, history=store
    )
    try:
        async with app.run_test(size=SIZE) as pilot:
            await ask(pilot, "Name three colours.")
            await wait_until(pilot, following.is_set)
            await wait_until(pilot, lambda: not app.screen.answering, limit=20)
            assert not app.session.busy and "tok/s" in status_of(app)
            chat = store.list_chats()[0]
            assert [m.role for m in store.messages(chat.id)] == ["user", "assistant"]
            await ask(pilot, "Name three animals.")
            release.set()
            await answered(pilot)
            assert [m.role for m in store.messages(chat.id)][-2:] == ["user", "assistant"]
            assert len(store.messages(chat.id)) == 4
    finally:
        release.set()
