"""An answer generated in the calling thread, Ctrl+C stopping it at the next step.

The command-line entry points (`ask`, the line-mode chat) load the model in the main thread, and
the model's first passes (pass costs, the exactness probe) run there: torch's OpenMP pool then
lives on that thread, and parallel ops in any other thread run several times slower for as long
as it does (docs/bench-log.md has the measurement). So they generate where
the model was loaded, not through `AnswerEngine.start`; the chat loads, answers and races on its
one model thread (`model_thread.py`) and never computes in its main thread.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from specchat.engine.events import Event
from specchat.engine.protocol import AnswerEngine, GenerationRequest


@contextlib.contextmanager
def generating(
    engine: AnswerEngine, request: GenerationRequest
) -> Iterator[tuple[Iterator[Event], threading.Event]]:
    """(the answer's events, set once Ctrl+C was pressed); Ctrl+C ends the answer between steps
    and keeps what was generated (the done event says `cancelled`)."""
    interrupted = threading.Event()

    def on_interrupt(signum, frame) -> None:
        interrupted.set()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield engine.generate(request, cancel=interrupted), interrupted
    finally:
        signal.signal(signal.SIGINT, previous)
