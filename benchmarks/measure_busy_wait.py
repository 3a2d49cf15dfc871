"""An answer after a wait in which a busy process began or ended, as in a chat: the person types
for a few seconds while a build starts or finishes beside it. Each runtime's greedy answer, timed
in one process; per round: an answer alone, a busy process (a Python loop) starting during the
next wait, an answer beside it, the process ending during the next wait, an answer alone again.

    PYTHONPATH=. .venv/bin/python benchmarks/measure_busy_wait.py --rounds 4

Prints, per runtime, the median seconds of each kind of answer, its ratio to the answer alone
and how many of its steps ran on fewer threads than the full count (after the load ended, every
step on one thread is one too many). The wait (`--wait`, halved around each change of the load)
is longer than a reading of the load may span (`threads_by_load.STALE`). Measure alone: nothing
else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("SPECCHAT_ADAPT_THREADS", "1")

from specchat import cpu  # noqa: E402
from specchat.answers import build_engine, open_model  # noqa: E402
from specchat.backends.base import ChatMessage  # noqa: E402
from specchat.decoding.sampling import SamplingParams  # noqa: E402
from specchat.engine.events import DoneEvent, StepEvent  # noqa: E402
from specchat.options import RunConfig  # noqa: E402

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
BUSY = "while True: pass"
KINDS = ("alone", "load began in the wait", "load ended in the wait")


def answer(engine, backend, max_tokens: int) -> tuple[float, int]:
    """Seconds of one greedy answer, and how many of its steps ran on fewer threads."""
    request = engine.request(
        [ChatMessage("user", PROMPT)], max_tokens=max_tokens, sampling=SamplingParams()
    )
    by_load = backend.threads_by_load
    start, reduced = time.perf_counter(), 0
    for event in engine.generate(request):
        if isinstance(event, StepEvent):
            reduced += by_load.reduced
        elif isinstance(event, DoneEvent):
            break
    return time.perf_counter() - start, reduced


def runtime_rounds(runtime: str, rounds: int, wait: float, max_tokens: int) -> dict:
    backend = open_model(RunConfig(backend=runtime, decoder="greedy"))
    if getattr(backend, "threads_by_load", None) is None:
        raise SystemExit(f"{runtime}: the thread count does not follow the load here")
    engine = build_engine(backend, "greedy", {})
    seconds: dict[str, list[float]] = {kind: [] for kind in KINDS}
    reduced: dict[str, list[int]] = {kind: [] for kind in KINDS}

    def timed(kind: str) -> None:
        took, fewer = answer(engine, backend, max_tokens)
        seconds[kind].append(took)
        reduced[kind].append(fewer)

    try:
        answer(engine, backend, max_tokens)  # warm
        time.sleep(wait)
        for _ in range(rounds):
            timed("alone")
            time.sleep(wait / 2)
            busy = subprocess.Popen([sys.executable, "-c", BUSY])
            try:
                time.sleep(wait / 2)
                timed("load began in the wait")
                time.sleep(wait / 2)
            finally:
                busy.kill()
                busy.wait()
            time.sleep(wait / 2)
            timed("load ended in the wait")
            time.sleep(wait)
    finally:
        backend.close()
    return {"seconds": seconds, "reduced": reduced}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--wait", type=float, default=4.0, help="seconds between answers")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--runtimes", default="int4,llama")
    args = parser.parse_args()
    print(f"{cpu.cpu_name()}, level {cpu.level()}", flush=True)
    for runtime in args.runtimes.split(","):
        result = runtime_rounds(runtime, args.rounds, args.wait, args.max_tokens)
        alone = statistics.median(result["seconds"]["alone"])
        for kind in KINDS:
            took = result["seconds"][kind]
            print(
                f"{runtime:5} {kind:24} median {statistics.median(took):.3f} s "
                f"({statistics.median(took) / alone:.2f}x alone; "
                f"{' '.join(f'{t:.3f}' for t in took)}); steps on fewer threads: "
                f"{' '.join(str(n) for n in result['reduced'][kind])}",
                flush=True,
            )


if __name__ == "__main__":
    main()
