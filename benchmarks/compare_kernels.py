"""Two builds of the int4 runtime's C in one process: pass times, old against new, and whether
their logits agree bit for bit.

Runs on one machine measured apart drift by more than a kernel change moves them (the same
one-token pass read 7.5-9.7 ms within an hour here), so both builds are loaded side by side and
their passes alternated, behind the same cached contexts; each figure is the median of the rounds,
new ÷ old. The old C comes from another tree (`git worktree add /tmp/old REV`, then
`--old /tmp/old/specchat/backends/int4/c`).

    PYTHONPATH=. python benchmarks/compare_kernels.py --old DIR [--model GGUF] [--level avx2]
        [--rounds 15] [--contexts 256,768,1536] [--sizes 1,2,4,8]
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import numpy as np

from benchmarks.measure_int4 import say, settled_seconds
from specchat.backends.base import Block
from specchat.bundled import bundled_gguf

# the thread count asked for: it does not follow the load here
os.environ.setdefault("SPECCHAT_ADAPT_THREADS", "0")

SIZES = (1, 2, 4, 8)
_FILLER = 198


def load_both(old: Path, model: Path, level: str | None, threads: int):
    """The model on the old C and on this tree's, each build compiled and cached as usual."""
    import specchat.backends.int4.kernels as kernels
    from specchat.backends.int4.backend import Int4Backend

    here = kernels._SOURCES
    try:
        kernels._SOURCES = old
        kernels._load.cache_clear()
        before = Int4Backend(model, n_ctx=2048, threads=threads, level=level)
    finally:
        kernels._SOURCES = here
        kernels._load.cache_clear()
    return before, Int4Backend(model, n_ctx=2048, threads=threads, level=level)


def compare(
    before, after, context: int, rounds: int, sizes: tuple[int, ...] = SIZES
) -> tuple[dict[int, tuple[float, float]], bool]:
    """Per size, the median seconds of (old, new) passes behind `context` filler tokens, taken in
    turn (the order flipped every round), each after settling plain passes of its own build; and
    whether a block's logits are equal at every size."""
    for backend in (before, after):
        backend.rollback(0)
        backend.prefill([_FILLER] * context)
    times: dict[tuple[int, int], list[float]] = {(k, side): [] for k in sizes for side in (0, 1)}
    for round_ in range(rounds):
        for k in sizes:
            order = ((0, before), (1, after)) if round_ % 2 else ((1, after), (0, before))
            for side, backend in order:
                chain = [_FILLER + i for i in range(k)]
                times[k, side].append(settled_seconds(backend, chain, context))
    same = True
    for k in sorted({2, *sizes}):
        logits = []
        for backend in (before, after):
            logits.append(backend.evaluate(Block.chain([_FILLER + 2 + i for i in range(k)])))
            backend.rollback(context)
        same = same and bool(np.array_equal(*logits))
    medians = {k: (statistics.median(times[k, 0]), statistics.median(times[k, 1])) for k in sizes}
    return medians, same


def main() -> None:
    from specchat import cpu

    parser = argparse.ArgumentParser()
    parser.add_argument("--old", type=Path, required=True, help="the other tree's int4 C folder")
    parser.add_argument("--model", type=Path, default=None, help="a GGUF (default: bundled)")
    parser.add_argument(
        "--level", default=None, help="avx512, avxvnni, avx2 or generic (default: the CPU's)"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--contexts", default="256,768,1536")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="tokens a pass")
    args = parser.parse_args()
    model = args.model or bundled_gguf()
    say(f"loading {model.name} on the old C ({args.old}) and on this tree's")
    before, after = load_both(args.old, model, args.level, args.threads)
    line = cpu.describe(args.level)
    print(f"{line}, {args.threads} threads, {model.name}; new ÷ old, medians of {args.rounds}")
    sizes = tuple(int(k) for k in args.sizes.split(","))
    for context in (int(c) for c in args.contexts.split(",")):
        medians, same = compare(before, after, context, args.rounds, sizes)
        cells = [f"k={k} {1e3 * old:.2f} → {1e3 * new:.2f} ms ({new / old:.3f})"
                 for k, (old, new) in medians.items()]  # fmt: skip
        print(f"behind {context:>5}: " + "  ".join(cells) + f"  bits equal: {same}", flush=True)
    before.close()
    after.close()


if __name__ == "__main__":
    main()
