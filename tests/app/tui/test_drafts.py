"""The drafts view (`d` on an answer) as a user opens it: its rows and figures are the engine's
step events and stats, the rejected tokens it strikes through are what the drafter proposed, and
a chat reopened later shows the same."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.widgets import DataTable, Static

from specchat.answer_steps import TIME_DIGITS
from specchat.app.drafts_view import NUMBERS, visible
from specchat.app.tui.app import SpecchatApp
from specchat.app.tui.screens.drafts import DraftsScreen
from specchat.app.tui.widgets.message import AssistantMessage
from specchat.engine.events import DoneEvent, StepEvent
from specchat.options import RunConfig

from .conftest import wait_until

pytestmark = pytest.mark.anyio

SIZE = (130, 44)
COPYING = (
    "Repeat this twice, exactly: the quick brown fox jumps over the lazy dog, "
    "and the lazy dog sleeps in the warm sun."
)


class EventRecorder:
    """Keeps every event the engine sends for the next answers (the engine runs for real)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.events: list[StepEvent | DoneEvent] = []

    def __enter__(self) -> EventRecorder:
        original = self.engine.generate

        def generate(request, cancel=None):
            for event in original(request, cancel):
                self.events.append(event)
                yield event

        self.engine.generate = generate  # on this engine object only
        return self

    def __exit__(self, *exc_info) -> None:
        del self.engine.generate

    @property
    def steps(self) -> list[StepEvent]:
        return [e for e in self.events if isinstance(e, StepEvent) and not e.tail]

    @property
    def done(self) -> DoneEvent:
        return next(e for e in self.events if isinstance(e, DoneEvent))


async def send(pilot, text: str) -> None:
    pilot.app.screen.query_one("#prompt").insert(text)
    await pilot.press("enter")
    await pilot.app.workers.wait_for_complete()
    await wait_until(pilot, lambda: not pilot.app.session.busy)
    await pilot.pause()


async def open_drafts(pilot) -> DraftsScreen:
    """Focus the last answer (Shift+Tab focuses the messages) and press d."""
    app = pilot.app
    await pilot.press("shift+tab")
    await pilot.pause()
    assert isinstance(app.focused, AssistantMessage), app.focused
    await pilot.press("d")
    await wait_until(pilot, lambda: isinstance(app.screen, DraftsScreen))
    await pilot.pause()
    return app.screen


def rows(screen: DraftsScreen) -> list[dict[str, Text]]:
    table = screen.query_one(DataTable)
    names = (*NUMBERS, "draft")
    return [dict(zip(names, table.get_row_at(i))) for i in range(table.row_count)]


def struck(cell: Text) -> str:
    """The struck-through part of a cell: the rejected draft tail."""
    return "".join(
        cell.plain[span.start : span.end] for span in cell.spans if "strike" in str(span.style)
    )


def number(cell: Text) -> int:
    return 0 if cell.plain == "—" else int(cell.plain)


async def test_the_drafts_view_shows_the_engines_steps_and_stats(backend):
    """On the real model, prompt lookup drafting 4 tokens a step: a row per step event with its
    source, draft length, drafted, kept and landed tokens, pass cost and text; the figures are
    the done event's stats; the same after the chat is reopened from the store."""
    settings = RunConfig(max_tokens=48, decoder="pld", decoders={"pld": {"fixed_draft": 4}})
    app = SpecchatApp(settings=settings, backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        with EventRecorder(app.session.engine) as recorder:
            await send(pilot, COPYING)
        steps, stats = recorder.steps, recorder.done.stats
        assert any(event.accepted for event in steps), "the answer copied from the prompt"
        screen = await open_drafts(pilot)
        shown = rows(screen)
        assert len(shown) == len(steps) == stats.steps
        for number_shown, (row, event) in enumerate(zip(shown, steps), 1):
            assert number(row["step"]) == number_shown
            assert row["source"].plain == (event.source or "—")
            assert number(row["depth"]) == event.depth
            assert number(row["drafted"]) == event.drafted
            assert number(row["kept"]) == event.accepted
            assert number(row["tokens"]) == len(event.tokens)
            # a step's record keeps its seconds to TIME_DIGITS: that is what the view shows
            kept = round(event.pass_seconds, TIME_DIGITS)
            assert row["pass ms"].plain == f"{kept * 1000:.1f}"
            assert row["draft"].plain.startswith(visible(event.text))
        # a draft the target refused still says where it came from: the source that guessed wrong
        refused = [row for row, event in zip(shown, steps) if event.drafted and not event.accepted]
        assert refused, "some of prompt lookup's drafts were refused"
        assert all(row["source"].plain not in ("", "—") for row in refused)
        figures = screen.figures
        assert figures.tokens == stats.generated_tokens
        assert (figures.steps, figures.drafted, figures.accepted) == (
            stats.steps,
            stats.drafted,
            stats.accepted,
        )
        assert figures.rejected == sum(len(event.rejected) for event in steps)
        kept = sum(round(e.pass_seconds, TIME_DIGITS) for e in steps)
        assert figures.pass_seconds == pytest.approx(kept)
        assert figures.oracle is not None and figures.oracle.speedup >= 1.0
        text = str(screen.query_one("#drafts-figures", Static).render())
        assert f"{stats.generated_tokens} tokens in {stats.steps} steps" in text
        assert f"{stats.drafted} drafted · {stats.accepted} accepted" in text
        assert "oracle" in text
        sparkline = str(screen.query_one("#drafts-sparkline").render())
        assert f"max {max(len(event.tokens) for event in steps)}" in sparkline
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, DraftsScreen)

    again = SpecchatApp(settings=settings, backend=backend)
    async with again.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+l")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        reopened = await open_drafts(pilot)
        assert [[c.plain for c in row.values()] for row in rows(reopened)] == [
            [c.plain for c in row.values()] for row in shown
        ]
        assert reopened.figures == figures


async def test_the_rejected_tokens_shown_are_what_the_drafter_proposed(numpy_backend):
    """On the numpy model, prompt lookup drafting 6 tokens a step: every step's struck-through
    tail is the drafter's own proposal past the tokens the target kept."""
    settings = RunConfig(max_tokens=60, decoder="pld", decoders={"pld": {"fixed_draft": 6}})
    app = SpecchatApp(settings=settings, backend=numpy_backend)
    async with app.run_test(size=SIZE) as pilot:
        drafter = app.session.engine.decoder.drafter
        proposed = []
        original = drafter.draft

        def draft(*args, **kwargs):
            made = original(*args, **kwargs)
            proposed.append(made.tokens[1:])  # a chain: the pending token, then the draft
            return made

        drafter.draft = draft
        with EventRecorder(app.session.engine) as recorder:
            await send(pilot, "The cat sat on the hat. The dog sat on the log. The cat sat")
        steps = recorder.steps
        assert len(proposed) == sum(1 for e in steps if e.drafted)  # a step without a draft
        chains = iter(proposed)  # is a plain one
        screen = await open_drafts(pilot)
        shown = rows(screen)
        assert len(shown) == len(steps)
        rejected_somewhere = False
        for row, event in zip(shown, steps):
            chain = next(chains) if event.drafted else []
            tail = chain[event.accepted :]
            assert tuple(tail) == event.rejected
            expected = b"".join(numpy_backend.token_bytes(t) for t in tail).decode()
            assert struck(row["draft"]) == visible(expected)
            assert row["draft"].plain == visible(event.text) + visible(expected)
            rejected_somewhere |= bool(expected)
        assert rejected_somewhere, "some draft was rejected"
