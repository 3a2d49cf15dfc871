"""What a draft model of the same vocabulary would buy at the sizes people run, projected from
measured pass costs.

Random-weight GGUFs of real shapes with the bundled tokenizer (`scale.py`'s files): the target
(SmolLM2-1.7B's shape by default) and each draft (135M and 360M shapes) on the same runtime. Per
runtime: the target's k-token chain passes and the draft's one-token pass, behind 256 cached
tokens (medians over repeats, taken in turn). Then, for a draft whose tokens the target takes
with probability a each (independently), greedy chain drafting of g tokens a step costs g draft
passes and one target pass of g + 1 tokens, and yields (1 - a^(g+1)) / (1 - a) tokens: the best g
and its speedup over the target's greedy for a from 0.5 to 0.9, and the a at which drafting
starts to pay. Acceptance is a parameter, not a measurement: only the bundled 135M model has real
weights here, so no pair's real agreement can be measured.

    PYTHONPATH=. python benchmarks/draft_pairing.py [--target 1.7B] [--drafts 135M,360M]
        [--quant Q4_0] [--runtimes int4,llama.cpp] [--threads 2] [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.measure_int4 import CONTEXT, FILLER, say, settled_seconds
from benchmarks.scale import model_file
from specchat import cpu
from specchat.backends.block_cost import interpolate
from specchat.backends.registry import INT4

RATES = (0.5, 0.6, 0.7, 0.8, 0.9)
TARGET_SIZES = (1, 2, 3, 4, 5, 6, 8)
MAX_DRAFT = max(TARGET_SIZES) - 1


def open_backend(runtime: str, path, threads: int):
    if runtime == INT4:
        from specchat.backends.int4.backend import Int4Backend

        return Int4Backend(path, n_ctx=1024, threads=threads)
    from specchat.backends.llama import LlamaBackend

    return LlamaBackend(path, n_ctx=1024, threads=threads, max_branches=1)


def chain_costs(backends: dict, sizes: dict[str, tuple[int, ...]], repeats: int) -> dict:
    """Median seconds of each backend's k-token chain passes behind CONTEXT cached tokens, the
    backends and sizes taken in turn each round."""
    times = {name: {k: [] for k in sizes[name]} for name in backends}
    for backend in backends.values():
        backend.rollback(0)
        backend.prefill((backend.tokenize(FILLER) * CONTEXT)[:CONTEXT])
    draft = next(iter(backends.values())).tokenize(FILLER)[: max(TARGET_SIZES)]
    for repeat in range(-1, repeats):  # round -1 warms the weights up and is not kept
        say(f"  round {repeat + 1} of {repeats}")
        for name, backend in backends.items():
            for k in sizes[name]:
                seconds = settled_seconds(backend, draft[:k], CONTEXT)
                if repeat >= 0:
                    times[name][k].append(seconds)
    return {name: {k: statistics.median(v) for k, v in ks.items()} for name, ks in times.items()}


def best_draft(target: dict[int, float], draft_pass: float, rate: float) -> tuple[int, float]:
    """(draft length, speedup over the target's greedy) of the best greedy chain drafting."""
    best = (0, 1.0)
    for length in range(1, MAX_DRAFT + 1):
        tokens = (1 - rate ** (length + 1)) / (1 - rate)
        seconds = length * draft_pass + interpolate(target, length + 1)
        speedup = tokens * target[1] / seconds
        if speedup > best[1]:
            best = (length, speedup)
    return best


def break_even(target: dict[int, float], draft_pass: float) -> float:
    """The lowest acceptance (to 0.01) at which some draft length beats the target's greedy."""
    for hundredths in range(1, 100):
        if best_draft(target, draft_pass, hundredths / 100)[0]:
            return hundredths / 100
    return 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="1.7B")
    parser.add_argument("--drafts", default="135M,360M")
    parser.add_argument("--quant", default="Q4_0", choices=("Q4_0", "Q4_K_M", "Q5_K_M"))
    parser.add_argument("--runtimes", default=f"{INT4},llama.cpp")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    drafts = args.drafts.split(",")
    rows = []
    for runtime in args.runtimes.split(","):
        say(f"{runtime}: loading the {args.target} target and the {', '.join(drafts)} drafts")
        names = [args.target, *drafts]
        backends = {
            size: open_backend(runtime, model_file(size, args.quant), args.threads)
            for size in names
        }
        sizes = {size: TARGET_SIZES if size == args.target else (1,) for size in names}
        costs = chain_costs(backends, sizes, args.repeats)
        for backend in backends.values():
            backend.close()
        rows.append((runtime, costs))

    print(f"\n{cpu.describe()}, {args.threads} threads; random-weight {args.quant} files")
    print("projected: greedy chain drafting at acceptance a per token (a parameter, not measured)")
    header = "".join(f"{f'a={rate}':>13}" for rate in RATES)
    print(
        f"{'runtime':<11}{'target':<8}{'draft':<7}{'draft ÷ target':>15}{header}{'pays from':>11}"
    )
    for runtime, costs in rows:
        target = costs[args.target]
        for size in drafts:
            draft_pass = costs[size][1]
            cells = ""
            for rate in RATES:
                length, speedup = best_draft(target, draft_pass, rate)
                cells += f"{f'{speedup:.2f}x (g={length})':>13}"
            ratio = draft_pass / target[1]
            even = break_even(target, draft_pass)
            print(
                f"{runtime:<11}{args.target:<8}{size:<7}{ratio:>15.2f}{cells}{f'a>={even:.2f}':>11}"
            )
        chain = " ".join(f"k={k} {target[k] / target[1]:.2f}x" for k in TARGET_SIZES[1:])
        print(f"{runtime:<11}{args.target} one-token pass {target[1] * 1e3:.1f} ms; {chain}")


if __name__ == "__main__":
    main()
