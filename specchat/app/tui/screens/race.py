"""Ctrl+B: one prompt through 2–4 decoders, side by side, with a summary.

The decoders run one after another on the one loaded model — never in parallel threads, which
would make them share two CPU cores and ruin every tok/s figure. The screen says so.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, DataTable, Footer, Header, Label, SelectionList, Static

from specchat.app.tui.figures import Figures
from specchat.app.tui.messages import RaceDone, RaceFailed, RaceFinished, RaceStarted, RaceStep
from specchat.app.tui.runs import RunText, coloured
from specchat.app.tui.session import ChatSession
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.decoding.events import DoneEvent
from specchat.decoding.figures import race_rows
from specchat.decoding.registry import DECODERS, baseline_name

MAX_PANES = 4
SEQUENTIAL_NOTE = (
    "Decoders run one after another on the same loaded model (never in parallel), "
    "so their speeds are comparable."
)


class RacePane(Vertical):
    def __init__(self, name: str) -> None:
        super().__init__(classes="race-pane")
        self.decoder = name
        self.runs = RunText()
        self.figures = Figures(decoder=name)
        self.done: DoneEvent | None = None

    def compose(self) -> ComposeResult:
        yield Label(f"{self.decoder} · waiting", classes="pane-title")
        with VerticalScroll(classes="pane-body"):
            yield Static("", classes="pane-text")
        yield Static("", classes="pane-figures")

    def set_state(self, state: str) -> None:
        self.query_one(".pane-title", Label).update(f"{self.decoder} · {state}")

    def repaint(self, palette) -> None:
        self.query_one(".pane-text", Static).update(
            coloured(self.runs.text, self.runs.runs, palette)
        )
        figures = self.figures
        line = Text(no_wrap=True, overflow="ellipsis", end="")
        line.append(f"{figures.tokens_per_second:.1f} tok/s", style="bold")
        line.append(f"   {figures.tokens_per_step:.2f} tok/step   {figures.tokens} tok")
        if figures.acceptance is not None:
            line.append(f"   acc {figures.acceptance:.0%}")
        self.query_one(".pane-figures", Static).update(line)


def summary_rows(panes: list[RacePane], greedy_flags: dict[str, bool]) -> list[tuple[str, ...]]:
    """One row per finished pane: tok/s, speedup vs greedy (else the first pane), tok/step,
    acceptance, tokens, and whether a greedy-family output equals the reference."""
    finished = [p for p in panes if p.done is not None]
    figures = race_rows([(p.decoder, [p.done.stats]) for p in finished])
    reference = next((p for p in finished if greedy_flags.get(p.decoder)), None)
    rows = []
    for pane, row in zip(finished, figures):
        if not greedy_flags.get(pane.decoder) or reference is None:
            same = "n/a (samples)"
        elif pane is reference:
            same = "reference"
        else:
            same = "identical ✓" if pane.done.token_ids == reference.done.token_ids else "differs ✗"
        rows.append(
            (
                pane.decoder,
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
        Binding("escape", "stop_or_back", "stop / back", priority=True),
        Binding("ctrl+b", "app.pop_screen", "back to chat", show=False),
    ]

    def __init__(
        self, prompt: str = "", decoders: list[str] | None = None, max_tokens: int | None = None
    ) -> None:
        super().__init__()
        self.prompt = prompt
        self.initial = decoders
        self.max_tokens = max_tokens
        self.panes: list[RacePane] = []
        self.running = False
        self.greedy_flags: dict[str, bool] = {}

    @property
    def session(self) -> ChatSession:
        return self.app.session

    def compose(self) -> ComposeResult:
        yield Header(icon="≫")
        with Horizontal(id="race-controls"):
            yield PromptInput(placeholder="Prompt to race — Enter runs", id="race-prompt")
            yield SelectionList(id="race-decoders")
            yield Button("Run", variant="primary", id="race-run")
        yield Label(SEQUENTIAL_NOTE, id="race-note")
        yield Horizontal(id="race-panes")
        yield DataTable(id="race-summary", cursor_type="none", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "race"
        chosen = self.initial or self._default_choice()
        selection = self.query_one(SelectionList)
        for info in DECODERS.values():
            reason = self.session.unavailable_reason(info.name)
            label = info.name if not reason else f"{info.name} (unavailable)"
            selection.add_option((label, info.name, info.name in chosen and not reason))
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

    def _default_choice(self) -> list[str]:
        usable = [n for n in DECODERS if not self.session.unavailable_reason(n)]
        speculative = [n for n in usable if DECODERS[n].speculative]
        return ([baseline_name()] + speculative[:2]) if speculative else usable[:2]

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
        names = list(self.query_one(SelectionList).selected)
        if not prompt:
            self.notify("type a prompt to race", severity="warning")
            return
        if not 2 <= len(names) <= MAX_PANES:
            self.notify(f"choose 2 to {MAX_PANES} decoders", severity="warning")
            return
        unavailable = [n for n in names if session.unavailable_reason(n)]
        if unavailable:
            self.notify(
                f"{unavailable[0]} is unavailable: {session.unavailable_reason(unavailable[0])}"
            )
            return
        await self.make_panes(names)
        self.running = True
        max_tokens = self.max_tokens or min(session.settings.max_tokens, 256)
        session.race(self, prompt, names, max_tokens)

    async def make_panes(self, names: list[str]) -> None:
        """Fresh panes for `names` (also how tests script a race without running one)."""
        panes_box = self.query_one("#race-panes", Horizontal)
        await panes_box.remove_children()
        self.panes = [RacePane(name) for name in names]
        await panes_box.mount_all(self.panes)
        self.query_one(DataTable).clear()
        self.greedy_flags = {
            n: DECODERS[n].greedy_family and self.session.sampling(n).greedy for n in names
        }

    def on_race_started(self, message: RaceStarted) -> None:
        self.panes[message.pane].set_state("running")

    def on_race_step(self, message: RaceStep) -> None:
        pane = self.panes[message.pane]
        pane.runs.add_step(message.event.text, len(message.event.tokens))
        pane.figures.add(message.event)
        pane.repaint(self.app.palette)

    def on_race_done(self, message: RaceDone) -> None:
        pane = self.panes[message.pane]
        pane.done = message.event
        pane.runs.finish(message.event.text)
        pane.set_state("stopped" if message.event.finish_reason == "cancelled" else "done")
        pane.repaint(self.app.palette)
        self._fill_summary()

    def on_race_failed(self, message: RaceFailed) -> None:
        self.panes[message.pane].set_state("failed")
        self.notify(message.error, severity="error")

    def on_race_finished(self, message: RaceFinished) -> None:
        self.running = False
        self.session.race_ended()
        self._fill_summary()

    def _fill_summary(self) -> None:
        table = self.query_one(DataTable)
        table.clear()
        for row in summary_rows(self.panes, self.greedy_flags):
            table.add_row(*row)

    def palette_changed(self) -> None:
        for pane in self.panes:
            pane.repaint(self.app.palette)

    def action_stop_or_back(self) -> None:
        if self.running:
            self.session.stop_race()
            for worker in self.workers:
                worker.cancel()
            return
        self.app.pop_screen()
