"""The chat on a remote server, as the settings file names it: the real TUI against a real
llama-server (coloured runs from its own speculation) and against a server that reports nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.app.tui.app import SpecchatApp
from specchat.app.tui.widgets.status_bar import StatusBar
from specchat.options import RunConfig
from tests.servers import REPEATING_PROMPT, FaultServer, server_metrics

pytestmark = pytest.mark.anyio

SIZE = (110, 34)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    return tmp_path


def remote_app(base_url: str) -> SpecchatApp:
    settings = RunConfig(backend="openai", base_url=base_url, max_tokens=96)
    return SpecchatApp(settings=settings, save_settings_file=False)


async def ask(app: SpecchatApp, pilot, text: str) -> None:
    """Wait for the connection, send `text`, wait for the whole answer."""
    while not app.session.ready:
        await pilot.pause(0.05)
    app.screen.query_one("#prompt").insert(text)
    await pilot.press("enter")
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


def status_of(app) -> str:
    return str(app.screen.query_one(StatusBar).render())


@pytest.mark.slow
async def test_the_chat_colours_the_servers_own_runs(llama_server_ngram):
    app = remote_app(llama_server_ngram.base_url)
    async with app.run_test(size=SIZE) as pilot:
        before = server_metrics(llama_server_ngram)
        await ask(app, pilot, REPEATING_PROMPT)
        after = server_metrics(llama_server_ngram)
        answer = app.screen.messages[-1]
        assert app.session.decoder_name == "server" and answer.decoder == "server"
        assert answer.finish_reason in ("eos", "max_tokens") and answer.content.strip()
        key = "spec_decode_num_accepted_tokens_total"
        accepted = after[key] - before[key]
        # every coloured span is a run of accepted drafts plus the server's own token, and they
        # add up to what the server counted
        assert answer.runs and accepted > 0
        assert sum(n - 1 for _, _, n, _ in answer.runs) <= accepted == answer.stats.accepted
        status = status_of(app)
        assert "server" in status and "runs as the server reports them" in status
        assert "acceptance" in status and "openai" in status


async def test_a_server_without_figures_shows_plain_text_and_says_so():
    with FaultServer("plain") as server:
        app = remote_app(server.base_url)
        async with app.run_test(size=SIZE) as pilot:
            await ask(app, pilot, "Say hello to the world.")
            answer = app.screen.messages[-1]
            assert answer.content == "Hello, world" and answer.runs == []
            assert answer.stats.generated_tokens == 7  # the server's usage, nothing invented
            assert "the server reports no speculation figures" in status_of(app)


async def test_an_answer_broken_off_is_kept_with_the_reason():
    with FaultServer("drop") as server:
        app = remote_app(server.base_url)
        async with app.run_test(size=SIZE) as pilot:
            await ask(app, pilot, "Say hello to the world.")
            answer = app.screen.messages[-1]
            assert answer.content == "Hello, world" and answer.finish_reason == "error"
            assert "server error" in status_of(app)
            assert any("dropped the stream" in n.message for n in app._notifications)
