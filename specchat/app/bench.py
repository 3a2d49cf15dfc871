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

from specchat import __version__
from specchat.bench.data import load_questions
from specchat.bench.history import BenchHistory
from specchat.bench.peers import peers_for
from specchat.bench.report import markdown, print_report
from specchat.bench.runner import DecoderMethod, run_benchmark
from specchat.bench.summary import summarize
from specchat.decoding.registry import (
    baseline_name,
    build_decoder,
    checked_params,
    default_race,
)
from specchat.errors import SpecchatError
from specchat.models import REMOTE_BACKEND, LoadOptions, load_model


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"specchat": __version__, "python": platform.python_version()}
    for package in ("llama-cpp-python", "transformers", "torch", "numpy"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            pass
    return found


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_bench(
    *,
    data: str | None,
    decoders: list[str],
    params: dict[str, object],
    model: str | None,
    load_options: LoadOptions,
    categories: list[str] | None,
    limit_per_category: int | None,
    max_tokens: int,
    repeats: int,
    json_out: str | None,
    markdown_out: str | None,
    peers: bool,
    command: str,
    history: bool = False,
) -> None:
    if load_options.backend == REMOTE_BACKEND:
        raise SpecchatError(
            "bench measures decoders on a model specchat runs (its baseline and exactness need "
            "logits): race a remote server with `compare --base-url URL`, and llama.cpp's own "
            "speculation with `bench --peers`"
        )
    questions = load_questions(data, categories, limit_per_category)
    names = list(dict.fromkeys([baseline_name(), *(decoders or default_race())]))
    per = checked_params(names, params)
    console = Console(file=sys.stderr)
    with console.status("loading the model…"):
        loaded = load_model(model, load_options)
    for name in names:  # unavailable decoders stop here, before any run
        build_decoder(name, per[name], loaded)
    methods = [DecoderMethod(loaded, name, per[name]) for name in names]
    if peers:
        methods += peers_for(loaded)
    total = sum(len(q.turns) for q in questions) * len(methods) * repeats
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
                rows = run_benchmark(
                    loaded,
                    questions,
                    methods,
                    max_tokens=max_tokens,
                    repeats=repeats,
                    on_run=lambda: progress.advance(task),
                    saved=saved,
                )
    finally:
        for method in methods:  # peers that run a server stop it
            close = getattr(method, "close", None)
            if close is not None:
                close()
    summary = summarize(rows, baseline_name())
    ordered_categories = list(dict.fromkeys(q.category for q in questions))
    environment = {
        "machine": f"{_cpu_name()}, {os.cpu_count()} logical cores, {platform.system()}",
        "model": loaded.model_name,
        "backend": loaded.name,
        "device": loaded.device,
        "threads": getattr(loaded, "threads", None),
        "max_tokens": max_tokens,
        "repeats": repeats,
        "history": history,  # earlier questions saved as chats, a draft source
        "versions": _versions(),
        "decoder_params": {m.name: getattr(m, "params", {}) for m in methods},
    }
    print_report(Console(file=sys.stdout), summary, ordered_categories, rows)
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


def _write_atomically(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise SpecchatError(f"cannot write {path}: {exc.strerror}") from None
