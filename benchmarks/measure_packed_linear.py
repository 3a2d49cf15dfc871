"""What the bundled model's linear layers cost per pass, stock `nn.Linear` against oneDNN-prepacked
weights (specchat/backends/hf/packed.py), for 1…16 rows (the tokens of one pass).

The matrices are the bundled SmolLM2-135M's shapes (30 layers of q, k, v, o, gate, up, down and
the 49152-row head) with random float32 values, so the figures need no model load. Medians of
`--repeats` timings, on the threads torch is given. Run it alone: torch's threads spin-wait.

    .venv/bin/python benchmarks/measure_packed_linear.py [--threads 2] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

HIDDEN, INTERMEDIATE, KV, VOCAB, LAYERS = 576, 1536, 192, 49152, 30
LAYER = [
    (HIDDEN, HIDDEN),
    (KV, HIDDEN),
    (KV, HIDDEN),
    (HIDDEN, HIDDEN),
    (INTERMEDIATE, HIDDEN),
    (INTERMEDIATE, HIDDEN),
    (HIDDEN, INTERMEDIATE),
]


def median_ms(run, repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    weights = [torch.randn(rows, cols) for rows, cols in LAYER * LAYERS + [(VOCAB, HIDDEN)]]
    packed = [torch.ops.mkldnn._reorder_linear_weight(w) for w in weights]
    linear = torch.nn.functional.linear
    pointwise = torch.ops.mkldnn._linear_pointwise
    print(f"{'rows':>4} {'stock ms':>9} {'packed ms':>10}   (per pass, all linear layers)")
    base: tuple[float, float] | None = None
    for rows in (1, 2, 3, 4, 8, 16):
        inputs = {n: torch.randn(rows, n) for n in (HIDDEN, INTERMEDIATE)}
        with torch.inference_mode():
            stock = median_ms(
                lambda inputs=inputs: [linear(inputs[w.shape[1]], w) for w in weights],
                args.repeats,
            )
            fast = median_ms(
                lambda inputs=inputs: [
                    pointwise(inputs[w.shape[1]], p, None, "none", [], "")
                    for w, p in zip(weights, packed)
                ],
                args.repeats,
            )
        base = base or (stock, fast)
        print(
            f"{rows:>4} {stock:>9.1f} {fast:>10.1f}   "
            f"({stock / base[0]:.2f}x / {fast / base[1]:.2f}x a 1-row pass)"
        )


if __name__ == "__main__":
    main()
