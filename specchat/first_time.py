"""Work a machine does once (the int4 kernels' build) said through the progress of the load
that meets it.

Why: the build is reached from places that take no progress callback (whether the int4 runtime
can run a file asks whether its kernels build), and on a new user's first start the chat said
"loading model…" for the 8–9 s the compiler ran, with nothing to say it happens once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

_PROGRESS: ContextVar[Callable[[str], None] | None] = ContextVar("first_time", default=None)


@contextlib.contextmanager
def said_through(progress: Callable[[str], None] | None) -> Iterator[None]:
    """While the block runs (in this thread), work done once is said through `progress`."""
    token = _PROGRESS.set(progress)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def say(text: str) -> None:
    """Say `text` through the progress of the load running now, if any."""
    progress = _PROGRESS.get()
    if progress is not None:
        progress(text)
