"""Ctrl+B: one prompt through 2–4 decoders (or variants of one), measured, then replayed side by
side at the measured pace, with a summary.

The decoders run one after another on the one loaded model — never in parallel threads, which
would make them share the CPU cores and ruin every tok/s figure — and the screen stays quiet while
they run. Then the panes replay together (`replay.py`): each step appears when it was produced in
its own run, so the faster decoder finishes first on screen too; `r` replays.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial

from rich.text import Text
from textual import on
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Button, DataTable, Footer, Header, Input, Label, SelectionList, Static

from specchat.app.model_thread import run_on_model_thread
from specchat.app.session import ChatSession, RaceJudged
from specchat.app.tui.figures import Figures
from specchat.app.tui.messages import (
    RaceDone,
    RaceFailed,
    RaceFinished,
    RaceProgress,
    RaceStarted,
)
from specchat.app.tui.replay import REPLAY_FRAME_SECONDS, Timeline, finishing_places
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.decoding.registry import DECODERS, baseline_name, default_decoder, default_race
from specchat.engine.events import DoneEvent, StepEvent
from specchat.errors import SpecchatError
from specchat.evaluation.race import (
    Lane,
    RaceEvent,
    RunFailed,
    RunFinished,
    RunProgress,
    RunStarted,
    error_text,
)
from specchat.evaluation.variants import (
    SERVER_PREFIX,
    DecoderVariant,
    fixed_draft_variants,
    parse_variant,
)
from specchat.metrics.figures import race_rows
from specchat.run_spans import RunText, coloured
from specchat.themes.palette import RunPalette

MAX_PANES = 4
_DEFAULT_PANES = 3  # chosen when the race opens: greedy, the chat's decoder and one more
SEQUENTIAL_NOTE = (
    "Decoders run one after another on the same loaded model (never in parallel), so their "
    "speeds are comparable; then they replay side by side at the pace they were measured."
)
PLACES = {1: "1st", 2: "2nd", 3: "3rd", 4: "4th"}


class RacePane(Vertical):
    """One decoder's lane: quiet while its run is measured, then its replay."""

    def __init__(self, variant: DecoderVariant) -> None:
        super().__init__(classes="race-pane")
        self.variant = variant
        self.done: DoneEvent | None = None
        self.timeline: Timeline | None = None
        self.shown = 0  # steps on screen
        self.runs = RunText()
        self.figures = Figures(decoder=variant.label)
        self.place: int | None = None  # finishing place in the replay
        self.replayed = False  # its replay reached the end at least once
        self.failed = False  # its run raised: the title says so and keeps saying it

    @property
    def label(self) -> str:
        return self.variant.label

    def compose(self) -> ComposeResult:
        yield Label(f"{self.label} · waiting", classes="pane-title")
        with VerticalScroll(classes="pane-body"):
            yield Static("", classes="pane-text")
        yield Static("", classes="pane-figures")

    def set_state(self, state: str) -> None:
        self.query_one(".pane-title", Label).update(f"{self.label} · {state}")

    def measured(self, done: DoneEvent, steps: tuple[StepEvent, ...]) -> None:
        self.done = done
        self.timeline = Timeline.of_run(steps, done.stats.prefill_seconds)
        ended = "stopped" if done.finish_reason == "cancelled" else "measured"
        self.set_state(f"{ended} · {done.stats.generated_tokens} tok")

    def show_at(self, seconds: float, palette: RunPalette) -> None:
        """Show the replay as it is `seconds` after its start (also backwards: a new replay)."""
        timeline = self.timeline
        if timeline is None:
            return
        count = timeline.shown_at(seconds)
        if count < self.shown:
            self.shown = 0
            self.runs = RunText()
            self.figures = Figures(decoder=self.label)
        changed = count != self.shown
        for event in timeline.steps[self.shown : count]:
            self.runs.add_step(event.text, len(event.tokens))
            self.figures.add(event)
        self.figures.decoder = self.label
        self.shown = count
        finished = count == len(timeline.steps)
        if finished:
            self.runs.finish(self.done.text)
            self.replayed = True
            place = PLACES.get(self.place, "") if self.place else ""
            self.set_state((f"{place} · " if place else "") + f"{timeline.end:.2f} s ✓")
        else:
            self.set_state(f"{seconds:.2f} s ▶")
        self.figures.elapsed = min(seconds, timeline.end)
        if changed or seconds == 0:
            self.repaint(palette)

    def repaint(self, palette: RunPalette) -> None:
        self.query_one(".pane-text", Static).update(
            coloured(self.runs.text, self.runs.runs, palette)
        )
        figures = self.figures
        lines = Text(end="")
        lines.append(f"{figures.tokens_per_second:.1f} tok/s", style="bold")
        lines.append(f"  {figures.tokens} tok\n{figures.tokens_per_step:.2f} tok/step")
        if figures.acceptance is not None:
            lines.append(f"  acceptance {figures.acceptance:.0%}")
        self.query_one(".pane-figures", Static).update(lines)


def summary_rows(panes: list[RacePane], lanes: Sequence[Lane]) -> list[tuple[str, ...]]:
    """One row per measured pane: tok/s, speedup vs greedy (else the first pane), tok/step,
    acceptance, tokens, and whether its answer is greedy's (`evaluation.race.judge`)."""
    finished = [p for p in panes if p.done is not None]
    figures = race_rows([(p.label, [p.done.stats]) for p in finished], baseline_name())
    judged = {lane.label: lane for lane in lanes}
    rows = []
    for pane, row in zip(finished, figures):
        lane = judged.get(pane.label)
        if not pane.done.stats.target_distribution:
            same = "NOT target's distribution (soft)"
        elif lane is None or lane.identical is None:
            same = "n/a (samples)" if lane is not None and lane.entrant.compared_by is None else "–"
        elif pane.label == baseline_name():
            same = "reference"
        else:
            same = "identical ✓" if lane.identical else "differs ✗"
        rows.append(
            (
                pane.label,
                f"{row.tokens_per_second:.1f}",
                "–" if row.speedup is None else f"{row.speedup:.2f}×",
                f"{row.tokens_per_step:.2f}",
                f"{row.acceptance_rate:.0%}" if row.drafted else "–",
                str(row.tokens),
                pane.done.finish_reason,
                same,
            )
        )
    return rows


class RaceScreen(Screen):
    BINDINGS = [
        Binding("escape", "stop_or_back", "stop / skip / back", priority=True),
        Binding("ctrl+c", "interrupt", "stop", show=False, priority=True),
        Binding("r", "replay", "replay"),
        Binding("ctrl+b", "back", "back to chat", show=False),
    ]

    def __init__(
        self, prompt: str = "", decoders: list[str] | None = None, max_tokens: int | None = None
    ) -> None:
        super().__init__()
        self.prompt = prompt
        self.initial = decoders
        self.max_tokens = max_tokens
        self.panes: list[RacePane] = []
        self.running = False  # the runs are being measured
        self.replaying = False
        self.lanes: tuple[Lane, ...] = ()  # the last race's lanes, judged
        self.clock: Callable[[], float] = time.monotonic  # tests hand in a virtual one
        self._replay_started = 0.0
        self._replay_timer: Timer | None = None

    @property
    def session(self) -> ChatSession:
        return self.app.session

    def compose(self) -> ComposeResult:
        yield Header(icon="≫")
        with Horizontal(id="race-controls"):
            yield PromptInput(placeholder="Prompt to race — Enter runs", id="race-prompt")
            with Vertical(id="race-choice"):
                yield SelectionList(id="race-decoders")
                yield Input(
                    placeholder="pld:fixed_draft=4 or server@URL",
                    id="race-variant",
                    compact=True,
                )
            yield Button("Run", variant="primary", id="race-run")
        yield Label(SEQUENTIAL_NOTE, id="race-note")
        yield Horizontal(id="race-panes")
        yield DataTable(id="race-summary", cursor_type="none", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "race"
        chosen = self.initial or self._default_choice()
        choices = [DecoderVariant(name) for name in DECODERS] + fixed_draft_variants()
        choices += [parse_variant(f"{SERVER_PREFIX}{url}") for url in self.session.race_servers]
        choices += [parse_variant(c) for c in chosen if c not in {v.label for v in choices}]
        for variant in choices:
            self._add_choice(variant, variant.label in chosen)
        table = self.query_one(DataTable)
        table.add_columns(
            "decoder",
            "tok/s",
            "speedup",
            "tok/step",
            "acceptance",
            "tokens",
            "end",
            "same as greedy",
        )
        prompt = self.query_one("#race-prompt", PromptInput)
        prompt.load_text(self.prompt)
        prompt.move_cursor(prompt.document.end)
        prompt.focus()

    def _add_choice(self, variant: DecoderVariant, selected: bool) -> None:
        reason = self.session.race_unavailable(variant)
        label = variant.label if not reason else f"{variant.label} (unavailable)"
        self.query_one(SelectionList).add_option((label, variant.label, selected and not reason))

    def _default_choice(self) -> list[str]:
        """Greedy, the decoder the chat answers with, the default, then the race `compare` and
        `bench` run (`default_race`), three of them that can run: the chat's own decoder is
        the one a person opens the race to see (it took the registry's first two speculative
        decoders, and the default was never among them)."""
        session = self.session
        backend = session.backend
        wanted = [baseline_name(), session.decoder_name, default_decoder(backend)]
        wanted += default_race(backend)
        usable = [n for n in dict.fromkeys(wanted) if not session.unavailable_reason(n)]
        return usable[:_DEFAULT_PANES]

    @on(Input.Submitted, "#race-variant")
    def _variant_added(self, event: Input.Submitted) -> None:
        """A variant typed in the picker joins the list, chosen."""
        try:
            variant = parse_variant(event.value)
        except SpecchatError as exc:
            self.notify(str(exc), severity="error")
            return
        selection = self.query_one(SelectionList)
        known = {selection.get_option_at_index(i).value for i in range(selection.option_count)}
        if variant.label in known:
            selection.select(variant.label)
        else:
            self._add_choice(variant, True)
        event.input.clear()

    @on(PromptInput.Submitted)
    @on(Button.Pressed, "#race-run")
    async def action_run(self) -> None:
        if self.running:
            return
        session = self.session
        if not session.ready:
            self.notify("the model is still loading", severity="warning")
            return
        if session.busy:
            self.notify("an answer is running in the chat", severity="warning")
            return
        prompt = self.query_one("#race-prompt", PromptInput).text.strip()
        labels = list(self.query_one(SelectionList).selected)
        if not prompt:
            self.notify("type a prompt to race", severity="warning")
            return
        if not 2 <= len(labels) <= MAX_PANES:
            self.notify(f"choose 2 to {MAX_PANES} decoders", severity="warning")
            return
        variants = [parse_variant(label) for label in labels]
        for variant in variants:
            reason = session.race_unavailable(variant)
            if reason:
                self.notify(f"{variant.label} is unavailable: {reason}")
                return
        await self.make_panes(variants)
        self.running = True
        max_tokens = self.max_tokens or min(session.config.max_tokens, 256)
        events = session.race(prompt, variants, max_tokens)
        work = partial(run_on_model_thread, self._race, events)
        self.run_worker(work, name="race", group="race", exclusive=True, thread=True)

    def _race(self, events: Iterator[RaceEvent | RaceJudged]) -> None:
        """A worker: the race's runs, measured one after another; this screen hears little while
        a run is measured (its token count a few times a second) and gets its steps when it
        ends."""
        lanes: tuple[Lane, ...] = ()
        try:
            self._wait_until_drawn()
            for event in events:
                if isinstance(event, RunStarted):
                    self.post_message(RaceStarted(event.lane))
                elif isinstance(event, RunProgress):
                    self.post_message(RaceProgress(event.lane, event.tokens))
                elif isinstance(event, RunFinished):
                    self.post_message(RaceDone(event.lane, event.done, event.steps))
                elif isinstance(event, RunFailed):
                    self.post_message(RaceFailed(event.lane, event.error))
                else:
                    lanes = event.lanes
        except Exception as exc:  # a bug, or a server that could not be reached: said, not a crash
            self.post_message(RaceFailed(0, error_text(exc)))
        finally:
            self.post_message(RaceFinished(lanes))

    def _wait_until_drawn(self, limit: float = 3.0) -> None:
        """Block (a worker) until the screen has drawn what Run changed: while it drew the new
        panes, it took a core from the model's threads, and the first decoder measured read
        20–40% slower than the same decoder measured later (greedy at 185–195 tok/s, then pld,
        one token a step as well, at 253–283). Idle means the event loop runs a call from this
        thread at once, three times in a row; `limit` seconds at most."""
        deadline = time.monotonic() + limit
        quiet = 0
        while quiet < 3 and time.monotonic() < deadline:
            asked = time.perf_counter()
            self.app.call_from_thread(lambda: None)
            quiet = quiet + 1 if time.perf_counter() - asked < 0.005 else 0
            time.sleep(0.05)

    async def make_panes(self, variants: list[DecoderVariant | str]) -> None:
        """Fresh panes (also how tests script a race without running one)."""
        self._stop_replay()
        chosen = [v if isinstance(v, DecoderVariant) else parse_variant(v) for v in variants]
        panes_box = self.query_one("#race-panes", Horizontal)
        await panes_box.remove_children()
        self.panes = [RacePane(variant) for variant in chosen]
        await panes_box.mount_all(self.panes)
        self.query_one(DataTable).clear()
        self.lanes = ()
        self._note("measuring, one decoder after another — the replay starts when all have run")
        self.query_one(DataTable).focus()  # off the prompt, so `r` replays

    # -- the measured runs -----------------------------------------------------------------
    def on_race_started(self, message: RaceStarted) -> None:
        self.panes[message.pane].set_state("measuring…")

    def on_race_progress(self, message: RaceProgress) -> None:
        self.panes[message.pane].set_state(f"measuring… {message.tokens} tok")

    def on_race_done(self, message: RaceDone) -> None:
        self.panes[message.pane].measured(message.event, message.steps)

    def on_race_failed(self, message: RaceFailed) -> None:
        self.panes[message.pane].failed = True
        self.panes[message.pane].set_state("failed")
        self.notify(message.error, severity="error")

    def on_race_finished(self, message: RaceFinished) -> None:
        self.running = False
        self.lanes = message.lanes
        for pane in self.panes:
            if pane.done is None and pane.timeline is None and not pane.failed:
                pane.set_state("not run")
        self.action_replay()

    # -- the replay ----------------------------------------------------------------------
    def action_replay(self) -> None:
        """Replay every measured pane from the start, together, at the measured pace."""
        if self.running:
            return
        measured = [p for p in self.panes if p.timeline is not None]
        if not measured:
            return
        places = finishing_places([p.timeline.end if p.timeline else None for p in self.panes])
        for pane, place in zip(self.panes, places):
            pane.place = place
        self._stop_replay()
        self.replaying = True
        self._replay_started = self.clock()
        self.replay_tick()
        if self.replaying:
            self._replay_timer = self.set_interval(REPLAY_FRAME_SECONDS, self.replay_tick)

    def replay_tick(self) -> None:
        """Bring every pane to the replay's current moment (the timer calls it; so can tests)."""
        if not self.replaying:
            return
        seconds = self.clock() - self._replay_started
        self.show_replay_at(seconds)

    def show_replay_at(self, seconds: float) -> None:
        palette = self.app.palette
        for pane in self.panes:
            pane.show_at(seconds, palette)
        end = max((p.timeline.end for p in self.panes if p.timeline is not None), default=0.0)
        if seconds >= end:
            self._stop_replay()
            exactness = self.session.exactness
            near_ties = (
                " · greedy-family exact to near-ties here" if exactness and exactness.note else ""
            )
            self._note(f"replayed at the measured pace ({end:.2f} s) — r replays{near_ties}")
        else:
            self._note(f"replay at the measured pace: {seconds:.2f} s of {end:.2f} s")
        self._fill_summary()

    def _stop_replay(self) -> None:
        self.replaying = False
        if self._replay_timer is not None:
            self._replay_timer.stop()
            self._replay_timer = None

    def _note(self, text: str) -> None:
        self.query_one("#race-note", Label).update(text)

    def _fill_summary(self) -> None:
        """A row per pane whose replay reached the end once (figures against every measured
        pane, so a row never changes once shown); the rows stay for later replays."""
        measured = [p for p in self.panes if p.done is not None]
        rows = [
            row for pane, row in zip(measured, summary_rows(measured, self.lanes)) if pane.replayed
        ]
        table = self.query_one(DataTable)
        if table.row_count == len(rows):
            return
        table.clear()
        for row in rows:
            table.add_row(*row)

    def palette_changed(self) -> None:
        for pane in self.panes:
            pane.repaint(self.app.palette)

    def action_back(self) -> None:
        """Back to the chat — not while a run is measured: its worker holds the model."""
        if self.running:
            self.notify("the race is running: Esc stops it", severity="warning")
            return
        self.app.pop_screen()

    def action_interrupt(self) -> None:
        """Ctrl+C stops the measuring as Esc does; otherwise the key keeps its usual meaning."""
        if not self.running:
            raise SkipAction()
        self.action_stop_or_back()

    def action_stop_or_back(self) -> None:
        """Stop the measuring; skip a replay to its end; else back to the chat."""
        if self.running:
            self.session.stop_race()
            for worker in self.workers:
                worker.cancel()
            return
        if self.replaying:
            self.show_replay_at(float("inf"))
            return
        self.app.pop_screen()
