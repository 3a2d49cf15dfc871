"""F9 switches the chat's model: the picker lists what `specchat models` lists (here an LM Studio
folder of real GGUFs beside the bundled model), the chosen one loads in the background, the status
line names it and the next answer runs on it; one that will not load leaves the old model in use."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from textual.widgets import OptionList

from specchat.app.tui.app import SpecchatApp
from specchat.app.tui.screens.models import ModelPickerScreen
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.app.tui.widgets.status_bar import StatusBar
from specchat.bundled import bundled_gguf
from specchat.options import RunConfig

from .conftest import wait_until

pytestmark = pytest.mark.anyio
SIZE = (120, 36)
OTHER = "Pub/Smol-GGUF/other-q4_1.gguf"
BROKEN = "Pub/Broken-GGUF/broken.gguf"


@pytest.fixture
def lm_studio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "lmstudio"
    (root / OTHER).parent.mkdir(parents=True)
    (root / OTHER).symlink_to(bundled_gguf())
    (root / BROKEN).parent.mkdir(parents=True)
    (root / BROKEN).write_bytes(b"GGUF" + b"\0" * 64)
    monkeypatch.setenv("LMSTUDIO_MODELS", str(root))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-ollama"))
    return root


async def pick(pilot, name: str) -> None:
    """F9 once the model is ready, then Enter on `name` in the picker."""
    await wait_until(pilot, lambda: pilot.app.session.ready)
    await pilot.press("f9")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, ModelPickerScreen))
    options = pilot.app.screen.query_one(OptionList)
    ids = [options.get_option_at_index(i).id for i in range(options.option_count)]
    assert name in ids and "smollm2" in ids, ids
    facts = str(options.get_option_at_index(ids.index("smollm2")).prompt)
    assert "Q4_1" in facts and "MiB" in facts and "runs on" in facts, facts
    options.highlighted = ids.index(name)
    await pilot.press("enter")


def status_of(app) -> str:
    return str(app.screen.query_one(StatusBar).render())


def chat_on(backend) -> SpecchatApp:
    settings = RunConfig(max_tokens=6, decoder="greedy", backend="llama", threads=1)
    return SpecchatApp(settings=settings, backend=backend, save_settings_file=False)


@pytest.mark.slow
async def test_f9_loads_another_model_and_the_next_answer_runs_on_it(backend, lm_studio):
    app = chat_on(backend)
    async with app.run_test(size=SIZE) as pilot:
        await pick(pilot, OTHER)
        await wait_until(pilot, lambda: app.session.backend is not backend, limit=300)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session.backend.model_name == OTHER
        assert OTHER in status_of(app)
        app.screen.query_one(PromptInput).insert("Say hi.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(app.screen.messages) == 2 and not app.session.busy)
        assert app.screen.messages[-1].content and app.screen.messages[-1].role == "assistant"
        assert backend.n_ctx  # the model the chat had (not its own) was left open


@pytest.mark.slow
async def test_a_model_that_will_not_load_leaves_the_old_one_in_use(backend, lm_studio):
    app = chat_on(backend)
    async with app.run_test(size=SIZE) as pilot:
        await pick(pilot, BROKEN)
        await wait_until(pilot, lambda: any("broken.gguf" in n.message for n in app._notifications))
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session.backend is backend and app.session.ready
        assert "loading" not in status_of(app) and backend.model_name in status_of(app)


@pytest.mark.slow
async def test_a_model_that_crashes_llama_cpp_leaves_the_chat_running(
    backend, lm_studio, monkeypatch
):
    """A file whose opening aborts llama.cpp (a real SIGABRT in the child that opens it first):
    one line, and the chat, its model and its answers go on."""
    crashing = lm_studio / "Pub/Crash-GGUF/crashing.gguf"
    crashing.parent.mkdir(parents=True)
    crashing.write_bytes(bundled_gguf().read_bytes())  # a file of its own, never opened before
    monkeypatch.setenv("SPECCHAT_TEST_ABORT_OPENING", crashing.name)
    app = chat_on(backend)
    async with app.run_test(size=SIZE) as pilot:
        await pick(pilot, "Pub/Crash-GGUF/crashing.gguf")
        await wait_until(pilot, lambda: any("crashed" in n.message for n in app._notifications))
        await app.workers.wait_for_complete()
        await pilot.pause()
        note = next(n.message for n in app._notifications if "crashed" in n.message)
        assert "crashing.gguf crashed llama.cpp while it was opened (signal 6" in note
        assert app.session.backend is backend and app.session.ready
        app.screen.query_one(PromptInput).insert("Say hi.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(app.screen.messages) == 2 and not app.session.busy)
        assert app.screen.messages[-1].content


async def test_f9_twice_opens_one_picker_and_esc_keeps_the_model(backend, lm_studio, monkeypatch):
    """A second F9 while the list is read (or over the picker) opens no second picker; Esc
    closes it and the chat's model stays."""
    app = chat_on(backend)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.session.ready)
        listed = threading.Event()  # the list is read only once the second F9 was pressed
        read = app.session.model_choices
        monkeypatch.setattr(app.session, "model_choices", lambda: listed.wait(30) and read())
        await pilot.press("f9", "f9")
        listed.set()
        await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
        await app.workers.wait_for_complete()
        await pilot.press("f9")
        await pilot.pause(0.2)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert sum(isinstance(s, ModelPickerScreen) for s in app.screen_stack) == 1
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, ModelPickerScreen))
        assert app.session.backend is backend and backend.model_name in status_of(app)
