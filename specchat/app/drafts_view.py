"""An answer's drafts as people read them — the same cells and lines for the chat's drafts view
(`d` on an answer) and `specchat ask --explain`: a row per step (its numbers, what landed coloured
as its run, and the rejected draft tail struck through), the answer's figures, its oracle, and a
sparkline of tokens per step. Plain Rich; no Textual."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from specchat.answer_steps import DraftFigures, DraftStep, sparkline
from specchat.engine.stats import GenerationStats
from specchat.themes.palette import RunPalette
from specchat.wording import counted

NUMBERS = ("step", "source", "depth", "drafted", "kept", "tokens", "pass ms")
NUMERIC = {"step", "depth", "drafted", "kept", "tokens", "pass ms"}
REJECTED_STYLE = "strike dim"


def visible(text: str) -> str:
    """Text whose line breaks and tabs show in one cell."""
    return text.replace("\n", "⏎").replace("\t", "⇥")


def _styled(text: str, style: str | None, justify: str | None = None) -> Text:
    """One cell's text; the style as a span, not the cell's base style."""
    cell = Text(text, end="", justify=justify)
    if style:
        cell.stylize(style)
    return cell


def number_cells(number: int, step: DraftStep, palette: RunPalette | None) -> tuple[Text, ...]:
    """A step's figures (see NUMBERS): the source in its colour; "—" where nothing was drafted."""
    drafting = bool(step.drafted or step.depth)
    source_colour = palette.colour_for_source(step.source) if palette else None
    right = "right"
    return (
        _styled(str(number), None, right),
        _styled(step.source or "—", source_colour),
        _styled(str(step.depth) if drafting else "—", None, right),
        _styled(str(step.drafted), None, right),
        _styled(str(step.accepted), None, right),
        _styled(str(step.tokens), None, right),
        _styled(f"{step.pass_seconds * 1000:.1f}" if step.pass_seconds else "—", None, right),
    )


def landed_cell(step: DraftStep, palette: RunPalette | None, by: str = "length") -> Text:
    """What the step added to the answer, in its run's colour."""
    colour = palette.colour(step.tokens, step.source, by) if palette else None
    return _styled(visible(step.text), colour)


def rejected_cell(step: DraftStep) -> Text:
    """The drafted tokens the target did not take, struck through."""
    return _styled(visible(step.rejected), REJECTED_STYLE)


def draft_cell(
    step: DraftStep, palette: RunPalette | None, by: str = "length", width: int = 0
) -> Text:
    """What landed, then the rejected tail struck through, in one cell: the draft as the target
    judged it (its first rejected token stood where the target's own token now is). `width`: at
    most that many cells (0: whole); what landed gives way first ("…" where it was cut), so the
    rejected tail stays in view."""
    landed, rejected = landed_cell(step, palette, by), rejected_cell(step)
    if width and landed.cell_len + rejected.cell_len > width:
        keep = max(min(landed.cell_len, 8), width - rejected.cell_len)
        if keep < landed.cell_len:
            landed.truncate(max(0, keep - 1))
            landed.append("…", style="dim")
        room = max(0, width - landed.cell_len)
        if rejected.cell_len > room:
            rejected.truncate(max(0, room - 1))
            rejected.append("…", style="dim")
    landed.append_text(rejected)
    return landed


def steps_table(
    steps: Sequence[DraftStep], palette: RunPalette | None, by: str = "length"
) -> Table:
    """Every step as a table (`ask --explain`): the figures, what landed and what was rejected
    in columns of their own, so they read apart without colours too; long text folds."""
    table = Table(title="steps", title_justify="left", box=None, padding=(0, 1))
    for name in (*NUMBERS, "landed", "rejected"):
        numeric = name in NUMERIC
        table.add_column(
            name,
            justify="right" if numeric else "left",
            no_wrap=name in NUMERIC or name == "source",
            overflow="fold",
            ratio=None if numeric or name == "source" else 1,
        )
    for number, step in enumerate(steps, 1):
        table.add_row(
            *number_cells(number, step, palette),
            landed_cell(step, palette, by),
            rejected_cell(step),
        )
    return table


def tokens_per_step_line(steps: Sequence[DraftStep], width: int) -> Text:
    """ "tokens per step ▁▃█▂… max N" fitted into `width` columns (one bar a step while they
    fit, else neighbours averaged)."""
    label = "tokens per step "
    top = max((step.tokens for step in steps), default=0)
    ending = f" max {top}"
    bars = sparkline([step.tokens for step in steps], max(1, width - len(label) - len(ending)))
    line = Text(label, style="dim", end="")
    line.append(bars)
    line.append(ending, style="dim")
    return line


def summary_lines(figures: DraftFigures, stats: GenerationStats | None) -> list[str]:
    """The answer's figures from its steps (the engine's stats are the same sums), then what its
    passes gave and what the drafts allowed (the oracle)."""
    lines = [
        f"{counted(figures.tokens, 'token')} in {counted(figures.steps, 'step')} · "
        f"{figures.tokens_per_step:.2f} tokens/step"
        + (
            f" · {stats.tokens_per_second:.1f} tok/s"
            if stats is not None and stats.decode_seconds > 0
            else ""
        ),
        f"{figures.drafted} drafted · {figures.accepted} accepted "
        f"({figures.acceptance_rate:.0%}) · {figures.rejected} rejected · "
        f"target passes {figures.pass_seconds:.3f} s",
    ]
    oracle = figures.oracle
    if oracle is None or figures.modelled_speedup is None:
        lines.append("oracle: no pass costs known for this answer")
        return lines
    lines.append(
        f"these passes: {figures.modelled_speedup:.2f}× one-token passes (at {figures.costs_from})"
    )
    if figures.efficiency is None:
        realised = "nothing to realise"
    elif figures.efficiency < 0:  # the answer ran below one-token passes
        realised = "none of it realised (slower than one-token passes)"
    else:
        realised = f"{figures.efficiency:.0%} of it realised"
    lines.append(
        f"oracle: {oracle.speedup:.2f}× with perfect draft lengths over these drafts · "
        f"{realised} · {oracle.copyable:.0%} of tokens drafted right"
    )
    return lines


def explanation(
    steps: Sequence[DraftStep],
    figures: DraftFigures,
    stats: GenerationStats | None,
    palette: RunPalette | None,
    by: str = "length",
    width: int = 80,
) -> Group:
    """`ask --explain`: the figures, the sparkline, then every step."""
    return Group(
        Text("\n".join(summary_lines(figures, stats))),
        tokens_per_step_line(steps, width),
        Text(""),
        steps_table(steps, palette, by),
    )
