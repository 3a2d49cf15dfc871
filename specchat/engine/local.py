"""The generation loop: prefill, decoder steps, detokenizing, stopping, events.

`Engine.generate` returns an iterator that a worker thread (the TUI's, or `Engine.start`'s for
the CLI) drives; `protocol.py` says what it shares with a remote server's engine. Commands from other threads — cancel and switch — are only read between steps,
so a decoder never sees its backend change under it. Each generation has its own cancel tokens,
never cleared, so a cancel that comes before the loop starts still stops it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

from specchat.answer_steps import measured_pass_costs, rejected_text
from specchat.backends.base import Backend, ChatMessage, Exactness, sync_cache
from specchat.decoding.base import Decoder
from specchat.decoding.sampling import Sampler
from specchat.decoding.sources import DraftSources
from specchat.engine.detokenizer import Detokenizer
from specchat.engine.events import DoneEvent, Event, StepEvent
from specchat.engine.loops import LoopWatch
from specchat.engine.protocol import AnswerEngine, Cancel, GenerationRequest
from specchat.engine.stats import GenerationStats
from specchat.errors import SpecchatError
from specchat.prompting import (
    FittedChat,
    chat_prompt_ids,
    fit_to_context,
    raw_prompt_ids,
    turn_start,
)


class Engine(AnswerEngine):
    """Runs one generation at a time on a backend specchat runs; decoders can be swapped between
    steps. It builds prompts with the model's own chat template and tokenizer."""

    def __init__(self, backend: Backend, decoder: Decoder) -> None:
        super().__init__(decoder)
        self.backend = backend
        self._kv_tokens: list[int] = []  # what the backend's cache holds, for prefix reuse

    def exactness(self) -> Exactness:
        return self.backend.exactness()

    def rejected_text(self, event: StepEvent) -> str:
        return rejected_text(self.backend.token_bytes, event.rejected) if event.rejected else ""

    def pass_costs(self, largest_draft: int) -> tuple[float, ...]:
        return measured_pass_costs(self.backend.block_cost, largest_draft)

    def forget_cache(self) -> None:
        """Someone else used the backend (a race): the next prompt is evaluated whole."""
        self._kv_tokens = []

    def _prompt(
        self,
        messages: list[ChatMessage],
        raw: bool,
        previous_answer: str | None,
        saved: object | None,
    ) -> tuple[tuple[int, ...], DraftSources, tuple[ChatMessage, ...]]:
        """The model's own chat template (or the raw text) through its tokenizer; where this
        turn starts and the answer being regenerated are draft sources."""
        backend = self.backend
        if raw:
            ids, start = raw_prompt_ids(backend, messages[-1].content), 0
        else:
            ids = chat_prompt_ids(backend, messages)
            start = turn_start(backend, messages, ids)
        previous = tuple(backend.tokenize(previous_answer)) if previous_answer else ()
        sources = DraftSources(turn_start=start, previous_answer=previous, saved=saved)
        return tuple(ids), sources, () if raw else tuple(messages)

    def fit(self, messages: Sequence[ChatMessage], max_tokens: int) -> FittedChat:
        return fit_to_context(self.backend, list(messages), max_tokens)

    def _prepare(self, decoder: Decoder) -> None:
        """One-off work a decoder needs (measuring block costs) before any timing starts."""
        decoder.prepare(self.backend)

    def _prefill(self, prompt: list[int]) -> None:
        """Commit all prompt tokens but the last, reusing the cached prefix of the last answer."""
        sync_cache(self.backend, self._kv_tokens, prompt[:-1])
        self._kv_tokens = prompt[:-1]

    def generate(self, request: GenerationRequest, cancel: Cancel = None) -> Iterator[Event]:
        """See `AnswerEngine.generate`; raises SpecchatError on bad input."""
        return self._generate(request, self._cancel_flags(cancel))

    def _generate(
        self, request: GenerationRequest, cancel_flags: tuple[threading.Event, ...]
    ) -> Iterator[Event]:
        backend = self.backend
        prompt = list(request.prompt_ids)
        if not prompt:
            raise SpecchatError("the prompt is empty")
        if len(prompt) >= backend.n_ctx:
            raise SpecchatError(
                f"the prompt has {len(prompt)} tokens but the context window holds "
                f"{backend.n_ctx}: shorten it or raise the context size"
            )
        _, switched_sampling = self._take_switch()
        sampler = Sampler(switched_sampling or request.sampling)
        self._prepare(self.decoder)
        detok = Detokenizer(backend.token_bytes, request.stop)
        loops = LoopWatch(backend.token_bytes)
        start = time.perf_counter()
        self._prefill(prompt)
        context = list(prompt)
        self.decoder.reset(context, request.sources)  # a draft model's prefill happens here
        stats = GenerationStats(
            prompt_tokens=len(prompt), prefill_seconds=time.perf_counter() - start
        )
        generated: list[int] = []
        finish = None
        while finish is None:
            if any(flag.is_set() for flag in cancel_flags):
                finish = "cancelled"
                break
            switched, switched_sampling = self._take_switch()
            if switched:
                if switched_sampling is not None and switched_sampling != sampler.params:
                    sampler = Sampler(switched_sampling)
                backend.rollback(len(context) - 1)
                self._prepare(self.decoder)
                self.decoder.reset(context, request.sources)
            room = min(request.max_tokens - len(generated), backend.n_ctx - len(context))
            if room <= 0:
                finish = "max_tokens" if len(generated) >= request.max_tokens else "context_full"
                break
            t0 = time.perf_counter()
            step = self.decoder.step(backend, context, sampler, room)
            seconds = time.perf_counter() - t0
            kept: list[int] = []
            text = ""
            ending = 0
            for token in step.tokens[:room]:
                if token in backend.eos_ids:
                    finish, ending = "eos", 1
                    break
                kept.append(token)
                context.append(token)
                generated.append(token)
                text += detok.add(token)
                if detok.stopped_by is not None:
                    finish = "stop"
                    break
                # token by token: a step of several tokens ends a loop where greedy's one-token
                # steps end it (checked once a step, the default's answer ran a token longer)
                if request.end_loops and loops.looping(generated):
                    finish = "repeating"
                    break
            if step.final and finish is None:
                finish = "max_tokens" if len(generated) >= request.max_tokens else "eos"
            if stats.time_to_first_token is None and kept:
                stats = replace(stats, time_to_first_token=time.perf_counter() - start)
            # one event per step, also one that only produced EOS: the figures summed from the
            # events are the stats' own
            event = StepEvent(
                tokens=tuple(kept),
                text=text,
                drafted=step.drafted,
                accepted=step.accepted,
                decoder=self.decoder.name,
                seconds=seconds,
                source=step.source,
                rejected=step.rejected,
                depth=step.depth,
                pass_seconds=step.pass_seconds,
                distance=step.distance,
                ending=ending,
            )
            stats = stats.with_step(event).with_decoder(self.decoder.name, self.decoder.values)
            yield event
        if finish != "stop":
            tail = detok.flush()
            if tail:
                yield StepEvent((), tail, 0, 0, self.decoder.name, 0.0, tail=True)
        self.decoder.finish()
        # The cache holds context[:-1] after a normal step; anything else is dropped.
        committed = min(backend.n_committed, len(context) - 1)
        backend.rollback(committed)
        self._kv_tokens = context[:committed]
        yield DoneEvent(
            finish_reason=finish,
            prompt_token_ids=tuple(prompt),
            token_ids=tuple(generated),
            text=detok.text,
            stats=stats,
        )
        # After the done event, so the answer never ends late for it: the refinements made
        # during the answer written, and a slice of a pass-cost sweep timed (up to 0.2 s), run
        # as the consumer asks for what follows the done event (every consumer iterates to the
        # end; one that stops at the done event leaves them to the next answer's end).
        backend.keep_costs(time_slice=not self.one_answer)
