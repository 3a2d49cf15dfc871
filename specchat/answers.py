"""One path for an answer, whoever asks for it: the chat, the line-mode chat, `ask`, `compare`,
`bench` and the race all open the model (`open_model`), build a decoder and its engine here
(`make_decoder`, `build_engine`: the one place that does) and keep an answer as its events made
it (`AnswerRecord`) — never as a widget shows it — so every entry point stores, colours and
explains the same answer the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from specchat.answer_steps import AnswerSteps, DraftStep
from specchat.backends.base import AnyBackend, Backend
from specchat.decoding.base import Decoder
from specchat.decoding.registry import build_decoder, speculates
from specchat.engine.choice import engine_for
from specchat.engine.events import DoneEvent, StepEvent
from specchat.engine.protocol import AnswerEngine
from specchat.history import StoredMessage
from specchat.models import LoadOptions, load_draft, load_model
from specchat.options import RunConfig
from specchat.run_spans import RunText


def open_model(
    config: RunConfig,
    *,
    threads: int | None = None,
    speculative: bool | None = None,
    progress: Callable[[str], None] | None = None,
) -> AnyBackend:
    """The run's model, on the runtime the configuration names or the fastest for its decoder
    (`speculative`: whether the decoders that will run draft; None: whether the run's own
    does). `threads`: the caller's choice where the configuration names none."""
    if speculative is None:
        speculative = speculates(config.decoder)
    options = LoadOptions.of(config, threads, speculative)
    return load_model(config.model, options, progress)


def _load_draft(spec: str | None, runtime: str | None, device: str, target: Backend) -> Backend:
    return load_draft(spec, LoadOptions(backend=runtime, device=device), target)


def make_decoder(name: str, params: Mapping[str, object], backend: AnyBackend) -> Decoder:
    """Decoder `name` with `params` on `backend`, its draft model loaded where it drafts with
    one; a one-line error where it cannot run there."""
    return build_decoder(name, params, backend, _load_draft)


def build_engine(backend: AnyBackend, name: str, params: Mapping[str, object]) -> AnswerEngine:
    """An answer's decoder and the engine that runs it on `backend`: specchat's own loop on a
    model it runs, the server's stream on a remote server."""
    return engine_for(backend, make_decoder(name, params, backend))


class AnswerRecord:
    """An answer as its events make it, for keeping: its text and coloured runs, its steps with
    their rejected drafts as text, the decoder that ran last, and the pass costs its oracle
    needs. `add` and `finish` run in the answer's thread (they read the model's tokens and
    costs); `stored` may run anywhere."""

    def __init__(self, engine: AnswerEngine, decoder: str) -> None:
        self._engine = engine
        self.decoder = decoder
        self.runs = RunText()
        self._steps: list[DraftStep] = []
        self._largest_draft = 0
        self.steps: AnswerSteps | None = None  # with the pass costs, once finished
        self.done: DoneEvent | None = None

    def add(self, event: StepEvent) -> str:
        """Keep a step; returns its rejected draft tokens as text."""
        rejected = self._engine.rejected_text(event)
        self.decoder = event.decoder or self.decoder
        if not event.tail:  # text held back and released at the end: no step of its own
            self._steps.append(DraftStep.of(event, rejected))
        self.runs.add_step(event.text, len(event.tokens), event.source)
        self._largest_draft = max(self._largest_draft, event.drafted)
        return rejected

    def finish(self, done: DoneEvent) -> AnswerSteps:
        """The answer ended: its final text adopted, its steps kept with the pass costs."""
        self.done = done
        self.runs.finish(done.text)
        self.steps = AnswerSteps(tuple(self._steps), self._engine.pass_costs(self._largest_draft))
        return self.steps

    def stored(self, **extra: object) -> StoredMessage:
        """The answer as the chat store keeps it (`extra`: what only the caller knows, such as
        the seconds the user waited)."""
        done = self.done
        assert done is not None, "finish the record first"
        return StoredMessage(
            "assistant",
            self.runs.text,  # the final text, or all that was shown where the answer broke off
            decoder=self.decoder,
            finish_reason=done.finish_reason,
            stats=done.stats,
            runs=list(self.runs.runs),
            steps=self.steps,
            **extra,
        )
