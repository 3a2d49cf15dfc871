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
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from specchat.engine.events import Event
from specchat.engine.protocol import AnswerEngine, GenerationRequest


@contextlib.contextmanager
def interrupt_flag() -> Iterator[threading.Event]:
    """An event Ctrl+C sets instead of raising KeyboardInterrupt, for as long as the block runs:
    work that checks it between steps stops there and keeps what it made."""
    interrupted = threading.Event()

    def on_interrupt(signum, frame) -> None:
        interrupted.set()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def generating(
    engine: AnswerEngine, request: GenerationRequest
) -> Iterator[tuple[Iterator[Event], threading.Event]]:
    """(the answer's events, set once Ctrl+C was pressed); Ctrl+C ends the answer between steps
    and keeps what was generated (the done event says `cancelled`)."""
    with interrupt_flag() as interrupted:
        yield engine.generate(request, cancel=interrupted), interrupted


class AnswerOutput:
    """Where an answer is written on stdout: a reader that goes away (`ask … | head`) stops the
    answer as Ctrl+C does, at the next step (`stop`), and what was generated is kept as it is
    then; nothing more is written, and no error is shown for it (`gone` says so)."""

    def __init__(self, stop: threading.Event) -> None:
        self.gone = False
        self._stop = stop

    def write(self, text: str) -> None:
        self.run(lambda: (sys.stdout.write(text), sys.stdout.flush()))

    def run(self, write: Callable[[], object]) -> None:
        if self.gone:
            return
        try:
            write()
        except BrokenPipeError:
            self.gone = True
            self._stop.set()
            # Python flushes stdout once more at exit: point it at nothing, so that cannot fail
            nothing = os.open(os.devnull, os.O_WRONLY)
            os.dup2(nothing, sys.stdout.fileno())
            os.close(nothing)
