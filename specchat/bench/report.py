"""Benchmark output: tables per category, a speedup chart for the terminal, and Markdown."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from specchat.bench.peers import MATCHING_PEER
from specchat.bench.summary import OVERALL, QuestionRow

_BAR = 30  # characters for the longest bar


def summary_table(summary: dict, categories: list[str]) -> Table:
    table = Table(title="speedup vs greedy (Spec-Bench: mean tok/s ÷ greedy's, same run)")
    table.add_column("method")
    for cat in [*categories, OVERALL]:
        table.add_column(cat, justify="right")
    for method, per in summary.items():
        cells = []
        for cat in [*categories, OVERALL]:
            fig = per.get(cat)
            cells.append("—" if not fig or fig["speedup"] is None else f"{fig['speedup']:.2f}×")
        table.add_row(method, *cells)
    return table


def detail_table(summary: dict) -> Table:
    table = Table(title="overall figures")
    for column in ("method", "tok/s", "speedup", "tok/step", "accept", "exact", "questions"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for method, per in summary.items():
        fig = per[OVERALL]
        exact = "—" if fig["exact_rate"] is None else f"{fig['exact_rate']:.0%}"
        table.add_row(
            method,
            f"{fig['tokens_per_second']:.1f}",
            f"{fig['speedup']:.2f}×",
            f"{fig['mean_accepted_tokens']:.2f}",
            f"{fig['acceptance_rate']:.0%}",
            exact,
            str(fig["questions"]),
        )
    return table


def ours_over_peers(summary: dict) -> list[tuple[str, str, float]]:
    """(ours, peer, ratio of overall tok/s) for every matching pair present."""
    pairs = []
    for ours, peers in MATCHING_PEER.items():
        if ours not in summary:
            continue
        for peer in peers:
            if peer in summary:
                mine = summary[ours][OVERALL]["tokens_per_second"]
                theirs = summary[peer][OVERALL]["tokens_per_second"]
                if theirs:
                    pairs.append((ours, peer, mine / theirs))
    return pairs


def chart_lines(summary: dict, categories: list[str]) -> list[tuple[str, str, float]]:
    """(category, method, speedup) in chart order."""
    lines = []
    for cat in [*categories, OVERALL]:
        for method, per in summary.items():
            fig = per.get(cat)
            if fig and fig["speedup"] is not None:
                lines.append((cat, method, fig["speedup"]))
    return lines


def chart_text(summary: dict, categories: list[str], colour: bool = True) -> Text:
    lines = chart_lines(summary, categories)
    top = max((s for _, _, s in lines), default=1.0)
    width = max((len(m) for _, m, _ in lines), default=6)
    out = Text()
    current = None
    for cat, method, speedup in lines:
        if cat != current:
            out.append(f"{cat}\n", style="bold" if colour else "")
            current = cat
        bar = "█" * max(1, round(_BAR * speedup / top))
        style = ("green" if speedup >= 1.0 else "red") if colour else ""
        out.append(f"  {method:<{width}} ")
        out.append(bar, style=style)
        out.append(f" {speedup:.2f}×\n")
    return out


def print_report(console: Console, summary: dict, categories: list[str], rows: list[QuestionRow]):
    console.print(summary_table(summary, categories))
    console.print(detail_table(summary))
    console.print(chart_text(summary, categories))
    for ours, peer, ratio in ours_over_peers(summary):
        console.print(f"{ours} ÷ {peer}: {ratio:.2f}×")
    differing = [r for r in rows if r.identical_to_greedy is False]
    for row in differing:
        console.print(
            f"[red]differs from greedy:[/] {row.decoder} on question {row.question_id} "
            f"({row.category}) at {row.first_divergence}"
        )


def markdown(
    summary: dict, categories: list[str], rows: list[QuestionRow], command: str, environment: dict
) -> str:
    cats = [*categories, OVERALL]
    out = [f"```\n{command}\n```\n"]
    out.append("| method | " + " | ".join(cats) + " |")
    out.append("|---" * (len(cats) + 1) + "|")
    for method, per in summary.items():
        cells = [
            "—" if not per.get(c) or per[c]["speedup"] is None else f"{per[c]['speedup']:.2f}×"
            for c in cats
        ]
        out.append(f"| {method} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("| method | tok/s | speedup | tokens/step | acceptance | exact | questions |")
    out.append("|---|---|---|---|---|---|---|")
    for method, per in summary.items():
        f = per[OVERALL]
        exact = "—" if f["exact_rate"] is None else f"{f['exact_rate']:.0%}"
        out.append(
            f"| {method} | {f['tokens_per_second']:.1f} | {f['speedup']:.2f}× | "
            f"{f['mean_accepted_tokens']:.2f} | {f['acceptance_rate']:.0%} | {exact} | "
            f"{f['questions']} |"
        )
    pairs = ours_over_peers(summary)
    if pairs:
        out.append("")
        for ours, peer, ratio in pairs:
            out.append(f"- {ours} ÷ {peer}: **{ratio:.2f}×**")
    out.append("\n```\n" + chart_text(summary, categories, colour=False).plain + "```")
    differing = [r for r in rows if r.identical_to_greedy is False]
    if differing:
        out.append("\nOutputs that differ from greedy:")
        for r in differing:
            out.append(
                f"- {r.decoder}, question {r.question_id} ({r.category}): {r.first_divergence}"
            )
    env = ", ".join(f"{k}: {v}" for k, v in environment.items() if k != "decoder_params")
    out.append(f"\nEnvironment: {env}")
    return "\n".join(out) + "\n"
