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
