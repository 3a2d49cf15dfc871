"""The TUI loads what the user consented to for this run: `--allow-pickle` reaches the model
load in the chat's background worker, and without it the chat says which flag would load it."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.app.tui.app import SpecchatApp
from specchat.app.tui.widgets.status_bar import StatusBar
from specchat.options import CHAT, RunConfig, resolve

from .conftest import wait_until

pytestmark = pytest.mark.anyio

SIZE = (110, 34)


@pytest.fixture(scope="module")
def pickled_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama in Hugging Face layout whose weights are a (harmless) pickle."""
    import torch

    from tests.tiny_models import tiny_model, tiny_tokenizer

    folder = tmp_path_factory.mktemp("consent") / "pickled-llama"
    model = tiny_model(dtype=torch.float32)
    model.config.save_pretrained(folder)
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    tiny_tokenizer().save_pretrained(folder)
    return folder


def consenting_app(folder: Path, allow_pickle: bool) -> SpecchatApp:
    settings = RunConfig(model=str(folder), backend="hf", max_tokens=4)
    config = resolve(settings, {"allow_pickle": allow_pickle}, CHAT)
    return SpecchatApp(settings=settings, config=config, save_settings_file=False)


def errors(app: SpecchatApp) -> list[str]:
    return [n.message for n in app._notifications if n.severity == "error"]


def status_of(app: SpecchatApp) -> str:
    return str(app.screen.query_one(StatusBar).render())


async def test_pickle_weights_load_in_the_chat_only_with_allow_pickle(pickled_dir: Path):
    app = consenting_app(pickled_dir, allow_pickle=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: errors(app))
        assert any("--allow-pickle" in e for e in errors(app)), errors(app)
        assert app.session.engine is None
        assert "model not loaded" in status_of(app)

    app = consenting_app(pickled_dir, allow_pickle=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.session.engine is not None)
        await pilot.pause()
        assert "pickled-llama" in status_of(app) and not errors(app)


class ParkedLoad:
    """Holds the chat's model load (the real one, on the model thread) until `release`, so a
    test can type while the model loads however fast the machine loads it; `fail` makes the
    load end in that error instead."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: str | None = None) -> None:
        import threading

        from specchat.app.session import ChatSession
        from specchat.errors import SpecchatError

        self.started, self._go = threading.Event(), threading.Event()
        original = ChatSession.load

        def load(session, progress):
            self.started.set()
            self._go.wait(120)
            if fail is not None:
                raise SpecchatError(fail)
            return original(session, progress)

        monkeypatch.setattr(ChatSession, "load", load)

    def release(self) -> None:
        self._go.set()


def bundled_app() -> SpecchatApp:
    settings = RunConfig(backend="llama", threads=1, max_tokens=8, decoder="greedy")
    return SpecchatApp(settings=settings, save_settings_file=False)


async def enter_while_loading(pilot, parked: ParkedLoad, question: str):
    """Type `question` and press Enter while the load is parked; the prompt, after."""
    await wait_until(pilot, parked.started.is_set)
    prompt = pilot.app.screen.query_one("#prompt")
    prompt.insert(question)
    await pilot.press("enter")
    await pilot.pause()
    return prompt


async def test_a_question_sent_while_the_model_loads_is_answered_once_it_has(monkeypatch):
    from specchat.app.tui.widgets.message import AssistantMessage, UserMessage

    parked = ParkedLoad(monkeypatch)
    app = bundled_app()
    async with app.run_test(size=SIZE) as pilot:
        prompt = await enter_while_loading(pilot, parked, "Name a colour.")
        assert prompt.text == "" and "sent once the model is ready" in status_of(app)
        assert not app.screen.query(UserMessage)
        parked.release()
        history = app.session.history

        def stored() -> list:
            chats = history.list_chats()
            return history.messages(chats[0].id) if chats else []

        await wait_until(pilot, lambda: len(stored()) == 2)  # the answer, whole and kept
        (question,) = app.screen.query(UserMessage)
        assert "Name a colour." in str(question.text) and app.screen.query(AssistantMessage)
        assert len(history.list_chats()) == 1
        stored = stored()
        assert [m.role for m in stored] == ["user", "assistant"]
        assert stored[0].content == "Name a colour." and stored[1].content.strip()


async def test_a_question_waiting_for_a_model_that_fails_to_load_stays_in_the_prompt(monkeypatch):
    parked = ParkedLoad(monkeypatch, fail="no such model")
    app = bundled_app()
    async with app.run_test(size=SIZE) as pilot:
        prompt = await enter_while_loading(pilot, parked, "Name a colour.")
        assert prompt.text == ""
        parked.release()
        await wait_until(pilot, lambda: errors(app))
        await pilot.pause()
        assert prompt.text == "Name a colour."
        assert "model not loaded: no such model" in status_of(app)
        await pilot.press("enter")  # nothing can answer it: it stays, and the chat says why
        await pilot.pause()
        assert prompt.text == "Name a colour."
        assert any("no model to answer" in e for e in errors(app)), errors(app)
        assert not app.session.history.list_chats()
