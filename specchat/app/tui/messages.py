"""Messages the worker threads post to the UI: small, immutable, safe to build off the event loop.

Workers only ever call `post_message` with these; every state change happens in handlers on the
event loop (toolong's pattern). Progress messages may replace an older one still in the queue.
An answer's steps do not come as messages but through a buffer (`streaming.py`), so the engine's
pace never sets the UI's.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from textual.message import Message

from specchat.answers import AnswerRecord
from specchat.engine.events import DoneEvent, StepEvent
from specchat.evaluation.race import Lane


@dataclass
class LoadProgress(Message):
    """The model loader said what it is doing."""

    text: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LoadProgress)


@dataclass
class ModelLoaded(Message):
    """The session loaded the model and made its engine, in `seconds`; `warning`: why the chosen
    decoder could not be built (the backend's default runs)."""

    seconds: float
    warning: str | None = None


@dataclass
class ModelFailed(Message):
    error: str


@dataclass
class AnswerDone(Message):
    """The answer ended; `record`: the answer as its events made it, finished (its steps kept
    with the model's pass costs), which the chat stores. `taken` is set once the screen has
    taken it in: the worker waits for that before what follows an answer on the model thread."""

    answer_id: int
    event: DoneEvent
    record: AnswerRecord
    taken: threading.Event = field(default_factory=threading.Event)


@dataclass
class AnswerFailed(Message):
    answer_id: int
    error: str


@dataclass
class TurnsLeftOut(Message):
    """The conversation outgrew the context window: the answer's prompt leaves out its
    `left_out` earliest messages."""

    answer_id: int
    left_out: int
    n_ctx: int


@dataclass
class DecoderSwitched(Message):
    """The session's decoder is `name`: built off the event loop and handed to the engine, or
    chosen for when the model is loaded, or its settings changed; mid-answer, from the next
    step."""

    name: str
    mid_answer: bool


@dataclass
class DecoderFailed(Message):
    name: str
    error: str


@dataclass
class RaceStarted(Message):
    pane: int


@dataclass
class RaceProgress(Message):
    """Pane `pane`'s run has produced `tokens` tokens so far (posted a few times a second)."""

    pane: int
    tokens: int

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RaceProgress) and message.pane == self.pane


@dataclass
class RaceDone(Message):
    """Pane `pane`'s run ended: its done event and every step event, for the replay."""

    pane: int
    event: DoneEvent
    steps: tuple[StepEvent, ...]


@dataclass
class RaceFailed(Message):
    pane: int
    error: str


@dataclass
class RaceFinished(Message):
    """All panes ran (or the race was stopped): every lane, judged against the baseline's."""

    lanes: tuple[Lane, ...] = ()
