"""`specchat compare`: a headless race of decoders on one prompt, as a table or JSON."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from rich import box
from rich.console import Console
from rich.table import Table

from specchat.decoding.figures import RaceRow, race_rows
from specchat.decoding.oracle import efficiency
from specchat.decoding.race import DecoderRuns, race
from specchat.decoding.registry import (
    checked_params,
    default_race,
    sampling_for,
    scoped_params,
)
from specchat.decoding.sampling import SamplingParams
from specchat.decoding.variants import parse_variant
from specchat.errors import SpecchatError
from specchat.models import REMOTE_BACKEND, LoadOptions, load_model
from specchat.prompting import chat_prompt_ids, messages_for, raw_prompt_ids


def _row_json(row: RaceRow, result: DecoderRuns) -> dict[str, object]:
    """One decoder's line of `compare --json`; `oracle` is the speedup its drafter's proposals
    would allow with perfect draft lengths, `efficiency` the share of that it realised."""
    eff = efficiency(row.speedup, result.oracle.speedup if result.oracle else None)
    return {
        "decoder": row.decoder,
        "params": result.params,
        "tokens": row.tokens,
        "tokens_per_second": round(row.tokens_per_second, 2),
        "speedup": None if row.speedup is None else round(row.speedup, 3),
        "tokens_per_step": round(row.tokens_per_step, 3),
        "acceptance_rate": round(row.acceptance_rate, 3),
        "identical_to_greedy": result.identical,
        "first_divergence": result.divergence.as_dict() if result.divergence else None,
        "oracle": None if result.oracle is None else round(result.oracle.speedup, 3),
        "efficiency": None if eff is None else round(eff, 3),
    }


def run_compare(
    prompt: str,
    *,
    decoders: list[str],
    params: dict[str, object],
    model: str | None,
    load_options: LoadOptions,
    max_tokens: int,
    repeats: int,
    temperature: float | None,
    sampling: SamplingParams,
    raw: bool,
    as_json: bool,
    progress,
    progress_done,
    server_urls: tuple[str, ...] = (),
) -> None:
    """Race `decoders` (or variants of them, `pld:fixed_draft=10`) on the model `load_options`
    names, and each server of `server_urls` with its own method. With `--backend openai` the
    first URL is the race's own backend."""
    parsed = [parse_variant(name) for name in decoders]
    # `-d server@URL` is `--base-url URL`: that server races with its own method
    server_urls += tuple(v.server for v in parsed if v.server is not None)
    requested = [v for v in parsed if v.server is None]
    remote = load_options.backend == REMOTE_BACKEND
    if remote and not server_urls:
        raise SpecchatError(f"--backend {REMOTE_BACKEND} needs --base-url URL")
    if raw and server_urls:
        raise SpecchatError("--raw: a remote server answers chat messages, not raw text")
    chosen = sampling_for(None, temperature, sampling)
    if requested:  # bad parameters fail before the model loads
        checked_params(list(dict.fromkeys(v.name for v in requested)), params)
    if remote:
        load_options = replace(load_options, base_url=server_urls[0])
        server_urls = server_urls[1:]
    loaded = load_model(model, load_options, progress)
    servers = tuple(
        load_model(
            model if remote else None,
            replace(load_options, backend=REMOTE_BACKEND, base_url=url),
        )
        for url in server_urls
    )
    # --param pld.x=… reaches every pld variant
    chosen_variants = requested or [parse_variant(n) for n in default_race(loaded)]
    variants = list({v.label: v for v in chosen_variants}.values())
    per = scoped_params(list(dict.fromkeys(v.name for v in variants)), params)
    messages = tuple(messages_for(prompt))
    ids = raw_prompt_ids(loaded, prompt) if raw else chat_prompt_ids(loaded, list(messages))

    def on_progress(done: int, total: int, name: str) -> None:
        progress(f"run {done}/{total} ({name})")

    results = race(
        loaded,
        ids,
        [(v, v.with_params(per[v.name])) for v in variants],
        max_tokens=max_tokens,
        repeats=repeats,
        sampling=chosen,
        on_progress=on_progress,
        messages=messages,
        servers=servers,
    )
    progress_done()
    figures = race_rows([(r.label, [run.stats for run in r.runs]) for r in results])
    rows = [_row_json(row, result) for row, result in zip(figures, results)]
    if as_json:
        print(
            json.dumps(
                {
                    "backend": loaded.name,
                    "device": loaded.device,
                    "model": loaded.model_name,
                    "prompt_tokens": len(ids),
                    "max_tokens": max_tokens,
                    "repeats": repeats,
                    "sampling": chosen.__dict__,
                    "decoders": rows,
                },
                ensure_ascii=False,
            )
        )
        return
    table = Table(
        title=f"{loaded.model_name} on {loaded.name}/{loaded.device} — "
        f"median of {repeats}, decoders run one after another",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        collapse_padding=True,
    )
    labels = [str(row["decoder"]) for row in rows]
    columns = ("decoder", "tok/s", "speedup", "oracle", "eff.", "tok/step", "accept")
    for column in (*columns, "tokens", "exact"):
        if column == "decoder":  # a variant's spelling is read whole
            table.add_column(column, no_wrap=True, min_width=len(max(labels, key=len)))
        else:
            table.add_column(column, justify="right")
    for row in rows:
        same = row["identical_to_greedy"]
        if same is None:
            same_text = "—"
        elif same:
            same_text = "yes"
        elif row["first_divergence"] is None:
            same_text = "no (text)"
        else:
            div = row["first_divergence"]
            same_text = (
                f"no @ {div['index']} (margin {div['margin']:.2g})"
                if div["margin"] is not None
                else f"no @ {div['index']} (length)"
            )
        table.add_row(
            row["decoder"],
            f"{row['tokens_per_second']:.1f}",
            "—" if row["speedup"] is None else f"{row['speedup']:.2f}×",
            "—" if row["oracle"] is None else f"{row['oracle']:.2f}×",
            "—" if row["efficiency"] is None else f"{row['efficiency']:.2f}",
            f"{row['tokens_per_step']:.2f}",
            f"{row['acceptance_rate']:.0%}",
            str(row["tokens"]),
            same_text,
        )
    Console(file=sys.stdout).print(table)
