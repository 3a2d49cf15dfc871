"""Race, decoder settings, themes and the chat list, driven through the pilot."""

from __future__ import annotations

import pytest

from specchat.app.tui.app import SpecchatApp
from specchat.app.tui.screens.race import RaceScreen
from specchat.decoding.registry import DECODERS
from specchat.settings import Settings, load_settings

from .conftest import wait_until

pytestmark = pytest.mark.anyio
SIZE = (120, 36)


def race_choice() -> list[str]:
    """greedy plus a speculative greedy-family decoder when the registry has one."""
    others = [i.name for i in DECODERS.values() if i.greedy_family and i.name != "greedy"]
    return ["greedy", others[0] if others else "sample"]


async def test_race_runs_sequentially_and_summarises(backend):
    names = race_choice()
    # a speculative decoder drafts whatever this machine's pass costs say
    forced = {names[1]: {"fixed_draft": 4}} if DECODERS[names[1]].speculative else {}
    app = SpecchatApp(settings=Settings(decoders=forced), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        app.push_screen(RaceScreen("Repeat: one two three four. one two three four.", names, 24))
        await pilot.pause()
        screen = app.screen
        assert "one after another" in str(screen.query_one("#race-note").render())
        await pilot.press("enter")
        await pilot.pause()
        await wait_until(pilot, lambda: not screen.running)
        await pilot.pause()
        table = screen.query_one("#race-summary")
        assert table.row_count == 2
        rows = [table.get_row_at(i) for i in range(2)]
        assert [r[0] for r in rows] == names
        assert rows[0][2] == "1.00×"
        if DECODERS[names[1]].greedy_family:
            assert rows[1][7] == "identical ✓"
        if DECODERS[names[1]].speculative:
            assert screen.panes[1].done.stats.accepted > 0  # not identical by plain steps alone
        assert not app.session.busy and not app.session.racing
        await pilot.press("escape")
        assert not isinstance(app.screen, RaceScreen)


async def test_decoder_settings_dialog_saves_params(backend):
    app = SpecchatApp(settings=Settings(), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        from specchat.app.tui.screens.decoder_settings import DecoderSettingsScreen

        app.push_screen(DecoderSettingsScreen("beam"))
        await pilot.pause()
        app.screen.query_one("#p-num_beams").value = "2"
        app.screen.query_one("#s-seed").value = "7"
        await pilot.click("#ds-save")
        await pilot.pause()
        assert app.session.settings.decoders["beam"]["num_beams"] == 2
        assert app.session.settings.seed == 7
        assert app.session.decoder_params("beam")["num_beams"] == 2
    saved, error = load_settings()
    assert error is None and saved.decoders["beam"]["num_beams"] == 2 and saved.seed == 7


async def test_decoder_settings_rejects_bad_value(backend):
    app = SpecchatApp(settings=Settings(), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        from specchat.app.tui.screens.decoder_settings import DecoderSettingsScreen

        app.push_screen(DecoderSettingsScreen("beam"))
        await pilot.pause()
        app.screen.query_one("#p-num_beams").value = "lots"
        await pilot.click("#ds-save")
        await pilot.pause()
        assert isinstance(app.screen, DecoderSettingsScreen)
        assert any("num_beams must be an int" in n.message for n in app._notifications)


async def test_theme_switch_persists_and_recolours(backend, fixed_chat):
    store, chat = fixed_chat
    app = SpecchatApp(settings=Settings(), backend=backend, history=store, chat_id=chat)
    async with app.run_test(size=SIZE) as pilot:
        app.theme = "specchat-light"
        await pilot.pause()
        from specchat.themes.palette import LIGHT

        assert app.palette == LIGHT
        message = app.screen.query("AssistantMessage").first()
        assert message.palette == LIGHT
    saved, _ = load_settings()
    assert saved.theme == "specchat-light"


async def test_chat_list_rename_delete_new(backend, fixed_chat):
    store, chat = fixed_chat
    app = SpecchatApp(settings=Settings(), backend=backend, history=store, chat_id=chat)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+l")
        await pilot.pause()
        await pilot.press("r")
        await pilot.pause()
        app.screen.query_one("#rename").value = "Cats"
        await pilot.press("enter")
        await pilot.pause()
        assert store.chat_title(chat) == "Cats"
        await pilot.press("d")
        await pilot.pause()
        assert store.list_chats() == []
        assert app.screen_stack[0].messages == []
        await pilot.press("escape")


async def test_command_palette_lists_actions(backend):
    app = SpecchatApp(settings=Settings(), backend=backend)
    async with app.run_test(size=SIZE):
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for wanted in ("Stop the answer", "Regenerate the last answer", "Race decoders"):
            assert wanted in titles
        for info in DECODERS.values():
            assert f"Decoder: {info.name}" in titles
