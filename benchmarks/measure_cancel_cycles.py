"""Resident memory and threads over many cancel/restart cycles in one process (issue #14).

Each cycle is what Esc and a new question do: an answer starts on the bundled model (threads=1),
the first step arrives, the answer is cancelled and drained; the decoder changes every cycle
(greedy, pld, lookahead, suffix when available), so every decoder's state is built and dropped
again and again. Prints the resident set size (VmRSS) and the live thread count every `--every`
cycles. A leak shows as a line that keeps climbing; flat figures after the first hundred (caches
warming) are the expected result. Nothing touches the user's files.

    .venv/bin/python benchmarks/measure_cancel_cycles.py [--cycles 1000] [--every 100]
"""

from __future__ import annotations

import argparse
import gc
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specchat.backends.base import ChatMessage  # noqa: E402
from specchat.decoding.registry import DECODERS  # noqa: E402
from specchat.engine.events import DoneEvent  # noqa: E402
from specchat.engine.local import Engine  # noqa: E402
from specchat.engine.protocol import GenerationRequest  # noqa: E402
from specchat.models import LoadOptions, load_model  # noqa: E402
from specchat.prompting import chat_prompt_ids  # noqa: E402


def rss_mb() -> float:
    """This process's resident set size in MB, from /proc (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    args = parser.parse_args()

    backend = load_model(None, LoadOptions(threads=1, n_ctx=2048))
    names = [
        n
        for n in ("greedy", "pld", "lookahead", "suffix")
        if DECODERS[n].unavailable(backend, {}) is None
    ]
    ids = chat_prompt_ids(backend, [ChatMessage("user", "Tell me a long story about a cat.")])
    engine = Engine(backend, DECODERS["greedy"].create())
    print(
        f"decoders: {', '.join(names)}; start: {rss_mb():.1f} MB, "
        f"{threading.active_count()} threads"
    )
    print(f"{'cycle':>6} {'RSS MB':>8} {'threads':>8}")
    for cycle in range(1, args.cycles + 1):
        engine.switch(DECODERS[names[cycle % len(names)]].create())
        handle = engine.start(GenerationRequest(tuple(ids), 400))
        events = iter(handle)
        next(events)
        handle.cancel()
        done = [e for e in events if isinstance(e, DoneEvent)]
        assert done and done[0].finish_reason == "cancelled", done
        if cycle % args.every == 0:
            gc.collect()
            print(f"{cycle:>6} {rss_mb():>8.1f} {threading.active_count():>8}", flush=True)
    backend.close()


if __name__ == "__main__":
    main()
