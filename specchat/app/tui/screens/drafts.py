"""The drafts of one answer (`d` on it): its figures and oracle, a sparkline of tokens per step,
and a row per step — source, the draft length the policy chose, drafted and kept tokens, tokens
landed, the pass's cost, and the draft: what landed in its run's colour, then the rejected tail
struck through. Everything comes from the steps stored with the answer, so a chat reopened later
shows the same."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label, Static

from specchat.answer_steps import AnswerSteps, draft_figures
from specchat.app.drafts_view import (
    NUMBERS,
    draft_cell,
    number_cells,
    summary_lines,
    tokens_per_step_line,
)
from specchat.history import StoredMessage
from specchat.wording import counted

NUMBERS_WIDTH = 58  # the figures' columns with their padding, and the dialog's frame


class TokensPerStep(Static):
    """The sparkline, fitted to the width it is given."""

    def __init__(self, answer: AnswerSteps) -> None:
        super().__init__(id="drafts-sparkline")
        self.answer = answer

    def render(self):
        return tokens_per_step_line(self.answer.steps, max(1, self.size.width))


class DraftsScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,d", "dismiss", "close")]

    def __init__(self, message: StoredMessage, answer: AnswerSteps) -> None:
        super().__init__()
        self.message = message
        self.answer = answer
        self.figures = draft_figures(answer)

    def compose(self) -> ComposeResult:
        with Vertical(id="drafts"):
            steps = len(self.answer.steps)
            title = (
                f"drafts · {self.message.written_by_label or 'answer'} · {counted(steps, 'step')}"
            )
            yield Label(title, id="drafts-title")
            yield Static(
                "\n".join(summary_lines(self.figures, self.message.stats)), id="drafts-figures"
            )
            yield TokensPerStep(self.answer)
            yield DataTable(id="drafts-steps", cursor_type="row", zebra_stripes=True)
            yield Label(
                "draft: landed (run colour), then rejected (struck) · ↑/↓ move · Esc closes",
                id="drafts-close",
            )

    def on_mount(self) -> None:
        session = self.app.session
        table = self.query_one(DataTable)
        for name in (*NUMBERS, "draft"):
            table.add_column(name, key=name)
        palette = self.app.palette if session.colour_runs else None
        # a long draft is cut to what the dialog shows beside the figures (see drafts.tcss)
        width = max(24, min(140, self.app.size.width * 95 // 100) - NUMBERS_WIDTH)
        for number, step in enumerate(self.answer.steps, 1):
            table.add_row(
                *number_cells(number, step, palette),
                draft_cell(step, palette, session.colour_by, width),
            )
        table.focus()
