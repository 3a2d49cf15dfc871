"""Races: the same turn through several entrants on one machine, timed honestly — the one
orchestrator behind `specchat compare`, the chat's race screen and `specchat bench`.

Entrants run one after another (never in parallel threads that would steal each other's cores),
each from an empty cache, interleaved over repeats so that drift in machine load hits all alike.
An entrant is a decoder (or a variant of one) on the race's model, a remote server running its own
method, or one of bench's library peers. `race_runs` yields what happens as it happens (a run
started, its token count now and then, its end with every step event, or its failure), so a screen
can show life while a run is measured; `race` collects the runs and `judge`s them against the
baseline: the same token ids (and where not, greedy's margin at the first difference), or for a
server the same text, and what each drafter's own proposals would allow (the oracle).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specchat.answers import build_engine, make_decoder
from specchat.backends.base import AnyBackend, Backend, Block, ChatMessage
from specchat.decoding import draft_policy, recycled
from specchat.decoding.registry import decoder_class
from specchat.decoding.sampling import SamplingParams
from specchat.decoding.sources import NO_SOURCES, DraftSources
from specchat.decoding.speculative import SpeculativeDecoder
from specchat.engine.events import DoneEvent, Event, StepEvent
from specchat.engine.protocol import Cancel, GenerationRequest
from specchat.errors import SpecchatError
from specchat.evaluation.variants import DecoderVariant
from specchat.metrics.oracle import OracleFigures, accepted_lengths, oracle_speedup

PROGRESS_SECONDS = 0.25  # how often a run's token count is reported while it is measured
IDS, TEXT = "ids", "text"  # how an entrant's answer is compared with the baseline's


@dataclass(frozen=True)
class RaceTurn:
    """What every entrant answers: a conversation (a raw text to continue, with `raw`), its
    prompt ids on the race's own model, and the answer's limits."""

    messages: tuple[ChatMessage, ...]
    prompt_ids: tuple[int, ...]
    max_tokens: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    raw: bool = False
    sources: DraftSources = NO_SOURCES  # what drafters may copy from besides the prompt


class Entrant(Protocol):
    """One lane of a race."""

    label: str
    compared_by: str | None  # IDS, TEXT, or None (it samples: nothing to compare)

    def run(self, turn: RaceTurn, cancel: Cancel = None) -> Iterator[Event]:
        """Step events (none, for a peer that reports only its end), then a done event."""

    def oracle(self, turn: RaceTurn, answer: Sequence[int]) -> OracleFigures | None:
        """What its drafter's proposals would allow on the baseline's `answer` (None: nothing
        to replay)."""


class DecoderEntrant:
    """A decoder from the registry, or a variant of one, on `backend` (a remote server's own
    method on a remote backend)."""

    def __init__(
        self,
        backend: AnyBackend,
        name: str,
        params: Mapping[str, object],
        label: str = "",
        sampling: SamplingParams | None = None,
    ) -> None:
        """`sampling`: its own, where it differs from the turn's (a race screen's lane runs as
        the chat runs that decoder)."""
        cls = decoder_class(name)
        self.backend, self.name, self.params = backend, name, dict(params)
        self.label = label or name
        self.sampling = sampling
        self.owns_backend = False  # `close` closes the backend (one loaded for this race)
        sampled = sampling is not None and not sampling.greedy
        self.compared_by = (
            None if sampled else TEXT if cls.needs_server else IDS if cls.greedy_family else None
        )

    def run(self, turn: RaceTurn, cancel: Cancel = None) -> Iterator[Event]:
        """A fresh engine from an empty cache: the prompt ids on the race's model, the
        conversation on a remote server (which refuses a raw text)."""
        engine = build_engine(self.backend, self.name, self.params)
        messages = () if turn.raw else turn.messages
        sampling = self.sampling or turn.sampling
        request = GenerationRequest(
            turn.prompt_ids, turn.max_tokens, (), sampling, turn.sources, messages
        )
        return engine.generate(request, cancel=cancel)

    def close(self) -> None:
        if self.owns_backend:
            self.backend.close()

    def oracle(self, turn: RaceTurn, answer: Sequence[int]) -> OracleFigures | None:
        if self.compared_by != IDS:
            return None
        decoder = make_decoder(self.name, self.params, self.backend)
        if not isinstance(decoder, SpeculativeDecoder) or not decoder.drafter.replayable:
            return None
        prompt = list(turn.prompt_ids)
        decoder.reset(prompt, turn.sources)
        lengths = accepted_lengths(decoder.drafter.proposal, prompt, answer)
        return oracle_speedup(lengths, self.backend.block_cost)


class Unreachable:
    """A lane whose entrant could not be set up (a server out of reach): its run fails with the
    reason, the others run."""

    compared_by = None

    def __init__(self, label: str, error: str) -> None:
        self.label, self.error = label, error

    def run(self, turn: RaceTurn, cancel: Cancel = None) -> Iterator[Event]:
        raise SpecchatError(self.error)

    def oracle(self, turn: RaceTurn, answer: Sequence[int]) -> None:
        return None


def line_up_entrants(
    variants: Iterable[DecoderVariant],
    backend_of: Callable[[DecoderVariant], AnyBackend],
    params_of: Callable[[DecoderVariant], Mapping[str, object]],
    sampling_of: Callable[[DecoderVariant], SamplingParams | None] = lambda variant: None,
) -> list[Entrant]:
    """A race's lanes, one per variant: its decoder on the backend it runs on (the run's model,
    or the server a `server@URL` variant names, which runs its own method without parameters),
    with its parameters and its sampling (None: the turn's); a backend that cannot be reached
    makes a lane that fails saying why while the others run. `compare`, `bench` and the chat's
    race screen line up through it."""
    entrants: list[Entrant] = []
    for variant in variants:
        try:
            backend = backend_of(variant)
        except SpecchatError as exc:
            entrants.append(Unreachable(variant.label, str(exc)))
            continue
        params = {} if variant.server is not None else params_of(variant)
        entrants.append(
            DecoderEntrant(backend, variant.name, params, variant.label, sampling_of(variant))
        )
    return entrants


@dataclass(frozen=True)
class RunStarted:
    lane: int


@dataclass(frozen=True)
class RunProgress:
    """Lane `lane`'s run has produced `tokens` tokens so far."""

    lane: int
    tokens: int


@dataclass(frozen=True)
class RunFinished:
    """Lane `lane`'s run ended: its done event, and its step events when they were kept."""

    lane: int
    done: DoneEvent
    steps: tuple[StepEvent, ...] = ()


@dataclass(frozen=True)
class RunFailed:
    lane: int
    error: str


RaceEvent = RunStarted | RunProgress | RunFinished | RunFailed


@dataclass(frozen=True)
class RaceJudged:
    """A race ended: every lane, judged against the baseline's answer (`judge`)."""

    lanes: tuple[Lane, ...]


def error_text(exc: Exception) -> str:
    """Our own errors read as they are; anything else (a bug, a runtime failing) says its kind."""
    return str(exc) if isinstance(exc, SpecchatError) else f"{type(exc).__name__}: {exc}"


def _cancelled(cancel: Cancel) -> bool:
    if cancel is None:
        return False
    flags = (cancel,) if hasattr(cancel, "is_set") else cancel
    return any(flag.is_set() for flag in flags)


def race_runs(
    turn: RaceTurn,
    entrants: Sequence[Entrant],
    *,
    repeats: int = 1,
    cancel: Cancel = None,
    keep_steps: bool = False,
) -> Iterator[RaceEvent]:
    """Every entrant's run, `repeats` rounds, one after another. A run that fails (an entrant
    that cannot run, a server that broke off: its figures would mean nothing) is reported and
    the others go on; `cancel` stops the race at the next step boundary. Every run starts from
    what decoders learn across answers (the recycled candidates, the draft policy's rates) as
    the race found it; the last run's lesson is kept."""
    cancel_flags = cancel
    learned_at_start = (recycled.checkpoint(), draft_policy.checkpoint())
    for _ in range(repeats):
        for lane, entrant in enumerate(entrants):
            if _cancelled(cancel_flags):
                return
            for restore in learned_at_start:
                restore()
            yield RunStarted(lane)
            steps: list[StepEvent] = []
            finished = False
            tokens, reported = 0, time.monotonic()
            try:
                for event in entrant.run(turn, cancel):
                    if isinstance(event, DoneEvent):
                        if event.error:
                            raise SpecchatError(event.error)
                        # as the done event comes: what the engine does after an answer (a
                        # slice of a pass-cost sweep) runs after the lane says it ended
                        finished = True
                        yield RunFinished(lane, event, tuple(steps))
                        continue
                    if keep_steps:
                        steps.append(event)
                    tokens += len(event.tokens)
                    now = time.monotonic()
                    if now - reported >= PROGRESS_SECONDS:
                        reported = now
                        yield RunProgress(lane, tokens)
                if not finished:
                    raise SpecchatError(f"{entrant.label} ended without an answer")
            except Exception as exc:  # a decoder that cannot run, or a bug: the lane says so
                if finished:  # after its answer: the lane stands, the error is a bug's
                    raise
                yield RunFailed(lane, error_text(exc))


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
class Lane:
    """One entrant's runs in a race and how its answer compares with the baseline's."""

    entrant: Entrant
    runs: list[DoneEvent] = field(default_factory=list)
    steps: tuple[StepEvent, ...] = ()  # of its last run, when kept
    error: str | None = None
    identical: bool | None = None  # None: nothing to compare (it samples, or no baseline ran)
    divergence: Divergence | None = None
    oracle: OracleFigures | None = None

    @property
    def label(self) -> str:
        return self.entrant.label

    @property
    def last(self) -> DoneEvent | None:
        return self.runs[-1] if self.runs else None


def racing(
    backend: Backend,
    turn: RaceTurn,
    entrants: Sequence[Entrant],
    *,
    baseline: str,
    repeats: int = 1,
    cancel: Cancel = None,
    keep_steps: bool = False,
) -> Iterator[RaceEvent | RaceJudged]:
    """A race as it happens: every run's events (`race_runs`), each lane keeping its runs, its
    last run's steps and its failure, then RaceJudged with the lanes judged against the lane
    labelled `baseline` (`judge`). The chat's race screen iterates it; `race` collects it."""
    lanes = [Lane(entrant) for entrant in entrants]
    for event in race_runs(turn, entrants, repeats=repeats, cancel=cancel, keep_steps=keep_steps):
        lane = lanes[event.lane]
        if isinstance(event, RunFinished):
            lane.runs.append(event.done)
            lane.steps = event.steps
        elif isinstance(event, RunFailed):
            lane.error = event.error
        yield event
    judge(backend, turn, lanes, baseline)
    yield RaceJudged(tuple(lanes))


def race(
    backend: Backend, turn: RaceTurn, entrants: Sequence[Entrant], *, on_event=None, **how
) -> list[Lane]:
    """Every entrant's runs, judged: `racing` (whose keywords `how` takes: the baseline,
    repeats, cancel, keep_steps) run to its end; `on_event` hears each race event as it
    happens."""
    lanes: list[Lane] = []
    for event in racing(backend, turn, entrants, **how):
        if isinstance(event, RaceJudged):
            lanes = list(event.lanes)
        elif on_event is not None:
            on_event(event)
    return lanes


def judge(backend: Backend, turn: RaceTurn, lanes: Sequence[Lane], baseline: str) -> None:
    """Compare each lane's last answer with the baseline lane's, when the turn is greedy and the
    baseline ran: token ids (the first difference and greedy's margin there, and the drafter's
    oracle) or, for a server, the text."""
    reference = next((lane for lane in lanes if lane.label == baseline and lane.runs), None)
    if reference is None or not turn.sampling.greedy:
        return
    ids, text = reference.last.token_ids, reference.last.text
    for lane in lanes:
        if lane.last is None or lane.entrant.compared_by is None:
            continue
        if lane is reference:
            lane.identical = True
        elif lane.entrant.compared_by == TEXT:
            lane.identical = lane.last.text == text
        else:
            lane.divergence = find_divergence(backend, turn.prompt_ids, ids, lane.last.token_ids)
            lane.identical = lane.divergence is None
            lane.oracle = lane.entrant.oracle(turn, ids)


def first_divergence(reference: Sequence[int], other: Sequence[int]) -> int | None:
    for i, (a, b) in enumerate(zip(reference, other)):
        if a != b:
            return i
    return None if len(reference) == len(other) else min(len(reference), len(other))


def greedy_margin(
    backend: Backend, prompt: Sequence[int], generated: Sequence[int], index: int
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
    backend: Backend, prompt: Sequence[int], reference: Sequence[int], other: Sequence[int]
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
    params: Mapping[str, object],
    prompt: Sequence[int],
    max_tokens: int,
    sampling: SamplingParams,
    sources: DraftSources = NO_SOURCES,
) -> DoneEvent:
    """One answer to `prompt` (ids) from an empty cache, as a race's lane runs it (for scripts
    and tests); raises what made it fail."""
    turn = RaceTurn((), tuple(prompt), max_tokens, sampling, raw=True, sources=sources)
    done = None
    for event in DecoderEntrant(backend, name, params).run(turn):
        if isinstance(event, DoneEvent):
            done = event
    assert done is not None
    if done.error:
        raise SpecchatError(done.error)
    return done
