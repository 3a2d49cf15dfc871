"""The one thread the chat computes on, and a passing thread for work that must not wait for it.

The runtimes parallelise their passes with OpenMP: the int4 forward, llama.cpp's ggml and torch
all end up in one libgomp. libgomp gives every thread that opens a parallel region a pool of
worker threads of its own, kept for as long as that thread lives; once the process holds more
OpenMP threads than there are cores it stops spinning at barriers and sleeps in the kernel at
each one (its "throttled" spin count), hundreds of times a pass. The chat's workers run in
whichever thread the event loop's executor has free: a decoder switch mid-answer took a second
one, the next answer could land there, and from then on every pass, on every thread, ran 2-4x
slower until the app was restarted (docs/bench-log.md has the measurement).

So the chat loads its model, answers and races on `run_on_model_thread`: one long-lived thread,
one OpenMP pool for the life of the app (the command line's entry points compute in the main
thread alone, see `foreground.py`). Work that must go on while an answer holds that thread — a
decoder built mid-answer, which may load a draft model — runs in `run_in_passing_thread`, a thread
that ends with the work, and its pool with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

MODEL_THREAD = "specchat-model"
_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=MODEL_THREAD)


def run_on_model_thread(function: Callable[..., T], *args: object) -> T:
    """`function(*args)` on the model thread (at once when called there); its result or its
    exception. Blocks the calling thread (a worker's) until it is done."""
    if threading.current_thread().name.startswith(MODEL_THREAD):
        return function(*args)
    return _executor.submit(function, *args).result()


def run_in_passing_thread(function: Callable[..., T], *args: object) -> T:
    """`function(*args)` in a thread of its own that ends with it; its result or its exception."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["result"] = function(*args)
        except BaseException as exc:  # handed back to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="specchat-passing", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["result"]  # type: ignore[return-value]
