"""SVG snapshots of the main screens with fixed content: a stored chat (no generation running, so
every figure comes from its stored stats) and a race fed with scripted events.

The footer, the help screen and the race's decoder list show the registry: a new decoder changes
these snapshots on purpose (refresh with --snapshot-update and look at the diff)."""

from __future__ import annotations

from specchat.app.tui.app import SpecchatApp
from specchat.app.tui.messages import RaceDone, RaceFinished, RaceStarted, RaceStep
from specchat.app.tui.screens.decoder_settings import DecoderSettingsScreen
from specchat.app.tui.screens.race import RaceScreen
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.decoding.events import DoneEvent, StepEvent
from specchat.settings import Settings

SIZE = (100, 32)


def chat_app(backend, fixed_chat, **settings) -> SpecchatApp:
    store, chat = fixed_chat
    return SpecchatApp(
        settings=Settings(**settings),
        backend=backend,
        history=store,
        chat_id=chat,
        save_settings_file=False,
    )


async def still_cursor(pilot) -> None:
    for area in pilot.app.screen.query(PromptInput):
        area.cursor_blink = False
    await pilot.pause()


def test_chat_coloured_runs(snap_compare, backend, fixed_chat):
    assert snap_compare(chat_app(backend, fixed_chat), terminal_size=SIZE, run_before=still_cursor)


def test_chat_markdown_when_colours_off(snap_compare, backend, fixed_chat):
    assert snap_compare(
        chat_app(backend, fixed_chat),
        press=["ctrl+t"],
        terminal_size=SIZE,
        run_before=still_cursor,
    )


def test_chat_light_theme(snap_compare, backend, fixed_chat):
    assert snap_compare(
        chat_app(backend, fixed_chat, theme="specchat-light"),
        terminal_size=SIZE,
        run_before=still_cursor,
    )


def test_help_screen(snap_compare, backend, fixed_chat):
    assert snap_compare(
        chat_app(backend, fixed_chat), press=["f1"], terminal_size=SIZE, run_before=still_cursor
    )


def test_decoder_settings(snap_compare, backend, fixed_chat):
    async def open_dialog(pilot) -> None:
        await still_cursor(pilot)
        pilot.app.push_screen(DecoderSettingsScreen("beam"))
        await pilot.pause()

    assert snap_compare(chat_app(backend, fixed_chat), terminal_size=SIZE, run_before=open_dialog)


SCRIPT = {
    "greedy": [((1,), "One"), ((2,), " two"), ((3,), " three"), ((4,), " four"), ((5,), ".")],
    "pld": [((1,), "One"), ((2, 3, 4), " two three four"), ((5,), ".")],
}


def scripted_done(name: str, tps: float) -> DoneEvent:
    steps = SCRIPT[name]
    tokens = tuple(t for ids, _ in steps for t in ids)
    drafted, accepted = (0, 0) if name == "greedy" else (6, 2)
    stats = {
        "generated_tokens": len(tokens),
        "steps": len(steps),
        "drafted": drafted,
        "accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "tokens_per_step": len(tokens) / len(steps),
        "tokens_per_second": tps,
        "decode_seconds": len(tokens) / tps,
    }
    return DoneEvent("eos", (), tokens, "".join(text for _, text in steps), stats)


def test_race_summary(snap_compare, backend, fixed_chat):
    async def scripted_race(pilot) -> None:
        app = pilot.app
        app.push_screen(RaceScreen("Count to five.", ["greedy", "pld"], 24))
        await pilot.pause()
        screen = app.screen
        await screen.make_panes(["greedy", "pld"])
        for pane, (name, tps) in enumerate([("greedy", 80.0), ("pld", 120.0)]):
            screen.post_message(RaceStarted(pane))
            for ids, text in SCRIPT[name]:
                seconds = len(ids) / tps
                screen.post_message(RaceStep(pane, StepEvent(ids, text, 0, 0, name, seconds)))
            screen.post_message(RaceDone(pane, scripted_done(name, tps)))
        screen.post_message(RaceFinished())
        await pilot.pause()
        screen.query_one("#race-prompt").cursor_blink = False
        await pilot.pause()

    assert snap_compare(
        chat_app(backend, fixed_chat), terminal_size=(110, 32), run_before=scripted_race
    )
