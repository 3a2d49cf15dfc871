"""What a k-token pass costs relative to a 1-token pass, behind growing cached contexts.

    .venv/bin/python benchmarks/measure_context_cost.py [--backend llama|hf]

Why: the draft policy prices a draft by these ratios (specchat/backends/block_cost.py); a pass
attends to the whole context, so ratios measured behind a handful of tokens understate what a
draft costs in a chat answer. Medians over repeats, sizes round-robin; run it alone.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from specchat.backends.base import Block
from specchat.models import LoadOptions, load_model

SIZES = (1, 2, 3, 4, 6, 8)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="llama")
    parser.add_argument("--contexts", default="30,200,500,1000")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    backend = load_model(None, LoadOptions(backend=args.backend), lambda *a: None)
    rng = random.Random(0)
    print("context  1-token pass  " + "  ".join(f"{k}:×" for k in SIZES[1:]))
    for context in (int(c) for c in args.contexts.split(",")):
        backend.rollback(0)
        backend.prefill([rng.randrange(200, backend.vocab_size - 1) for _ in range(context)])
        base = backend.n_committed
        times: dict[int, list[float]] = {k: [] for k in SIZES}
        for _ in range(args.repeats):
            for k in SIZES:
                start = time.perf_counter()
                backend.evaluate(Block.chain([198] * k))
                times[k].append(time.perf_counter() - start)
                backend.rollback(base)
        one = statistics.median(times[1])
        ratios = "  ".join(f"{statistics.median(times[k]) / one:4.2f}" for k in SIZES[1:])
        print(f"{context:7d}  {one * 1000:9.2f} ms  {ratios}", flush=True)
    backend.close()


if __name__ == "__main__":
    main()
