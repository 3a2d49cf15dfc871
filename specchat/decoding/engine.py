"""The generation loop: prefill, decoder steps, detokenizing, stopping, events.

`Engine.generate` returns an iterator that a worker thread (the TUI's, or `Engine.start`'s for
the CLI) drives. Commands from other threads — cancel and switch — are only read between steps,
so a decoder never sees its backend change under it. Each generation has its own cancel tokens,
never cleared, so a cancel that comes before the loop starts still stops it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from specchat.backends.base import Backend, ChatMessage, sync_cache
from specchat.decoding.base import Decoder
from specchat.decoding.detokenizer import Detokenizer
from specchat.decoding.events import DoneEvent, Event, StepEvent
from specchat.decoding.sampling import Sampler, SamplingParams
from specchat.decoding.sources import NO_SOURCES, DraftSources
from specchat.decoding.stats import GenerationStats
from specchat.errors import SpecchatError


@dataclass(frozen=True)
class GenerationRequest:
    """What to answer. `messages` is the conversation the prompt ids were made from (empty for a
    raw prompt): a remote server, which applies its own chat template, is sent these instead."""

    prompt_ids: tuple[int, ...]
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    sources: DraftSources = NO_SOURCES  # what drafters may copy from besides the context
    messages: tuple[ChatMessage, ...] = ()


class Engine:
    """Runs one generation at a time on one backend; decoders can be swapped between steps."""

    def __init__(self, backend: Backend, decoder: Decoder) -> None:
        self.backend = backend
        self.decoder = decoder
        self._next_decoder: Decoder | None = None
        self._next_sampling: SamplingParams | None = None
        self._lock = threading.Lock()
        self._latest_cancel: threading.Event | None = None  # the last generation asked for
        self._kv_tokens: list[int] = []  # what the backend's cache holds, for prefix reuse

    # -- commands, callable from any thread ----------------------------------------------
    def switch(self, decoder: Decoder, sampling: SamplingParams | None = None) -> None:
        """Use `decoder` from the next step on (or for the next answer when idle); with
        `sampling`, also its sampling settings (greedy -> sample must start sampling)."""
        with self._lock:
            self._next_decoder = decoder
            self._next_sampling = sampling

    def cancel(self) -> None:
        """Stop the generation asked for last — running, or returned by `generate` and not yet
        started — at its next step boundary; what it generated is kept. Generations asked for
        later are not affected, so a cancel while idle stops nothing."""
        with self._lock:
            token = self._latest_cancel
        if token is not None:
            token.set()

    # -- the loop -------------------------------------------------------------------------
    def _take_switch(self) -> tuple[bool, SamplingParams | None]:
        """(whether the decoder changed, the sampling settings that came with it)."""
        with self._lock:
            decoder, self._next_decoder = self._next_decoder, None
            sampling, self._next_sampling = self._next_sampling, None
        if decoder is None:
            return False, None
        self.decoder.finish()
        self.decoder = decoder
        return True, sampling

    def _prepare(self, decoder: Decoder) -> None:
        """One-off work a decoder needs (measuring block costs) before any timing starts."""
        decoder.prepare(self.backend)

    def _prefill(self, prompt: list[int]) -> None:
        """Commit all prompt tokens but the last, reusing the cached prefix of the last answer."""
        sync_cache(self.backend, self._kv_tokens, prompt[:-1])
        self._kv_tokens = prompt[:-1]

    def generate(
        self,
        request: GenerationRequest,
        cancel: threading.Event | Iterable[threading.Event] | None = None,
    ) -> Iterator[Event]:
        """A StepEvent per step and a final DoneEvent, computed as they are asked for; raises
        SpecchatError on bad input. Setting `cancel` (one token or several) at any moment, also
        before the first event is asked for, stops the generation; so does `Engine.cancel()`
        from the moment this returns."""
        own = threading.Event()
        with self._lock:
            self._latest_cancel = own
        if cancel is None:
            cancel = ()
        elif isinstance(cancel, threading.Event):
            cancel = (cancel,)
        return self._generate(request, (own, *cancel))

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
            for token in step.tokens[:room]:
                if token in backend.eos_ids:
                    finish = "eos"
                    break
                kept.append(token)
                text += detok.add(token)
                if detok.stopped_by is not None:
                    finish = "stop"
                    break
            if step.final and finish is None:
                finish = "max_tokens" if len(generated) + len(kept) >= request.max_tokens else "eos"
            context.extend(kept)
            generated.extend(kept)
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
                source=step.source if step.accepted else "",
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

    def start(self, request: GenerationRequest) -> GenerationHandle:
        """Run `generate` in a background thread; iterate the handle for events."""
        return GenerationHandle(self, request)


_END = object()


class GenerationHandle:
    """A generation running in its own thread; events arrive through a queue."""

    def __init__(self, engine: Engine, request: GenerationRequest) -> None:
        self.engine = engine
        self._queue: queue.Queue = queue.Queue()
        self._cancel = threading.Event()  # before the thread starts: a cancel at once is kept
        self._thread = threading.Thread(target=self._run, args=(request,), daemon=True)
        self._thread.start()

    def _run(self, request: GenerationRequest) -> None:
        try:
            for event in self.engine.generate(request, cancel=self._cancel):
                self._queue.put(event)
        except BaseException as exc:  # handed to the consumer's thread
            self._queue.put(exc)
        finally:
            self._queue.put(_END)

    def cancel(self) -> None:
        self._cancel.set()

    def __iter__(self) -> Iterator[Event]:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
