"""Running a benchmark: every question through every method on one loaded model.

Each turn of a question is a race (`evaluation.race`): the methods run one after another (greedy
first, as the baseline and as the reference for exactness), repeated, and each keeps the median of
its decoding seconds. A multi-turn question is a conversation: each later turn sees the earlier turns
with greedy's answers, so every method answers exactly the same prompts. With a `BenchHistory`, the
questions run as one long history: each is a chat of its own, saved (with greedy's answers) before
the next begins, so decoders that draft from saved chats see every earlier question — and all
methods the same store.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from specchat.backends.base import Backend, ChatMessage
from specchat.bench.data import Question
from specchat.bench.history import BenchHistory
from specchat.bench.summary import QuestionRow
from specchat.decoding.sampling import SamplingParams
from specchat.decoding.sources import DraftSources
from specchat.errors import SpecchatError
from specchat.evaluation.race import Entrant, Lane, RaceTurn, RunFinished, race
from specchat.prompting import chat_prompt_ids, turn_start


@dataclass
class MethodTotals:
    """One method's figures over a question's turns."""

    tokens: int = 0
    seconds: float = 0.0  # the medians of its turns' decoding seconds, prefill excluded
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    oracle_seconds: float = 0.0  # the oracle over its drafter's proposals, in pass-cost seconds
    plain_seconds: float = 0.0
    identical: bool = True
    divergence: dict | None = None  # the question's first difference from greedy
    inexact_steps: int = 0  # soft matching's (not the target's distribution)
    distance: float = 0.0
    ending_tokens: int = 0  # GenerationStats.ending_tokens

    def add(self, lane: Lane, turn_index: int) -> None:
        last = lane.last.stats
        self.tokens += last.generated_tokens
        self.seconds += statistics.median(run.stats.decode_seconds for run in lane.runs)
        self.steps += last.steps
        self.drafted += last.drafted
        self.accepted += last.accepted
        self.inexact_steps += last.inexact_steps
        self.distance += last.distance
        self.ending_tokens += last.ending_tokens
        if lane.oracle is not None:
            self.oracle_seconds += lane.oracle.seconds
            self.plain_seconds += lane.oracle.plain_seconds
        if self.identical and lane.identical is False:
            self.identical = False
            if lane.divergence is not None:
                self.divergence = {"turn": turn_index, **lane.divergence.as_dict()}


def question_rows(
    backend: Backend,
    questions: list[Question],
    methods: Sequence[Entrant],
    *,
    baseline: str,
    max_tokens: int,
    repeats: int,
    on_run: Callable[[], None] | None = None,
    saved: BenchHistory | None = None,
    sampling: SamplingParams = SamplingParams(),  # frozen: one shared default is safe
) -> Iterator[list[QuestionRow]]:
    """Each question's rows, a row per method, as the question ends (a bench stopped half-way
    reports the questions it finished); `methods` start with the baseline. With a temperature
    every method samples (greedy's lane too: one pass a token, the speed baseline) and nothing
    is compared token for token."""
    for question in questions:
        rows: list[QuestionRow] = []
        history: list[ChatMessage] = []
        totals = {m.label: MethodTotals() for m in methods}
        for turn_index, text in enumerate(question.turns):
            history.append(ChatMessage("user", text))
            prompt = chat_prompt_ids(backend, history)
            sources = DraftSources(
                turn_start=turn_start(backend, history, prompt),
                saved=saved.index if saved is not None else None,
            )
            turn = RaceTurn(tuple(history), tuple(prompt), max_tokens, sampling, sources=sources)

            def heard(event) -> None:
                if on_run is not None and isinstance(event, RunFinished):
                    on_run()

            lanes = race(backend, turn, methods, baseline=baseline, repeats=repeats, on_event=heard)
            for lane in lanes:
                if lane.error:
                    raise SpecchatError(f"{lane.label}: {lane.error}")
                totals[lane.label].add(lane, turn_index)
            history.append(ChatMessage("assistant", lanes[0].last.text))
        if saved is not None:
            saved.record(question.turns[0], history)
        for method in methods:
            total = totals[method.label]
            judged = method.compared_by is not None and sampling.greedy
            rows.append(
                QuestionRow(
                    question.question_id,
                    question.category,
                    method.label,
                    total.tokens,
                    total.seconds,
                    total.steps,
                    total.drafted,
                    total.accepted,
                    total.identical if judged else None,
                    total.divergence,
                    total.oracle_seconds or None,
                    total.plain_seconds or None,
                    total.inexact_steps,
                    total.distance,
                    total.ending_tokens,
                )
            )
        yield rows
