"""`specchat compare`: a headless race of decoders on one prompt, as a table or JSON."""

from __future__ import annotations

import json
import sys

from rich.console import Console

from specchat.answers import open_model
from specchat.app.foreground import interrupt_flag
from specchat.backends.remote import SERVER_PREFIX
from specchat.decoding.registry import baseline_name, default_race, unavailable_reason
from specchat.engine.choice import exactness_of, prompt_ids
from specchat.errors import SpecchatError
from specchat.evaluation.race import (
    Lane,
    RaceTurn,
    RunFailed,
    RunFinished,
    judge,
    line_up_entrants,
    race,
)
from specchat.evaluation.variants import DecoderVariant, line_up, parse_variant, server_name
from specchat.metrics.figures import RaceRow, race_rows
from specchat.metrics.oracle import efficiency
from specchat.models import LoadOptions, open_race_server
from specchat.options import RunConfig
from specchat.prompting import messages_for
from specchat.run_config import run_params, sampling_for
from specchat.tables import Column, print_table


def _row_json(row: RaceRow, lane: Lane) -> dict[str, object]:
    """One decoder's line of `compare --json`; `oracle` is the speedup its drafter's proposals
    would allow with perfect draft lengths, `efficiency` the share of that it realised."""
    eff = efficiency(row.speedup, lane.oracle.speedup if lane.oracle else None)
    stats = lane.last.stats
    return {
        "decoder": row.decoder,
        "params": getattr(lane.entrant, "params", {}),
        "tokens": row.tokens,
        "tokens_per_second": round(row.tokens_per_second, 2),
        "speedup": None if row.speedup is None else round(row.speedup, 3),
        "tokens_per_step": round(row.tokens_per_step, 3),
        "acceptance_rate": round(row.acceptance_rate, 3),
        "identical_to_greedy": lane.identical,
        "first_divergence": lane.divergence.as_dict() if lane.divergence else None,
        "oracle": None if lane.oracle is None else round(lane.oracle.speedup, 3),
        "efficiency": None if eff is None else round(eff, 3),
        # False where soft matching verified it: not sampled from the target's distribution
        "target_distribution": stats.target_distribution,
        "total_variation_per_token": None
        if stats.distance_per_token is None
        else round(stats.distance_per_token, 6),
        # Ctrl+C cut its only run: the figures are of the part it generated
        "stopped": lane.last.finish_reason == "cancelled",
    }


def _exact_cell(row: dict[str, object]) -> str:
    if row["stopped"]:
        return "— (stopped)"
    if not row["target_distribution"]:
        return f"NOT target's distribution (soft, TV {row['total_variation_per_token']:.3f}/tok)"
    same = row["identical_to_greedy"]
    if same is None:
        return "—"
    if same:
        return "yes"
    div = row["first_divergence"]
    if div is None:
        return "no (text)"
    if div["margin"] is None:
        return f"no @ {div['index']} (length)"
    return f"no @ {div['index']} (margin {div['margin']:.2g})"


COLUMNS = (
    Column("decoder", numeric=False),
    Column("tok/s"),
    Column("speedup"),
    Column("oracle"),
    Column("eff."),
    Column("tok/step"),
    Column("accept"),
    Column("tokens"),
    Column("exact", numeric=False),
)


def _cells(row: dict[str, object]) -> list[str]:
    def times(value) -> str:
        return "—" if value is None else f"{value:.2f}×"

    return [
        str(row["decoder"]),
        f"{row['tokens_per_second']:.1f}",
        times(row["speedup"]),
        times(row["oracle"]),
        "—" if row["efficiency"] is None else f"{row['efficiency']:.2f}",
        f"{row['tokens_per_step']:.2f}",
        f"{row['acceptance_rate']:.0%}",
        str(row["tokens"]),
        _exact_cell(row),
    ]


def run_compare(
    prompt: str,
    config: RunConfig,
    *,
    params: dict[str, object],
    raw: bool,
    as_json: bool,
    progress,
    progress_done,
) -> None:
    """Race the decoders `config.race` names (or variants of them, `pld:fixed_draft=10`) on the
    run's model, and each server of `--race-server` (or `-d server@URL`) with its own method; the
    baseline joins when it can judge the others (greedy sampling, and it runs there)."""
    parsed = [parse_variant(name) for name in config.race]
    parsed += [parse_variant(f"{SERVER_PREFIX}{url}") for url in config.race_servers]
    server_urls = dict.fromkeys(v.server for v in parsed if v.server is not None)
    requested = [v for v in parsed if v.server is None]
    sampling = sampling_for(None, config)
    if requested:  # bad parameters fail before the model loads
        run_params(list(dict.fromkeys(v.name for v in requested)), config, params)
    options = LoadOptions.of(config)
    loaded = open_model(config, speculative=True, progress=progress)
    servers = {url: open_race_server(options, url, config.model) for url in server_urls}
    base = baseline_name()
    variants = line_up(
        requested or [parse_variant(n) for n in default_race(loaded)],
        with_baseline=sampling.greedy and unavailable_reason(base, loaded) is None,
    )
    per = run_params(list(dict.fromkeys(v.name for v in variants)), config, params)
    entrants = line_up_entrants(
        [*variants, *(DecoderVariant(server_name(), server=url) for url in servers)],
        lambda v: loaded if v.server is None else servers[v.server],
        lambda v: v.with_params(per[v.name]),
    )
    messages = tuple(messages_for(prompt))
    turn = RaceTurn(messages, prompt_ids(loaded, messages, raw), config.max_tokens, sampling, raw)
    total, done = config.repeats * len(entrants), 0

    def on_event(event) -> None:
        nonlocal done
        if isinstance(event, RunFinished | RunFailed):
            done += 1
            progress(f"run {done}/{total} ({entrants[event.lane].label})")

    with interrupt_flag() as stop:
        lanes = race(
            loaded,
            turn,
            entrants,
            baseline=base,
            repeats=config.repeats,
            on_event=on_event,
            cancel=stop,
        )
    progress_done()
    failed = next((lane for lane in lanes if lane.error), None)
    if failed is not None:
        raise SpecchatError(f"{failed.label}: {failed.error}")
    if stop.is_set():
        lanes = _complete_runs(loaded, turn, lanes, base)
        if not lanes:  # stopped before any run began: nothing to report
            raise KeyboardInterrupt
    figures = race_rows([(lane.label, [run.stats for run in lane.runs]) for lane in lanes], base)
    exactness = exactness_of(loaded)
    rows = [_row_json(row, lane) for row, lane in zip(figures, lanes)]
    if as_json:
        print(
            json.dumps(
                {
                    "backend": loaded.name,
                    "device": loaded.device,
                    "model": loaded.model_name,
                    "prompt_tokens": len(turn.prompt_ids),
                    "max_tokens": config.max_tokens,
                    "repeats": config.repeats,
                    "sampling": sampling.__dict__,
                    "exactness": None if exactness is None else exactness.as_dict(),
                    "decoders": rows,
                    # Ctrl+C stopped the race: the rows are the runs made before it
                    "stopped": stop.is_set(),
                },
                ensure_ascii=False,
            )
        )
        _say_stopped(stop.is_set(), lanes, total)
        return
    title = (
        f"{loaded.model_name} on {loaded.name}/{loaded.device} — median of {config.repeats}, "
        "decoders run one after another"
    )
    console = Console(file=sys.stdout)
    print_table(console, title, COLUMNS, [_cells(row) for row in rows])
    if exactness is not None and exactness.note:
        console.print(exactness.note)
    _say_stopped(stop.is_set(), lanes, total)


def _complete_runs(backend, turn: RaceTurn, lanes: list[Lane], baseline: str) -> list[Lane]:
    """The lanes of a race Ctrl+C stopped, as far as it ran: a lane that never started is left
    out; a run it cut is left out where its lane has whole runs (a median with a part of an
    answer in it would read neither), kept where it is the lane's only one (shown stopped);
    the lanes judged again on what is kept."""
    kept = [lane for lane in lanes if lane.runs]
    cut = False
    for lane in kept:
        if len(lane.runs) > 1 and lane.last.finish_reason == "cancelled":
            lane.runs.pop()
            cut = True
    if cut:
        for lane in kept:
            lane.identical, lane.divergence, lane.oracle = None, None, None
        judge(backend, turn, kept, baseline)
    return kept


def _say_stopped(stopped: bool, lanes: list[Lane], total: int) -> None:
    """After the report: that Ctrl+C stopped the race and how far it got, then exit as an
    interrupted command does."""
    if not stopped:
        return
    whole = sum(run.finish_reason != "cancelled" for lane in lanes for run in lane.runs)
    sys.stderr.write(f"[stopped after {whole} of {total} runs: the table is theirs]\n")
    raise KeyboardInterrupt
