"""Decoder settings, themes and the chat list, driven through the pilot (the race: test_race)."""

from __future__ import annotations

import pytest

from specchat.app.tui.app import SpecchatApp
from specchat.decoding.registry import DECODERS
from specchat.options import RunConfig
from specchat.settings import load_settings

pytestmark = pytest.mark.anyio
SIZE = (120, 36)


async def test_decoder_settings_dialog_saves_params(backend):
    app = SpecchatApp(settings=RunConfig(), backend=backend)
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
    app = SpecchatApp(settings=RunConfig(), backend=backend)
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
    app = SpecchatApp(settings=RunConfig(), backend=backend, history=store, chat_id=chat)
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
    app = SpecchatApp(settings=RunConfig(), backend=backend, history=store, chat_id=chat)
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
        await pilot.press("y")  # deleting asks first
        await pilot.pause()
        assert store.list_chats() == []
        assert app.screen_stack[0].messages == []
        await pilot.press("escape")


async def test_command_palette_lists_actions(backend):
    app = SpecchatApp(settings=RunConfig(), backend=backend)
    async with app.run_test(size=SIZE):
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for wanted in ("Stop the answer", "Regenerate the last answer", "Race decoders"):
            assert wanted in titles
        for info in DECODERS.values():
            assert f"Decoder: {info.name}" in titles


def _cut_labels(screen) -> list[str]:
    """The labels on a screen whose text runs past the box they sit in: a user reads them cut."""
    from textual.widgets import Label

    cut = []
    for label in screen.query(Label):
        box = label.parent.content_region
        if label.region.right > box.right or label.region.x < box.x:
            cut.append(str(label.render()))
    return cut


@pytest.mark.parametrize("size", [(120, 36), (80, 24)])
async def test_every_dialog_shows_its_whole_text(backend, size, tmp_path):
    """Each dialog the chat opens, at a common and a small terminal: no line cut at the box's
    edge (the system prompt's note was cut after "no" at 120 columns)."""
    from specchat.app.tui.screens.confirm import ConfirmScreen
    from specchat.app.tui.screens.decoder_settings import DecoderSettingsScreen
    from specchat.app.tui.screens.file_picker import FilePickerScreen
    from specchat.app.tui.screens.help import HelpScreen
    from specchat.app.tui.widgets.message import AssistantMessage

    from .conftest import wait_until

    deep = tmp_path / "projects" / "a-project-with-a-long-name" / "and-a-folder-inside-it"
    deep.mkdir(parents=True)
    app = SpecchatApp(settings=RunConfig(), backend=backend)
    async with app.run_test(size=size) as pilot:
        chat = app.screen
        title = "Write a long story about the sea, its tides and the boats that cross it"
        opens = [
            chat.action_system_prompt,
            chat.action_default_system_prompt,
            chat.action_attach_file,
            lambda: app.push_screen(FilePickerScreen(deep)),  # a project folder's long path
            chat.action_search,
            chat.action_race,
            chat.action_chats,
            lambda: app.push_screen(HelpScreen()),
            lambda: app.push_screen(ConfirmScreen(f"Delete “{title}” and its 12 messages?")),
        ]
        opens += [
            lambda name=name: app.push_screen(DecoderSettingsScreen(name)) for name in DECODERS
        ]
        for open_dialog in opens:
            open_dialog()
            await pilot.pause(0.2)
            assert app.screen is not chat
            assert _cut_labels(app.screen) == [], type(app.screen).__name__
            app.pop_screen()
            await pilot.pause()
        # an answer's drafts (d on it)
        chat.query_one("#prompt").insert("Name a colour.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: not app.session.busy and chat.query(AssistantMessage))
        await pilot.press("shift+tab", "d")
        await wait_until(pilot, lambda: app.screen is not chat)
        assert _cut_labels(app.screen) == [], type(app.screen).__name__
