"""Headless races: the same prompt through several decoders on one loaded model, timed honestly.

Decoders run one after another (never in parallel threads that would steal each other's cores),
each from an empty cache, interleaved over repeats so that drift in machine load hits all alike;
figures (`figures.race_rows`) are medians over repeats. `specchat compare`, the TUI's race screen
and `specchat bench` all build on this. Remote servers can join a race: each runs its own method on
the same conversation, and its answer is compared with greedy's by text (no token ids come back).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from specchat.backends.base import Backend, Block, ChatMessage
from specchat.backends.remote import RemoteBackend
from specchat.decoding.engine import GenerationRequest
from specchat.decoding.engines import engine_for
from specchat.decoding.events import DoneEvent, StepEvent
from specchat.decoding.oracle import OracleFigures, accepted_lengths, oracle_speedup
from specchat.decoding.registry import (
    baseline_name,
    build_decoder,
    decoder_class,
    unavailable_reason,
)
from specchat.decoding.sampling import SamplingParams
from specchat.decoding.sources import NO_SOURCES, DraftSources
from specchat.decoding.variants import DecoderVariant, server_name
from specchat.errors import SpecchatError


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
class DecoderRuns:
    """One decoder's runs in a race, and how its output compares with greedy's. `label` names
    the row: the decoder, or its variant's spelling (`pld:fixed_draft=10`)."""

    name: str
    params: dict[str, object]
    label: str = ""
    runs: list[DoneEvent] = field(default_factory=list)
    identical: bool | None = None  # None: not a greedy-family run
    divergence: Divergence | None = None
    oracle: OracleFigures | None = None  # what its drafter's proposals allow on greedy's answer
    backend: Backend | RemoteBackend | None = None  # None: the race's own backend

    def __post_init__(self) -> None:
        self.label = self.label or self.name


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


def drafter_oracle(
    backend: Backend,
    name: str,
    params: dict[str, object],
    prompt: list[int],
    answer: tuple[int, ...],
    sources: DraftSources = NO_SOURCES,
) -> OracleFigures | None:
    """The oracle for a greedy-family decoder's drafter on greedy's `answer` (None: the decoder
    is not greedy-family or has no replayable drafter, e.g. greedy itself or beam)."""
    if not decoder_class(name).greedy_family:
        return None
    decoder = build_decoder(name, params, backend)
    propose = getattr(getattr(decoder, "drafter", None), "proposal", None)
    if propose is None:
        return None
    decoder.reset(prompt, sources)
    return oracle_speedup(accepted_lengths(propose, prompt, answer), backend.block_cost)


def run_decoder(
    backend: Backend | RemoteBackend,
    name: str,
    params: dict[str, object],
    prompt: list[int],
    max_tokens: int,
    sampling: SamplingParams,
    stop: tuple[str, ...] = (),
    sources: DraftSources = NO_SOURCES,
    messages: tuple[ChatMessage, ...] = (),
    *,
    on_step: Callable[[StepEvent], None] | None = None,
    cancel: threading.Event | Iterable[threading.Event] | None = None,
) -> DoneEvent:
    """One answer from an empty cache (a remote server gets `messages`); `on_step` hears each
    step event (the TUI's race keeps them to replay the run at its measured pace), `cancel` stops
    it between steps. An answer a server broke off is an error here: its figures would mean
    nothing."""
    if not isinstance(backend, RemoteBackend):
        backend.rollback(0)
    engine = engine_for(backend, build_decoder(name, params, backend))
    request = GenerationRequest(tuple(prompt), max_tokens, stop, sampling, sources, messages)
    done = None
    for event in engine.generate(request, cancel=cancel):
        if isinstance(event, DoneEvent):
            done = event
        elif on_step is not None:
            on_step(event)
    assert done is not None
    if done.error:
        raise SpecchatError(done.error)
    return done


def race(
    backend: Backend,
    prompt: list[int],
    decoders: Sequence[tuple[DecoderVariant, dict[str, object]]],
    *,
    max_tokens: int = 256,
    repeats: int = 3,
    sampling: SamplingParams | None = None,
    on_progress: Callable[[int, int, str], None] | None = None,
    messages: tuple[ChatMessage, ...] = (),
    servers: tuple[RemoteBackend, ...] = (),
) -> list[DecoderRuns]:
    """Each decoder's runs, given as (variant, its full parameters), then each of `servers`
    running its own method on `messages` (the conversation `prompt` was made from); the baseline
    is added when missing (and sampling is off and it can run on `backend`)."""
    sampling = sampling or SamplingParams()
    entries = list(decoders)
    base = baseline_name()
    runs_base = unavailable_reason(base, backend) is None
    if sampling.greedy and runs_base and all(variant.label != base for variant, _ in entries):
        entries.insert(0, (DecoderVariant(base), {}))
    results = [DecoderRuns(variant.name, params, variant.label) for variant, params in entries]
    results += [
        DecoderRuns(server_name(), {}, backend=server, label=server.label) for server in servers
    ]
    total = repeats * len(results)
    done_runs = 0
    for _ in range(repeats):
        for result in results:
            where = result.backend or backend
            result.runs.append(
                run_decoder(
                    where,
                    result.name,
                    result.params,
                    prompt,
                    max_tokens,
                    sampling,
                    messages=messages,
                )
            )
            done_runs += 1
            if on_progress:
                on_progress(done_runs, total, result.label)
    baseline = next((r for r in results if r.label == base), None)
    if baseline is not None and sampling.greedy:
        reference = baseline.runs[-1].token_ids
        for result in results:
            if result.backend is not None:  # a server: the same text, or not
                result.identical = result.runs[-1].text == baseline.runs[-1].text
                continue
            if result is baseline or not decoder_class(result.name).greedy_family:
                continue
            result.divergence = find_divergence(
                backend, prompt, reference, result.runs[-1].token_ids
            )
            result.identical = result.divergence is None
            result.oracle = drafter_oracle(backend, result.name, result.params, prompt, reference)
        baseline.identical = True
    return results
