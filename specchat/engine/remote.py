"""The engine's API over a remote server's stream: the same events, so every screen and report
reads a server's answer as it reads a local one.

`RemoteEngine` keeps the protocol of `local.Engine` (`protocol.py`); its loop sends the
request's messages to the server and turns the chunks into `StepEvent`s through
`ServerSteps` — coloured runs only where the server's own counters say a draft was accepted — then a
`DoneEvent` with the figures the server reported. A remote server names no token ids, so a step's
`tokens` hold `UNKNOWN_TOKEN` once per token the server counted, and none where it counts nothing.

The stream is read in a thread of its own, so a cancel (Esc, Ctrl+C) closes it at once even while
the server is silent, and what arrived is kept. A server that breaks off mid-answer (an error, a
stall past the timeout, a dropped connection) ends the answer with finish reason "error" and the
one-line reason; a server that cannot be reached, or refuses the request, raises RemoteError.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

from specchat.backends.base import ChatMessage
from specchat.backends.remote import RemoteBackend, RemoteError, ServerChunk
from specchat.decoding.base import Decoder
from specchat.decoding.sources import NO_SOURCES, DraftSources
from specchat.engine.events import DoneEvent, Event, StepEvent
from specchat.engine.protocol import AnswerEngine, Cancel, GenerationRequest
from specchat.engine.server_steps import NONE, NOTES, PER_TOKEN, TOTALS, ServerStep, ServerSteps
from specchat.engine.stats import GenerationStats
from specchat.errors import SpecchatError
from specchat.prompting import FittedChat

UNKNOWN_TOKEN = -1  # a token the server counted but did not name
_POLL_SECONDS = 0.05  # how often a waiting answer looks at its cancel tokens
_END = object()

FINISH = {"length": "max_tokens", "stop": "eos"}


class RemoteEngine(AnswerEngine):
    """Runs answers on a `RemoteBackend` with the server's own method (the `server` decoder)."""

    def __init__(self, backend: RemoteBackend, decoder: Decoder) -> None:
        super().__init__(decoder)
        self.backend = backend
        self.reports: str | None = None  # what the last answer's server reported (server_steps)

    @property
    def note(self) -> str:
        """What the status line says about the server's figures (empty before any answer)."""
        return NOTES.get(self.reports, "") if self.reports else ""

    def _prompt(
        self,
        messages: list[ChatMessage],
        raw: bool,
        previous_answer: str | None,
        saved: object | None,
    ) -> tuple[tuple[int, ...], DraftSources, tuple[ChatMessage, ...]]:
        """The conversation itself: the server applies its own template and drafts from what it
        keeps."""
        if raw:
            raise SpecchatError("--raw: a remote server answers chat messages, not raw text")
        return (), NO_SOURCES, tuple(messages)

    def fit(self, messages: Sequence[ChatMessage], max_tokens: int) -> FittedChat:
        """The server keeps its own window: the chat goes as it is."""
        return FittedChat(list(messages), 0, 0)

    def generate(self, request: GenerationRequest, cancel: Cancel = None) -> Iterator[Event]:
        return self._generate(request, self._cancel_flags(cancel))

    def _generate(
        self, request: GenerationRequest, cancel_flags: tuple[threading.Event, ...]
    ) -> Iterator[Event]:
        if not request.messages:
            raise SpecchatError("a remote server answers chat messages, not raw text (drop --raw)")
        self._take_switch()
        decoder = self.decoder.name
        stats = GenerationStats().with_decoder(
            decoder, {"server": self.backend.base_url, "model": self.backend.model_name}
        )
        if any(flag.is_set() for flag in cancel_flags):  # stopped before it was sent
            yield DoneEvent("cancelled", (), (), "", stats)
            return
        sampling = request.sampling
        start = time.perf_counter()
        stream = self.backend.stream_chat(
            request.messages,
            max_tokens=request.max_tokens,
            stop=request.stop,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            seed=sampling.seed,
        )
        chunks: queue.Queue = queue.Queue()
        reader = threading.Thread(target=_read, args=(stream, chunks), daemon=True)
        reader.start()
        steps = ServerSteps()
        text = ""
        tokens = 0
        finish: str | None = None
        error: str | None = None
        last_at: float | None = None  # when the previous chunk came
        try:
            while True:
                if any(flag.is_set() for flag in cancel_flags):
                    finish = "cancelled"
                    break
                try:
                    item = chunks.get(timeout=_POLL_SECONDS)
                except queue.Empty:
                    continue
                if item is _END:
                    break
                if isinstance(item, SpecchatError):  # the reader's RemoteError
                    error = str(item)
                    break
                chunk: ServerChunk = item
                now = time.perf_counter()
                if chunk.finish_reason:
                    finish = FINISH.get(chunk.finish_reason, chunk.finish_reason)
                    if finish == "eos" and request.stop:
                        finish = "stop"  # the server says "stop" for both; it may be ours
                since = 0.0 if last_at is None else now - last_at
                done = steps.add(chunk, since, ended=finish == "eos")
                last_at = now
                for step in done:
                    event = _event(step, decoder)
                    if stats.time_to_first_token is None and step.text:
                        stats = replace(stats, time_to_first_token=now - start)
                    text += step.text
                    tokens += step.tokens
                    stats = stats.with_step(event)
                    yield event
        finally:
            stream.close()  # at once on a cancel or an error; the reader thread then ends
        for step in steps.finish():
            event = _event(step, decoder)
            text += step.text
            tokens += step.tokens
            stats = stats.with_step(event)
            yield event
        self.reports = steps.reports
        if finish is None and error is None:
            error = f"{self.backend.base_url} ended the stream before the answer was finished"
        if error is not None:
            finish = "error"
        yield DoneEvent(
            finish_reason=finish,
            prompt_token_ids=(),
            token_ids=(UNKNOWN_TOKEN,) * tokens,
            text=text,
            stats=_server_figures(stats, steps),
            error=error,
        )


def _read(stream, chunks: queue.Queue) -> None:
    """The reader thread: chunks, then an error or the end, into the queue."""
    try:
        for chunk in stream:
            chunks.put(chunk)
    except RemoteError as exc:
        chunks.put(exc)
    except Exception as exc:  # a stream closed under the reader by a cancel, or a client bug
        chunks.put(RemoteError(f"{type(exc).__name__}: {exc}"))
    finally:
        chunks.put(_END)


def _event(step: ServerStep, decoder: str) -> StepEvent:
    return StepEvent(
        tokens=(UNKNOWN_TOKEN,) * step.tokens,
        text=step.text,
        drafted=step.drafted,
        accepted=step.accepted,
        decoder=decoder,
        seconds=step.seconds,
    )


def _server_figures(stats: GenerationStats, steps: ServerSteps) -> GenerationStats:
    """The answer's stats with what the server reported at the end. llama-server: its prompt
    size and timings (it times decoding from its first token on, which came free with the prompt:
    scaled to all tokens, as for the library peers in bench). vLLM: its speculation totals. Any
    server: the token counts of `usage`. What no server reported stays 0 (steps, drafted)."""
    changes: dict[str, object] = {}
    usage = steps.usage
    if usage is not None and usage.prompt_tokens is not None:
        changes["prompt_tokens"] = usage.prompt_tokens
    last = steps.last
    if steps.reports == PER_TOKEN and last is not None:
        if last.prompt_ms is not None:
            changes["prefill_seconds"] = last.prompt_ms / 1000.0
        n = stats.generated_tokens
        if last.generated_ms is not None and n > 1:
            changes["decode_seconds"] = last.generated_ms / 1000.0 * n / (n - 1)
        return replace(stats, **changes)
    # text-only steps: the counts are the server's totals, or unknown
    changes.update(
        generated_tokens=(usage.completion_tokens or 0) if usage is not None else 0,
        steps=0,
        drafted=0,
        accepted=0,
    )
    if stats.time_to_first_token is not None:
        changes["prefill_seconds"] = stats.time_to_first_token
    if steps.reports == TOTALS and last is not None:
        changes.update(
            steps=last.spec_steps or 0,
            drafted=last.spec_drafted or 0,
            accepted=last.spec_accepted or 0,
        )
        if last.generation_ms is not None:
            changes["decode_seconds"] = last.generation_ms / 1000.0
    assert steps.reports in (TOTALS, NONE)
    return replace(stats, **changes)
