"""What every engine offers, local or remote: one protocol, so no caller asks which it holds.

An engine answers requests on one model: specchat's own loop over a backend it runs
(`local.Engine`), or a remote server's stream (`remote.RemoteEngine`). Both build a request from a
conversation (`request`), fit a conversation to the model's window (`fit`), emit the same events,
and take the same thread-safe commands — cancel, switch decoder, forget the cache — which
`AnswerEngine` implements once for both. `choice.engine_for` picks the engine for a backend.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from specchat.backends.base import ChatMessage, Exactness
from specchat.decoding.base import Decoder
from specchat.decoding.sampling import SamplingParams
from specchat.decoding.sources import NO_SOURCES, DraftSources
from specchat.engine.events import Event, StepEvent
from specchat.prompting import FittedChat

Cancel = threading.Event | Iterable[threading.Event] | None


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
    end_loops: bool = False  # end an answer that repeats one span (finish reason "repeating")


class AnswerEngine:
    """What every engine offers, local or remote: requests from a conversation, generation, and
    the thread-safe commands — cancel and decoder switch, read between steps, and forgetting the
    cache — implemented here once. An engine adds how it prompts (`_prompt`), fits a
    conversation to its window (`fit`) and generates (`generate`)."""

    # An engine whose process ends with its one answer (`ask`): the answer's end times nothing
    # for answers to come (a slice of a cost sweep, `block_cost.py`, would end with the process
    # unfinished, and the answer would end later for it).
    one_answer = False

    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder
        self._next_decoder: Decoder | None = None
        self._next_sampling: SamplingParams | None = None
        self._lock = threading.Lock()
        self._latest_cancel: threading.Event | None = None  # the last generation asked for

    @property
    def note(self) -> str:
        """What the status line says of the figures the engine reports ("" when nothing)."""
        return ""

    def exactness(self) -> Exactness | None:
        """Whether a block's logits equal one-token passes' on the model (probed once, then
        kept with its pass costs); None where specchat does not decode (a remote server)."""
        return None

    def rejected_text(self, event: StepEvent) -> str:
        """A step's rejected draft tokens as text ("" where the model's tokens are not known
        here, as on a remote server); call it from the answer's thread."""
        return ""

    def pass_costs(self, largest_draft: int) -> tuple[float, ...]:
        """The model's measured pass costs for the oracle of an answer whose steps drafted at
        most `largest_draft` tokens; none on a remote server, whose steps' own times stand in."""
        return ()

    # -- what each engine does its own way ---------------------------------------------------
    def _prompt(
        self,
        messages: list[ChatMessage],
        raw: bool,
        previous_answer: str | None,
        saved: object | None,
    ) -> tuple[tuple[int, ...], DraftSources, tuple[ChatMessage, ...]]:
        """(prompt ids, draft sources, the messages sent) for `request`."""
        raise NotImplementedError

    def fit(self, messages: Sequence[ChatMessage], max_tokens: int) -> FittedChat:
        """The conversation as it fits the model's context window with room for the answer."""
        raise NotImplementedError

    def generate(self, request: GenerationRequest, cancel: Cancel = None) -> Iterator[Event]:
        """A StepEvent per step, then a DoneEvent, computed as they are asked for. Setting
        `cancel` (one token or several) at any moment, also before the first event is asked
        for, stops the generation; so does `cancel()` from the moment this returns."""
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------
    def request(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int,
        sampling: SamplingParams,
        stop: tuple[str, ...] = (),
        raw: bool = False,
        previous_answer: str | None = None,
        saved: object | None = None,
        end_loops: bool = False,
    ) -> GenerationRequest:
        """A request answering `messages` (with `raw`: continuing the last one's text, no chat
        template); `previous_answer` (an answer being regenerated) and `saved` (the saved chats'
        index) are offered to the drafters where the engine drafts; `end_loops` ends an answer
        that loops (`engine.loops`)."""
        ids, sources, sent = self._prompt(list(messages), raw, previous_answer, saved)
        return GenerationRequest(ids, max_tokens, stop, sampling, sources, sent, end_loops)

    def start(self, request: GenerationRequest) -> GenerationHandle:
        """Run `generate` in a background thread; iterate the handle for events."""
        return GenerationHandle(self, request)

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

    def forget_cache(self) -> None:
        """Someone else used the model (a race): assume nothing about what its cache holds."""

    def _cancel_flags(self, cancel: Cancel) -> tuple[threading.Event, ...]:
        """This generation's own cancel token (what `cancel()` sets) and the caller's."""
        own = threading.Event()
        with self._lock:
            self._latest_cancel = own
        if cancel is None:
            cancel = ()
        elif isinstance(cancel, threading.Event):
            cancel = (cancel,)
        return (own, *cancel)

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


_END = object()


class GenerationHandle:
    """A generation running in its own thread; events arrive through a queue."""

    def __init__(self, engine: AnswerEngine, request: GenerationRequest) -> None:
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
