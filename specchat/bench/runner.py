"""Running a benchmark: every question through every method on one loaded model.

Per question and turn, the methods run interleaved (greedy first, as the baseline and as the
reference for exactness), repeated, and each keeps the median of its decoding seconds. A
multi-turn question is a conversation: each later turn sees the earlier turns with greedy's answers,
so every method answers exactly the same prompts. With a `BenchHistory`, the questions run as one
long history: each is a chat of its own, saved (with greedy's answers) before the next begins, so
decoders that draft from saved chats see every earlier question — and all methods the same store.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from specchat.backends.base import Backend, ChatMessage
from specchat.bench.data import Question
from specchat.bench.history import BenchHistory
from specchat.bench.summary import QuestionRow
from specchat.decoding.oracle import OracleFigures
from specchat.decoding.race import drafter_oracle, find_divergence, run_decoder
from specchat.decoding.registry import decoder_class
from specchat.decoding.sampling import SamplingParams
from specchat.decoding.sources import NO_SOURCES, DraftSources
from specchat.prompting import chat_prompt_ids, turn_start


@dataclass(frozen=True)
class Outcome:
    token_ids: tuple[int, ...]
    text: str
    seconds: float  # decoding time, prefill excluded
    steps: int
    drafted: int
    accepted: int


class Method(Protocol):
    name: str
    greedy_family: bool

    def run(self, prompt: list[int], max_tokens: int, sources: DraftSources) -> Outcome: ...

    def oracle(
        self, prompt: list[int], answer: tuple[int, ...], sources: DraftSources
    ) -> OracleFigures | None:
        """What this method's drafter would allow on greedy's `answer` (None: not replayable)."""


class DecoderMethod:
    """One of our decoders, from the registry."""

    def __init__(self, backend: Backend, name: str, params: dict[str, object]) -> None:
        self.backend, self.name, self.params = backend, name, params
        self.greedy_family = decoder_class(name).greedy_family

    def oracle(
        self, prompt: list[int], answer: tuple[int, ...], sources: DraftSources = NO_SOURCES
    ) -> OracleFigures | None:
        return drafter_oracle(self.backend, self.name, self.params, prompt, answer, sources)

    def run(
        self, prompt: list[int], max_tokens: int, sources: DraftSources = NO_SOURCES
    ) -> Outcome:
        done = run_decoder(
            self.backend,
            self.name,
            self.params,
            prompt,
            max_tokens,
            SamplingParams(),
            sources=sources,
        )
        s = done.stats
        return Outcome(
            done.token_ids,
            done.text,
            s.decode_seconds,
            s.steps,
            s.drafted,
            s.accepted,
        )


def run_benchmark(
    backend: Backend,
    questions: list[Question],
    methods: list[Method],
    *,
    max_tokens: int,
    repeats: int,
    on_run: Callable[[], None] | None = None,
    saved: BenchHistory | None = None,
) -> list[QuestionRow]:
    rows: list[QuestionRow] = []
    for question in questions:
        history: list[ChatMessage] = []
        totals = {m.name: [0, 0.0, 0, 0, 0, 0.0, 0.0] for m in methods}
        identical = {m.name: True for m in methods}
        divergence: dict[str, dict | None] = {m.name: None for m in methods}
        for turn_index, turn in enumerate(question.turns):
            history.append(ChatMessage("user", turn))
            prompt = chat_prompt_ids(backend, history)
            sources = DraftSources(
                turn_start=turn_start(backend, history, prompt),
                saved=saved.index if saved is not None else None,
            )
            seconds: dict[str, list[float]] = {m.name: [] for m in methods}
            last: dict[str, Outcome] = {}
            for _ in range(repeats):
                for method in methods:
                    outcome = method.run(prompt, max_tokens, sources)
                    seconds[method.name].append(outcome.seconds)
                    last[method.name] = outcome
                    if on_run:
                        on_run()
            reference = last[methods[0].name]
            for method in methods:
                outcome = last[method.name]
                total = totals[method.name]
                total[0] += len(outcome.token_ids)
                total[1] += statistics.median(seconds[method.name])
                total[2] += outcome.steps
                total[3] += outcome.drafted
                total[4] += outcome.accepted
                oracle = getattr(method, "oracle", lambda *_: None)
                replay = oracle(prompt, reference.token_ids, sources)
                if replay is not None:
                    total[5] += replay.seconds
                    total[6] += replay.plain_seconds
                if not identical[method.name]:
                    continue  # the first divergence of a question is the one reported
                found = find_divergence(backend, prompt, reference.token_ids, outcome.token_ids)
                if found is not None:
                    identical[method.name] = False
                    divergence[method.name] = {"turn": turn_index, **found.as_dict()}
            history.append(ChatMessage("assistant", reference.text))
        if saved is not None:
            saved.record(question.turns[0], history)
        for method in methods:
            tokens, secs, steps, drafted, accepted, oracle_secs, plain_secs = totals[method.name]
            rows.append(
                QuestionRow(
                    question.question_id,
                    question.category,
                    method.name,
                    tokens,
                    secs,
                    steps,
                    drafted,
                    accepted,
                    identical[method.name] if method.greedy_family else None,
                    divergence[method.name],
                    oracle_secs or None,
                    plain_secs or None,
                )
            )
    return rows
