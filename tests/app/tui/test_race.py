"""The race screen on the real model: decoders measured one after another, then replayed side by
side at their measured pace — driven here by a virtual clock, so nothing depends on the machine's
speed — with figures that agree with `specchat compare` on the same prompt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from specchat.app.tui.app import SpecchatApp
from specchat.app.tui.screens.race import RacePane, RaceScreen
from specchat.bench.llama_server import free_port
from specchat.decoding.registry import default_decoder
from specchat.metrics.figures import speedup, tokens_per_second
from specchat.options import RunConfig
from tests.servers import REPEATING_PROMPT, server_metrics

from .conftest import wait_until

pytestmark = pytest.mark.anyio
SIZE = (120, 36)
PROMPT = "Repeat: one two three four. one two three four."
# a fixed draft length uses no learned state, so its steps are the same in every run
VARIANT = "pld:fixed_draft=4"


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def pane_text(pane) -> str:
    return str(pane.query_one(".pane-text").render())


def pane_title(pane) -> str:
    return str(pane.query_one(".pane-title").render())


def shown_text(pane, count: int) -> str:
    return "".join(event.text for event in pane.timeline.steps[:count])


async def measured_race(pilot, names: list[str]) -> tuple[RaceScreen, VirtualClock]:
    """Run the race on the real model; return once the replay started (virtual time 0)."""
    app = pilot.app
    app.push_screen(RaceScreen(PROMPT, names, 24))
    await pilot.pause()
    screen = app.screen
    clock = VirtualClock()
    screen.clock = clock
    assert "one after another" in str(screen.query_one("#race-note").render())
    await pilot.press("enter")
    await wait_until(pilot, lambda: screen.replaying)
    await pilot.pause()
    return screen, clock


@pytest.mark.slow
async def test_race_measures_then_replays_at_the_measured_pace(backend):
    app = SpecchatApp(settings=RunConfig(), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        screen, clock = await measured_race(pilot, ["greedy", VARIANT])
        assert not app.session.busy and not app.session.racing
        panes = screen.panes
        assert [p.label for p in panes] == ["greedy", VARIANT]
        # replay at 0 s: every run is still in its prefill, no text yet, no summary yet
        assert all(p.shown == 0 and pane_text(p) == "" for p in panes)
        assert screen.query_one("#race-summary").row_count == 0

        first, second = sorted(panes, key=lambda p: p.timeline.end)
        clock.now = first.timeline.end
        screen.replay_tick()
        assert pane_text(first) == first.done.text
        assert "1st" in pane_title(first) and "✓" in pane_title(first)
        assert f"{first.done.stats.tokens_per_second:.1f} tok/s  " in str(
            first.query_one(".pane-figures").render()
        )
        if second.timeline.end > first.timeline.end:  # the slower one is still under way
            assert second.shown < len(second.timeline.steps)
            assert pane_text(second) == shown_text(second, second.shown)
            assert "▶" in pane_title(second)
            assert screen.query_one("#race-summary").row_count == 1

        # any moment: a pane shows exactly the steps produced by then in its own run
        middle = len(second.timeline.steps) // 2
        clock.now = second.timeline.times[middle]
        screen.replay_tick()
        assert second.shown == second.timeline.shown_at(clock.now) >= middle + 1
        assert pane_text(second) == shown_text(second, second.shown)

        clock.now = 1e6
        screen.replay_tick()
        assert not screen.replaying
        assert all(pane_text(p) == p.done.text for p in panes)
        table = screen.query_one("#race-summary")
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        assert [r[0] for r in rows] == ["greedy", VARIANT]
        assert rows[0][2] == "1.00×" and rows[1][7] == "identical ✓"
        assert panes[1].done.stats.accepted > 0  # identical with drafts, not by plain steps alone

        await pilot.press("r")  # replays from the start; the summary stays
        assert screen.replaying and all(p.shown == 0 for p in panes)
        assert all(pane_text(p) == "" for p in panes)
        assert table.row_count == 2
        await pilot.press("escape")  # skips the replay to its end
        assert not screen.replaying and all(pane_text(p) == p.done.text for p in panes)
        await pilot.press("escape")
        assert not isinstance(app.screen, RaceScreen)


@pytest.mark.slow
async def test_race_figures_agree_with_compare(backend):
    """The same prompt and decoders through `specchat compare --json` (one thread, as the
    suite's model) and the race screen: the same tokens, steps, acceptance and exactness; and
    the speedup the table shows is the one computed from the replay's own step times."""
    app = SpecchatApp(settings=RunConfig(), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        screen, clock = await measured_race(pilot, ["greedy", VARIANT])
        clock.now = 1e6
        screen.replay_tick()
        table = screen.query_one("#race-summary")
        shown = {row[0]: row for row in (table.get_row_at(i) for i in range(table.row_count))}
        panes = {pane.label: pane for pane in screen.panes}

    result = subprocess.run(
        [sys.executable, "-m", "specchat", "compare", PROMPT, "-d", "greedy", "-d", VARIANT]
        + ["--max-tokens", "24", "--repeats", "1", "--threads", "1", "--n-ctx", "2048", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert result.returncode == 0, result.stderr
    compared = {row["decoder"]: row for row in json.loads(result.stdout)["decoders"]}
    assert list(compared) == ["greedy", VARIANT]
    for label, row in compared.items():
        stats = panes[label].done.stats
        assert stats.generated_tokens == row["tokens"] == int(shown[label][5])
        assert round(stats.tokens_per_step, 3) == row["tokens_per_step"]
        assert f"{stats.tokens_per_step:.2f}" == shown[label][3]
        assert round(stats.acceptance_rate, 3) == row["acceptance_rate"]
        assert row["identical_to_greedy"] is True
        assert shown[label][7] in ("reference", "identical ✓")
    assert panes[VARIANT].done.token_ids == panes["greedy"].done.token_ids

    def replayed_speed(label: str) -> float:
        steps = panes[label].timeline.steps
        return tokens_per_second(sum(len(s.tokens) for s in steps), sum(s.seconds for s in steps))

    expected = speedup(replayed_speed(VARIANT), replayed_speed("greedy"))
    assert shown[VARIANT][2] == f"{expected:.2f}×"


async def test_the_race_opens_with_greedy_and_the_decoder_the_chat_answers_with(backend):
    """Ctrl+B from the chat: greedy and the chat's own decoder are chosen (the default first,
    then whatever a decoder key switched to), three lanes in all: it offered greedy, pld and
    lookahead, and the default decoder the chat answers with was never in the race."""
    app = SpecchatApp(settings=RunConfig(), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.session.ready)
        chat = app.screen

        async def chosen() -> set[str]:
            await pilot.press("ctrl+b")
            await pilot.pause()
            selected = set(app.screen.query_one("#race-decoders").selected)
            await pilot.press("escape")
            assert app.screen is chat
            return selected

        default = default_decoder(backend)
        first = await chosen()
        assert {"greedy", default} < first and len(first) == 3
        await pilot.press("f4")  # beam, as a person switches
        await wait_until(pilot, lambda: app.session.decoder_name == "beam")
        assert await chosen() == {"greedy", "beam", default}


async def test_the_race_measures_once_the_screen_has_drawn(backend, monkeypatch):
    """The screen drawing what Run changed takes a core from the model's threads: the first
    decoder measured beside it read 20–40% slower than the same one later. A screen kept busy
    after Run (a pane holding the event loop 0.3 s) delays the measuring until it is done."""
    app = SpecchatApp(settings=RunConfig(), backend=backend)
    held_until: list[float] = []

    def hold_the_loop() -> None:
        time.sleep(0.3)
        held_until.append(time.monotonic())

    def mounted(pane) -> None:
        pane.set_timer(0.01, hold_the_loop)

    monkeypatch.setattr(RacePane, "on_mount", mounted, raising=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.session.ready)
        measured_from: list[float] = []
        original = app.session._race

        def timed(prompt, variants, max_tokens, cancel):
            measured_from.append(time.monotonic())
            yield from original(prompt, variants, max_tokens, cancel)

        app.session._race = timed
        app.push_screen(RaceScreen(PROMPT, ["greedy", VARIANT], 8))
        await pilot.pause()
        screen = app.screen
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen.replaying or not screen.running and screen.panes)
        assert held_until and measured_from and measured_from[0] >= max(held_until)


async def test_ctrl_c_stops_a_running_race(backend):
    """Ctrl+C while the decoders are measured stops the race at its next step, as Esc does;
    the race screen stays (it does not quit the app or go back)."""
    app = SpecchatApp(settings=RunConfig(), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.session.ready)
        held, go, cancels = threading.Event(), threading.Event(), []
        original = app.session._race

        def gated(prompt, variants, max_tokens, cancel):
            """The race, parked after its first event until the test has pressed the key."""
            cancels.append(cancel)
            events = original(prompt, variants, max_tokens, cancel)
            yield next(events)
            held.set()
            go.wait(60)
            yield from events

        app.session._race = gated
        app.push_screen(RaceScreen(PROMPT, ["greedy", VARIANT], 400))
        await pilot.pause()
        screen = app.screen
        await pilot.press("enter")
        await wait_until(pilot, held.is_set)
        await pilot.press("ctrl+c")
        go.set()
        await wait_until(pilot, lambda: not screen.running)
        assert cancels and cancels[0].is_set()
        assert app.screen is screen and not app.session.racing


@pytest.mark.slow
async def test_the_chat_answers_as_before_after_a_race(backend):
    """The race's runs fill the model's cache with their own tokens; the chat's next answer must
    not take them for its conversation: regenerating after a race gives the same greedy answer."""
    app = SpecchatApp(settings=RunConfig(max_tokens=16), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        app.screen.query_one("#prompt").insert("Say hi to the cat.")
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        chat = app.screen
        before = chat.messages[-1].content
        screen, clock = await measured_race(pilot, ["greedy", VARIANT])
        clock.now = 1e6
        screen.replay_tick()
        await pilot.press("escape")
        assert app.screen is chat
        await pilot.press("ctrl+r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert chat.messages[-1].content == before


async def race_with_picker(pilot, prompt: str, labels: list[str], typed: str) -> RaceScreen:
    """Open the race on `prompt`, keep only `labels` chosen, type `typed` into the picker's
    "add" field as a person does (Enter chooses it), press Run, and wait for the replay."""
    app = pilot.app
    app.push_screen(RaceScreen(prompt, None, 48))
    await pilot.pause()
    screen = app.screen
    screen.clock = VirtualClock()
    picker = screen.query_one("#race-decoders")
    picker.deselect_all()
    for label in labels:
        picker.select(label)
    await pilot.click("#race-variant")
    await pilot.press(*typed, "enter")
    await pilot.click("#race-run")
    await wait_until(pilot, lambda: screen.replaying or not screen.running and screen.panes)
    screen.clock.now = 1e6
    screen.replay_tick()
    await pilot.pause()
    return screen


def summary(screen: RaceScreen) -> dict[str, tuple]:
    table = screen.query_one("#race-summary")
    return {row[0]: row for row in (table.get_row_at(i) for i in range(table.row_count))}


@pytest.mark.slow
async def test_the_race_sets_a_servers_own_speculation_beside_a_local_decoder(
    backend, llama_server_ngram
):
    """A llama-server with its n-gram speculation, offered by the settings' `race_servers`,
    races the local greedy on one prompt: its pane colours exactly the runs its own counters
    accepted, and its greedy text is ours (the same model and kernels)."""
    label = f"server@127.0.0.1:{llama_server_ngram.port}"
    settings = RunConfig(race_servers=[llama_server_ngram.base_url])
    app = SpecchatApp(settings=settings, backend=backend, save_settings_file=False)
    async with app.run_test(size=SIZE) as pilot:
        before = server_metrics(llama_server_ngram)
        screen = await race_with_picker(pilot, REPEATING_PROMPT, ["greedy"], label)
        after = server_metrics(llama_server_ngram)
        panes = {pane.label: pane for pane in screen.panes}
        assert list(panes) == ["greedy", label]
        server = panes[label]
        accepted = (
            after["spec_decode_num_accepted_tokens_total"]
            - before["spec_decode_num_accepted_tokens_total"]
        )
        assert accepted > 0 and server.done.stats.accepted == accepted
        assert server.runs.runs and sum(n - 1 for _, _, n, _ in server.runs.runs) <= accepted
        assert pane_text(server) == server.done.text == panes["greedy"].done.text
        rows = summary(screen)
        assert rows["greedy"][7] == "reference" and rows[label][7] == "identical ✓"
        assert float(rows[label][3]) > 1.0 == float(rows["greedy"][3])


@pytest.mark.slow
async def test_a_race_server_that_refuses_fails_its_pane_alone(backend):
    """A server typed into the picker that nothing answers: its pane says failed with one line,
    and the local decoder's pane runs as usual."""
    label = f"server@127.0.0.1:{free_port()}"
    app = SpecchatApp(settings=RunConfig(), backend=backend, save_settings_file=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = await race_with_picker(pilot, PROMPT, ["greedy"], label)
        greedy, server = screen.panes
        assert server.label == label and server.done is None
        assert "failed" in pane_title(server)
        assert greedy.done is not None and pane_text(greedy) == greedy.done.text
        assert list(summary(screen)) == ["greedy"]
        assert not app.session.busy and not app.session.racing


@pytest.mark.slow
async def test_a_chat_on_a_server_answers_after_a_race_of_servers(llama_server, llama_server_ngram):
    """A chat on a remote server races its own server's method against another server, then
    answers the next question (a race once left the chat with a local engine over the remote
    backend, and the question failed with "the prompt is empty")."""
    label = f"server@127.0.0.1:{llama_server_ngram.port}"
    settings = RunConfig(backend="openai", base_url=llama_server.base_url, max_tokens=24)
    app = SpecchatApp(settings=settings, save_settings_file=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.session.ready)
        screen = await race_with_picker(pilot, REPEATING_PROMPT, ["server"], label)
        assert [pane.label for pane in screen.panes] == ["server", label]
        assert all(pane.done is not None for pane in screen.panes)
        await pilot.press("escape")  # back to the chat
        await wait_until(pilot, lambda: not isinstance(app.screen, RaceScreen))
        app.screen.query_one("#prompt").insert("Say hello.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(app.screen.messages) == 2 and not app.session.busy)
        await pilot.pause()
        answer = app.screen.messages[-1]
        assert answer.role == "assistant" and answer.content.strip()
        assert answer.finish_reason in ("eos", "max_tokens") and answer.decoder == "server"
        assert not [n for n in app._notifications if n.severity == "error"]
