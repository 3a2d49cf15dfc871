"""SVG snapshots of the main screens with fixed content: a stored chat (no generation running, so
every figure comes from its stored stats) and a race fed with scripted runs, its replay stopped
at a virtual moment.

The footer, the help screen and the race's decoder list show the registry: a new decoder changes
these snapshots on purpose (refresh with --snapshot-update and look at the diff)."""

from __future__ import annotations

import pytest

from specchat.app.tui.messages import RaceDone, RaceFinished, RaceStarted
from specchat.app.tui.screens.decoder_settings import DecoderSettingsScreen
from specchat.app.tui.screens.race import RaceScreen
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.engine.events import DoneEvent, StepEvent
from specchat.engine.stats import GenerationStats
from specchat.evaluation.race import DecoderEntrant, Lane, RaceTurn, judge

from .conftest import app_on_chat

SIZE = (100, 32)


async def still_cursor(pilot) -> None:
    for area in pilot.app.screen.query(PromptInput):
        area.cursor_blink = False
    await pilot.pause()


def test_chat_coloured_runs(snap_compare, backend, fixed_chat):
    assert snap_compare(
        app_on_chat(backend, fixed_chat), terminal_size=SIZE, run_before=still_cursor
    )


def test_chat_markdown_when_colours_off(snap_compare, backend, fixed_chat):
    assert snap_compare(
        app_on_chat(backend, fixed_chat),
        press=["ctrl+t"],
        terminal_size=SIZE,
        run_before=still_cursor,
    )


def test_chat_coloured_by_source(snap_compare, backend, fixed_chat):
    assert snap_compare(
        app_on_chat(backend, fixed_chat),
        press=["ctrl+f"],
        terminal_size=SIZE,
        run_before=still_cursor,
    )


def test_chat_light_theme(snap_compare, backend, fixed_chat):
    assert snap_compare(
        app_on_chat(backend, fixed_chat, theme="specchat-light"),
        terminal_size=SIZE,
        run_before=still_cursor,
    )


def test_help_screen(snap_compare, backend, fixed_chat):
    assert snap_compare(
        app_on_chat(backend, fixed_chat), press=["f1"], terminal_size=SIZE, run_before=still_cursor
    )


def test_decoder_settings(snap_compare, backend, fixed_chat):
    async def open_dialog(pilot) -> None:
        await still_cursor(pilot)
        pilot.app.push_screen(DecoderSettingsScreen("beam"))
        await pilot.pause()

    assert snap_compare(
        app_on_chat(backend, fixed_chat), terminal_size=SIZE, run_before=open_dialog
    )


SCRIPT = {  # (token ids, text, drafted, accepted) per step
    "greedy": [
        ((1,), "One", 0, 0),
        ((2,), " two", 0, 0),
        ((3,), " three", 0, 0),
        ((4,), " four", 0, 0),
        ((5,), ".", 0, 0),
    ],
    "pld": [((1,), "One", 2, 0), ((2, 3, 4), " two three four", 2, 2), ((5,), ".", 2, 0)],
}


def scripted_steps(name: str, tps: float) -> list[StepEvent]:
    return [
        StepEvent(ids, text, drafted, accepted, name, len(ids) / tps)
        for ids, text, drafted, accepted in SCRIPT[name]
    ]


def scripted_done(name: str, tps: float) -> DoneEvent:
    """The done event the engine would send after these steps: their stats, summed."""
    steps = scripted_steps(name, tps)
    stats = GenerationStats()
    for event in steps:
        stats = stats.with_step(event)
    tokens = tuple(t for event in steps for t in event.tokens)
    return DoneEvent("eos", (), tokens, "".join(event.text for event in steps), stats)


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def scripted_race(at: float):
    """Feed the race screen scripted runs (greedy at 80 tok/s, pld at 120) and stop its replay
    clock at `at` seconds."""

    async def run_before(pilot) -> None:
        app = pilot.app
        app.push_screen(RaceScreen("Count to five.", ["greedy", "pld"], 24))
        await pilot.pause()
        screen = app.screen
        clock = VirtualClock()
        screen.clock = clock
        await screen.make_panes(["greedy", "pld"])
        lanes = []
        for pane, (name, tps) in enumerate([("greedy", 80.0), ("pld", 120.0)]):
            screen.post_message(RaceStarted(pane))
            steps = tuple(scripted_steps(name, tps))
            done = scripted_done(name, tps)
            screen.post_message(RaceDone(pane, done, steps))
            lanes.append(Lane(DecoderEntrant(app.session.backend, name, {}), [done]))
        # the same ids: judged identical without a pass of the model
        judge(app.session.backend, RaceTurn((), (), 24), lanes, "greedy")
        screen.post_message(RaceFinished(tuple(lanes)))
        await pilot.pause()
        clock.now = at
        screen.replay_tick()
        screen.query_one("#race-prompt").cursor_blink = False
        await pilot.pause()

    return run_before


@pytest.mark.slow
def test_race_summary(snap_compare, backend, fixed_chat):
    assert snap_compare(
        app_on_chat(backend, fixed_chat), terminal_size=(110, 32), run_before=scripted_race(1.0)
    )


@pytest.mark.slow
def test_race_mid_replay(snap_compare, backend, fixed_chat):
    """0.045 s in: pld (5 tokens in 0.042 s) has finished, greedy (0.0625 s) shows 3 of 5."""
    assert snap_compare(
        app_on_chat(backend, fixed_chat), terminal_size=(110, 32), run_before=scripted_race(0.045)
    )
