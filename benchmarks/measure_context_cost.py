"""What a k-token pass costs relative to a 1-token pass, behind growing cached contexts.

    .venv/bin/python benchmarks/measure_context_cost.py [--backend llama|hf] [--contexts 64,256,700,1500,3000]

Why: the draft policy prices a draft by these ratios (specchat/backends/block_cost.py), measured
behind one context length; a pass attends to the whole context, so the ratios move with it. Timed
as the table is (block_cost.time_passes); run it alone.
"""

from __future__ import annotations

import argparse
import random

from specchat.backends.block_cost import time_passes
from specchat.backends.registry import LLAMA_CPP, LOCAL_RUNTIMES
from specchat.models import LoadOptions, load_model

SIZES = (1, 2, 3, 4, 6, 8)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default=LLAMA_CPP, choices=LOCAL_RUNTIMES)
    parser.add_argument("--contexts", default="64,256,700,1500,3000")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    backend = load_model(None, LoadOptions(backend=args.backend), lambda *a: None)
    rng = random.Random(0)
    print("context  1-token pass  " + "  ".join(f"{k}:×" for k in SIZES[1:]))
    for context in (int(c) for c in args.contexts.split(",")):
        backend.rollback(0)
        backend.prefill([rng.randrange(200, backend.vocab_size - 1) for _ in range(context)])
        costs = time_passes(backend, SIZES, args.repeats)
        one = costs[1]
        ratios = "  ".join(f"{costs[k] / one:4.2f}" for k in SIZES[1:])
        print(f"{context:7d}  {one * 1000:9.2f} ms  {ratios}", flush=True)
    backend.close()


if __name__ == "__main__":
    main()
