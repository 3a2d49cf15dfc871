"""An answer's drafts as people read them — the same cells and lines for the chat's drafts view
(`d` on an answer) and `specchat ask --explain`: a row per step (what landed, coloured as its run,
and the rejected draft tail struck through), the answer's figures, its oracle, and a sparkline of
tokens per step. Plain Rich; no Textual."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from specchat.drafts import DraftFigures, DraftStep, sparkline
from specchat.engine.stats import GenerationStats
from specchat.themes.palette import RunPalette

COLUMNS = ("step", "source", "depth", "drafted", "kept", "pass ms", "landed", "rejected")
NUMERIC = {"step", "depth", "drafted", "kept", "pass ms"}
REJECTED_STYLE = "strike dim"


def visible(text: str) -> str:
    """Text whose line breaks and tabs show in one cell."""
    return text.replace("\n", "⏎").replace("\t", "⇥")


def step_cells(
    number: int, step: DraftStep, palette: RunPalette | None, by: str = "length"
) -> tuple[Text, ...]:
    """One step's row (see COLUMNS): numbers, the landed text in its run's colour, the rejected
    tail struck through."""
    colour = palette.colour(step.tokens, step.source, by) if palette else None
    return (
        Text(str(number)),
        Text(
            step.source or "—",
            style=(palette.colour_for_source(step.source) or "") if palette else "",
        ),
        Text(str(step.depth) if step.drafted or step.depth else "—"),
        Text(str(step.drafted)),
        Text(str(step.accepted)),
        Text(f"{step.pass_seconds * 1000:.1f}" if step.pass_seconds else "—"),
        Text(visible(step.text), style=colour or ""),
        Text(visible(step.rejected), style=REJECTED_STYLE),
    )


def steps_table(
    steps: Sequence[DraftStep], palette: RunPalette | None, by: str = "length"
) -> Table:
    """Every step as a table (`ask --explain`); long text folds inside its cell."""
    table = Table(title="steps", title_justify="left", box=None, padding=(0, 1))
    for name in COLUMNS:
        numeric = name in NUMERIC
        table.add_column(
            name,
            justify="right" if numeric else "left",
            no_wrap=numeric,
            overflow="fold",
            ratio=None if numeric else 1,
        )
    for number, step in enumerate(steps, 1):
        table.add_row(*step_cells(number, step, palette, by))
    return table


def tokens_per_step_line(steps: Sequence[DraftStep], width: int) -> Text:
    """ "tokens per step ▁▃█▂… (max N)" fitted into `width` columns."""
    label = "tokens per step "
    top = max((step.tokens for step in steps), default=0)
    ending = f" max {top}"
    bars = sparkline([step.tokens for step in steps], max(1, width - len(label) - len(ending)))
    line = Text(label, style="dim")
    line.append(bars)
    line.append(ending, style="dim")
    return line


def summary_lines(figures: DraftFigures, stats: GenerationStats | None) -> list[str]:
    """The answer's figures from its steps (and the engine's stats, which they equal), then
    what the drafts allowed."""
    lines = [
        f"{figures.tokens} tokens in {figures.steps} steps · "
        f"{figures.tokens_per_step:.2f} tokens/step · {figures.accepted} of {figures.drafted} "
        f"drafted tokens accepted ({figures.acceptance_rate:.0%}) · {figures.rejected} rejected"
    ]
    timing = f"target passes {figures.pass_seconds:.3f} s"
    if stats is not None and stats.decode_seconds > 0:
        timing += f" of {stats.decode_seconds:.3f} s decoding · {stats.tokens_per_second:.1f} tok/s"
    lines.append(timing)
    oracle = figures.oracle
    if oracle is None or figures.modelled_speedup is None:
        lines.append("oracle: no pass costs known for this answer")
        return lines
    realised = (
        f"{figures.efficiency:.0%} of it realised"
        if figures.efficiency is not None
        else ("nothing to realise")
    )
    lines.append(
        f"these passes {figures.modelled_speedup:.2f}× one-token passes · oracle (perfect draft "
        f"lengths over these drafts) {oracle.speedup:.2f}×, {realised} · "
        f"{oracle.copyable:.0%} of tokens were drafted right · costs: {figures.costs_from}"
    )
    return lines
