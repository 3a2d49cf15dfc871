"""Benchmark output: tables per category, a speedup chart for the terminal, and Markdown."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from specchat.bench.peers import MATCHING_PEER, REFERENCE_PEERS
from specchat.bench.summary import OVERALL, QuestionRow
from specchat.errors import SpecchatError
from specchat.evaluation.variants import DecoderVariant, parse_variant
from specchat.metrics import figures
from specchat.tables import Column, print_table

_BAR = 30  # characters for the longest bar


SUMMARY_TITLE = "speedup vs greedy (Spec-Bench: mean tok/s ÷ greedy's, same run)"
DETAIL_TITLE = "overall figures"
DETAIL_COLUMNS = (
    Column("method", numeric=False),
    Column("tok/s"),
    Column("speedup"),
    Column("tok/step"),
    Column("accept"),
    Column("exact"),
    Column("oracle"),
    Column("effic."),
    Column("questions"),
)


def summary_columns(summary: dict) -> list[Column]:
    """Categories down, methods across: stays readable with a dozen categories."""
    return [Column("category", numeric=False), *(Column(method) for method in summary)]


def summary_rows(summary: dict, categories: list[str]) -> list[list[str]]:
    rows = []
    for cat in [*categories, OVERALL]:
        cells = []
        for per in summary.values():
            fig = per.get(cat)
            cells.append("—" if not fig or fig["speedup"] is None else f"{fig['speedup']:.2f}×")
        rows.append([cat, *cells])
    return rows


def detail_rows(summary: dict) -> list[list[str]]:
    return [[method, *_figure_cells(per[OVERALL])] for method, per in summary.items()]


def _figure_cells(fig: dict) -> list[str]:
    """tok/s, speedup, tokens/step, acceptance, exact rate, oracle, efficiency, questions ("—"
    where unknown)."""

    def maybe(value, fmt: str) -> str:
        return "—" if value is None else format(value, fmt)

    return [
        f"{fig['tokens_per_second']:.1f}",
        maybe(fig["speedup"], ".2f") + ("×" if fig["speedup"] is not None else ""),
        maybe(fig["mean_accepted_tokens"], ".2f"),
        maybe(fig["acceptance_rate"], ".0%"),
        "soft"
        if fig.get("total_variation_per_token") is not None
        else maybe(fig["exact_rate"], ".0%"),
        maybe(fig.get("oracle"), ".2f") + ("×" if fig.get("oracle") is not None else ""),
        maybe(fig.get("efficiency"), ".2f"),
        str(fig["questions"]),
    ]


def ours_over_peers(summary: dict) -> list[tuple[str, str, float]]:
    """(ours, peer, ratio of overall tok/s): each of our methods over its library counterparts
    and over what a user would otherwise run (REFERENCE_PEERS), where they ran."""
    pairs = []
    ours = [m for m in summary if not m.startswith("peer:") and "@" not in m]
    for method in ours:
        for peer in dict.fromkeys([*MATCHING_PEER.get(method, ()), *REFERENCE_PEERS]):
            if peer not in summary:
                continue
            ratio = figures.speedup(
                summary[method][OVERALL]["tokens_per_second"],
                summary[peer][OVERALL]["tokens_per_second"],
            )
            if ratio is not None:
                pairs.append((method, peer, ratio))
    return pairs


def soft_matching_lines(summary: dict) -> list[str]:
    """For each method that soft matching verified: it is not sampled from the target's
    distribution, how far it moved (total variation per token), and what it gained over the same
    decoder verified exactly, where that ran too."""
    lines = []
    for method, per in summary.items():
        fig = per[OVERALL]
        note = figures.not_target_distribution(fig.get("total_variation_per_token"))
        if note is None:
            continue
        line = f"{method}: {note}"
        exact = _exact_counterpart(method)
        base = summary.get(exact, {}).get(OVERALL) if exact else None
        if base and base["acceptance_rate"] is not None and fig["acceptance_rate"] is not None:
            speed = figures.speedup(fig["tokens_per_second"], base["tokens_per_second"])
            line += (
                f"; over {exact}: acceptance {base['acceptance_rate']:.0%} → "
                f"{fig['acceptance_rate']:.0%}, tokens/step {base['mean_accepted_tokens']:.2f} → "
                f"{fig['mean_accepted_tokens']:.2f}, speed {speed:.2f}×"
            )
        lines.append(line)
    return lines


def _exact_counterpart(label: str) -> str | None:
    """The label of the same variant without soft matching (None: not a variant spelling)."""
    try:
        variant = parse_variant(label)
    except SpecchatError:
        return None
    rest = tuple((k, v) for k, v in variant.params if k != "soft_match")
    return DecoderVariant(variant.name, rest).label


def chart_lines(summary: dict, categories: list[str]) -> list[tuple[str, str, float, dict]]:
    """(category, method, speedup, figures) in chart order."""
    lines = []
    for cat in [*categories, OVERALL]:
        for method, per in summary.items():
            fig = per.get(cat)
            if fig and fig["speedup"] is not None:
                lines.append((cat, method, fig["speedup"], fig))
    return lines


def chart_text(summary: dict, categories: list[str], colour: bool = True, width: int = 0) -> Text:
    """Bars of speedup; where an oracle is known, ░ extends the bar to what the drafts allow, and
    the line says how much of it the policy took (efficiency), category by category. With a
    `width`, bars are shortened so that every line fits it."""
    lines = chart_lines(summary, categories)
    top = max((max(s, f.get("oracle") or 0.0) for _, _, s, f in lines), default=1.0)
    label = max((len(m) for _, m, _, _ in lines), default=6)
    longest = _BAR if not width else max(5, min(_BAR, width - label - 42))
    out = Text()
    current = None
    for cat, method, speedup, fig in lines:
        oracle, share = fig.get("oracle"), fig.get("efficiency")
        if cat != current:
            out.append(f"{cat}\n", style="bold" if colour else "")
            current = cat
        filled = max(1, round(longest * speedup / top))
        bar = "█" * filled
        style = ("green" if speedup >= 1.0 else "red") if colour else ""
        out.append(f"  {method:<{label}} ")
        out.append(bar, style=style)
        if oracle is not None:
            out.append("░" * max(0, round(longest * oracle / top) - filled), style="dim")
        out.append(f" {speedup:.2f}×")
        if oracle is None:
            out.append("\n")
        elif share is None:
            out.append(f" (oracle {oracle:.2f}×)\n")
        else:
            out.append(f" (oracle {oracle:.2f}×, efficiency {share:.2f})\n")
    return out


def print_report(console: Console, summary: dict, categories: list[str], rows: list[QuestionRow]):
    print_table(console, SUMMARY_TITLE, summary_columns(summary), summary_rows(summary, categories))
    print_table(console, DETAIL_TITLE, DETAIL_COLUMNS, detail_rows(summary))
    console.print(chart_text(summary, categories, width=console.width))
    for ours, peer, ratio in ours_over_peers(summary):
        console.print(f"{ours} ÷ {peer}: {ratio:.2f}×")
    for line in soft_matching_lines(summary):
        console.print(line, markup=False, style="bold")
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
    out.append(
        "| method | tok/s | speedup | tokens/step | acceptance | exact | oracle | efficiency "
        "| questions |"
    )
    out.append("|---" * 9 + "|")
    for method, per in summary.items():
        out.append(f"| {method} | " + " | ".join(_figure_cells(per[OVERALL])) + " |")
    pairs = ours_over_peers(summary)
    if pairs:
        out.append("")
        for ours, peer, ratio in pairs:
            out.append(f"- {ours} ÷ {peer}: **{ratio:.2f}×**")
    soft = soft_matching_lines(summary)
    if soft:
        out.append("")
        out.extend(f"- {line}" for line in soft)
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
