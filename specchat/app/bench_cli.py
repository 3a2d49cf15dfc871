"""`specchat bench`: Spec-Bench-style speedups of decoders (and the libraries' own methods)."""

from __future__ import annotations

import json
import os
import platform
import sys
from contextlib import nullcontext
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from specchat import __version__, cpu, memory_probe
from specchat.answers import make_decoder, open_model
from specchat.backends.registry import runtime
from specchat.bench.data import load_questions
from specchat.bench.history import BenchHistory
from specchat.bench.llama_server import stopped_when_terminated
from specchat.bench.peers import peers_for
from specchat.bench.report import markdown, print_report
from specchat.bench.runner import question_rows
from specchat.bench.summary import QuestionRow, summarize
from specchat.decoding.registry import baseline_name, default_race
from specchat.errors import SpecchatError
from specchat.evaluation.race import line_up_entrants
from specchat.evaluation.variants import line_up, parse_variant
from specchat.options import RunConfig
from specchat.run_config import run_params, sampling_for

_PRICED_SIZES = (2, 3, 4, 6, 8)  # the sizes whose prices a run reports: its drafts' usual


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"specchat": __version__, "python": platform.python_version()}
    for package in ("llama-cpp-python", "transformers", "torch", "numpy"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            pass
    return found


def run_bench(
    config: RunConfig,
    *,
    data: str | None,
    params: dict[str, object],
    categories: list[str] | None,
    limit_per_category: int | None,
    json_out: str | None,
    markdown_out: str | None,
    peers: bool,
    command: str,
    history: bool = False,
) -> None:
    if config.base_url or (config.backend and not runtime(config.backend).local):
        raise SpecchatError(
            "bench measures decoders on a model specchat runs (its baseline and exactness need "
            "logits): race a remote server with `compare --race-server URL`, and llama.cpp's own "
            "speculation with `bench --peers`"
        )
    questions = load_questions(data, categories, limit_per_category)
    variants = line_up(parse_variant(spec) for spec in (config.race or default_race()))
    if any(v.server is not None for v in variants):
        raise SpecchatError("bench races local decoders: race a server with `compare`")
    names = list(dict.fromkeys(v.name for v in variants))
    per = run_params(names, config, params)
    sampling = sampling_for(None, config)
    max_tokens, repeats = config.max_tokens, config.repeats
    console = Console(file=sys.stderr)
    with console.status("loading the model…"):
        loaded = open_model(config, speculative=True)
    for variant in variants:  # unavailable decoders stop here, before any run
        make_decoder(variant.name, variant.with_params(per[variant.name]), loaded)
    memory = {"before": _memory_reading(loaded)}
    with stopped_when_terminated():  # a killed bench stops its peers' servers on the way out
        library_peers = peers_for(loaded, config.llama_server, names) if peers else []
        methods = [
            *line_up_entrants(variants, lambda v: loaded, lambda v: v.with_params(per[v.name])),
            *library_peers,
        ]
        total = sum(len(q.turns) for q in questions) * len(methods) * repeats
        stopped = False  # Ctrl+C stopped the run: it reports the questions that finished
        try:
            with Progress(
                TextColumn("[bold]bench"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            ) as progress:
                task = progress.add_task("runs", total=total)
                with BenchHistory(loaded) if history else nullcontext() as saved:
                    rows: list[QuestionRow] = []
                    try:
                        for finished in question_rows(
                            loaded,
                            questions,
                            methods,
                            baseline=baseline_name(),
                            max_tokens=max_tokens,
                            repeats=repeats,
                            on_run=lambda: progress.advance(task),
                            saved=saved,
                            sampling=sampling,
                        ):
                            rows += finished
                    except KeyboardInterrupt:
                        if not rows:
                            raise
                        stopped = True
        finally:
            for peer in library_peers:  # peers that run a server stop it
                peer.close()
    memory["after"] = None if stopped else _memory_reading(loaded)
    summary = summarize(rows, baseline_name())
    asked = len(questions)
    if stopped:
        questions = [q for q in questions if q.question_id in {r.question_id for r in rows}]
    ordered_categories = list(dict.fromkeys(q.category for q in questions))
    environment = {
        "machine": f"{cpu.cpu_name()}, {os.cpu_count()} logical cores, {platform.system()}",
        "cpu": cpu.describe(loaded.level) if loaded.level else None,
        "model": loaded.model_name,
        "backend": loaded.name,
        "device": loaded.device,
        "threads": loaded.threads,
        "max_tokens": max_tokens,
        "repeats": repeats,
        "sampling": sampling.__dict__,
        "history": history,  # earlier questions saved as chats, a draft source
        # greedy-family decoders are bitwise greedy here, or only to near-ties
        "exactness": loaded.exactness().as_dict(),
        # where the weights came from, before the runs and after: a cache or main memory
        "memory": {when: r.as_dict() if r else None for when, r in memory.items()},
        "versions": _versions(),
        "decoder_params": per,
        # a k-token pass over a plain one as drafts were priced when the runs ended: what
        # decided how much they drafted (block_cost.py: the table timed cold, refined in use)
        "pass_prices": _pass_prices(loaded),
        # Ctrl+C stopped the run: how many of the questions it reports (None: all of them)
        "stopped_after": len(questions) if stopped else None,
    }
    console = Console(file=sys.stdout)
    where = environment["cpu"] or loaded.device
    console.print(f"{loaded.model_name} on {loaded.name} · {where}", markup=False)
    if memory["before"] and memory["after"]:
        console.print(
            f"before the runs {memory['before'].describe()}; after {memory['after'].describe()}",
            markup=False,
        )
    print_report(console, summary, ordered_categories, rows)
    prices = ", ".join(f"{k} tokens {p:.2f}" for k, p in environment["pass_prices"].items())
    line = f"drafts priced at the end (plain pass = 1): {prices}"
    console.print(line, markup=False, soft_wrap=True)
    if json_out:
        result = {
            "summary": summary,
            "questions": [
                {
                    "question_id": r.question_id,
                    "category": r.category,
                    "decoder": r.decoder,
                    "tokens": r.tokens,
                    "seconds": round(r.seconds, 6),
                    "steps": r.steps,
                    "drafted": r.drafted,
                    "accepted": r.accepted,
                    "identical_to_greedy": r.identical_to_greedy,
                    "first_divergence": r.first_divergence,
                    "oracle_seconds": r.oracle_seconds,
                    "plain_seconds": r.plain_seconds,
                    # soft matching: not sampled from the target's distribution
                    "inexact_steps": r.inexact_steps,
                    "total_variation": round(r.distance, 6),
                }
                for r in rows
            ],
            "environment": environment,
        }
        _write_atomically(Path(json_out), json.dumps(result, indent=1, default=str))
    if markdown_out:
        _write_atomically(
            Path(markdown_out), markdown(summary, ordered_categories, rows, command, environment)
        )
    if stopped:
        sys.stderr.write(
            f"[stopped after {len(questions)} of {asked} questions: the report is theirs]\n"
        )
        raise KeyboardInterrupt


def _pass_prices(loaded) -> dict[int, float]:
    """A k-token pass's price over a plain one's, as the runtime prices drafts now (every
    runtime `bench` runs on prices its passes: `Backend.block_cost`)."""
    return {k: round(loaded.block_cost(k) / loaded.block_cost(1), 3) for k in _PRICED_SIZES}


def _memory_reading(loaded) -> memory_probe.MemoryReading | None:
    """Where a CPU runtime's weights come from now (a GPU's, a server's: not measured)."""
    if loaded.device != "cpu" or not loaded.model_path or not os.path.isfile(loaded.model_path):
        return None
    return memory_probe.probe(os.path.getsize(loaded.model_path))


def _write_atomically(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise SpecchatError(f"cannot write {path}: {exc.strerror}") from None
