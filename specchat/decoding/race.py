"""Headless races: the same prompt through several decoders on one loaded model, timed honestly.

Decoders run one after another (never in parallel threads that would steal each other's cores),
each from an empty cache, interleaved over repeats so that drift in machine load hits all alike;
figures are medians over repeats. `specchat compare`, the TUI's race screen and `specchat bench`
all build on this.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from specchat.backends.base import Backend, Block
from specchat.decoding.engine import Engine, GenerationRequest
from specchat.decoding.events import DoneEvent
from specchat.decoding.registry import baseline_name, build_decoder, decoder_class
from specchat.decoding.sampling import SamplingParams


@dataclass
class Divergence:
    """Where a greedy-family output first differs from greedy, and how close greedy's call was
    there (top-1 minus top-2 logit): a tiny margin is float rounding, a clear one is a bug."""

    index: int
    margin: float | None  # None: one output is a prefix of the other (no choice to judge)

    def as_dict(self) -> dict[str, float | int | None]:
        margin = None if self.margin is None else round(self.margin, 6)
        return {"index": self.index, "margin": margin}


@dataclass
class DecoderFigures:
    name: str
    params: dict[str, object]
    runs: list[DoneEvent] = field(default_factory=list)
    identical: bool | None = None  # None: not a greedy-family run
    divergence: Divergence | None = None

    @property
    def tokens_per_second(self) -> float:
        return statistics.median(r.stats["tokens_per_second"] for r in self.runs)

    @property
    def tokens_per_step(self) -> float:
        return statistics.median(r.stats["tokens_per_step"] for r in self.runs)

    @property
    def acceptance_rate(self) -> float:
        return statistics.median(r.stats["acceptance_rate"] for r in self.runs)

    @property
    def tokens(self) -> int:
        return len(self.runs[-1].token_ids)

    def speedup(self, baseline: DecoderFigures | None) -> float | None:
        if baseline is None or baseline.tokens_per_second <= 0:
            return None
        return self.tokens_per_second / baseline.tokens_per_second


def first_divergence(reference: tuple[int, ...], other: tuple[int, ...]) -> int | None:
    for i, (a, b) in enumerate(zip(reference, other)):
        if a != b:
            return i
    return None if len(reference) == len(other) else min(len(reference), len(other))


def greedy_margin(
    backend: Backend, prompt: list[int], generated: tuple[int, ...], index: int
) -> float:
    """Greedy's top-1 minus top-2 logit when it chose generated[index]."""
    context = list(prompt) + list(generated[:index])
    backend.rollback(0)
    backend.prefill(context[:-1])
    row = backend.evaluate(Block.chain([context[-1]]))[0]
    backend.rollback(0)
    top2 = np.partition(row, -2)[-2:]
    return float(abs(top2[1] - top2[0]))


def find_divergence(
    backend: Backend, prompt: list[int], reference: tuple[int, ...], other: tuple[int, ...]
) -> Divergence | None:
    """Where `other` leaves greedy's `reference`, with greedy's margin there (None: identical)."""
    index = first_divergence(reference, other)
    if index is None:
        return None
    if index >= len(reference):
        return Divergence(index, None)
    return Divergence(index, greedy_margin(backend, prompt, reference, index))


def run_decoder(
    backend: Backend,
    name: str,
    params: dict[str, object],
    prompt: list[int],
    max_tokens: int,
    sampling: SamplingParams,
    stop: tuple[str, ...] = (),
) -> DoneEvent:
    """One answer from an empty cache."""
    backend.rollback(0)
    engine = Engine(backend, build_decoder(name, params, backend))
    done = None
    for event in engine.generate(GenerationRequest(tuple(prompt), max_tokens, stop, sampling)):
        if isinstance(event, DoneEvent):
            done = event
    assert done is not None
    return done


def race(
    backend: Backend,
    prompt: list[int],
    decoders: list[tuple[str, dict[str, object]]],
    *,
    max_tokens: int = 256,
    repeats: int = 3,
    sampling: SamplingParams | None = None,
    on_progress: Callable[[int, int, str], None] | None = None,
) -> list[DecoderFigures]:
    """Figures per decoder; greedy is added as the baseline when missing (and sampling is off)."""
    sampling = sampling or SamplingParams()
    entries = list(decoders)
    base = baseline_name()
    if sampling.greedy and all(name != base for name, _ in entries):
        entries.insert(0, (base, {}))
    figures = [DecoderFigures(name, params) for name, params in entries]
    total = repeats * len(figures)
    done_runs = 0
    for _ in range(repeats):
        for fig in figures:
            fig.runs.append(
                run_decoder(backend, fig.name, fig.params, prompt, max_tokens, sampling)
            )
            done_runs += 1
            if on_progress:
                on_progress(done_runs, total, fig.name)
    baseline = next((f for f in figures if f.name == base), None)
    if baseline is not None and sampling.greedy:
        reference = baseline.runs[-1].token_ids
        for fig in figures:
            if fig is baseline or not decoder_class(fig.name).greedy_family:
                continue
            fig.divergence = find_divergence(backend, prompt, reference, fig.runs[-1].token_ids)
            fig.identical = fig.divergence is None
        baseline.identical = True
    return figures


def figures_table_rows(figures: list[DecoderFigures]) -> list[dict[str, object]]:
    """One row per decoder, as `compare` prints it and `--json` writes it."""
    base = baseline_name()
    baseline = next((f for f in figures if f.name == base), figures[0] if figures else None)
    rows = []
    for fig in figures:
        speedup = fig.speedup(baseline)
        rows.append(
            {
                "decoder": fig.name,
                "params": fig.params,
                "tokens": fig.tokens,
                "tokens_per_second": round(fig.tokens_per_second, 2),
                "speedup": None if speedup is None else round(speedup, 3),
                "tokens_per_step": round(fig.tokens_per_step, 3),
                "acceptance_rate": round(fig.acceptance_rate, 3),
                "identical_to_greedy": fig.identical,
                "first_divergence": fig.divergence.as_dict() if fig.divergence else None,
            }
        )
    return rows
