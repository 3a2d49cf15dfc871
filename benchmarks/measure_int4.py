"""llama.cpp against the int4 runtime on the bundled model, in one run.

Prints each runtime's 1-token pass (ms) and its k = 2, 4, 8, 16 chain passes as multiples of its
own 1-token pass, behind 256 cached tokens, as the draft policy prices them (`time_passes`: each
pass after settled plain passes of its own runtime, charged what it slows the plain passes after
it; medians over rounds, the runtimes taken in turn so load changes hit both alike), then greedy
tokens/s over 128 tokens of a short chat prompt (median of a few runs) and whether the two greedy
answers agree. Each runtime first runs `WARM_UP` plain passes of its own: after the other
runtime's, one untimed pass did not settle it on an Intel Xeon (int4's one-token pass read 5.6 ms
where its greedy loop ran 3.1 ms a token, and every multiple of it read flattered;
docs/bench-log.md, session 45).

    PYTHONPATH=. python benchmarks/measure_int4.py [--threads 2] [--repeats 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from specchat import memory_probe
from specchat.backends.base import Block, ChatMessage
from specchat.bundled import bundled_gguf
from specchat.prompting import chat_prompt_ids

# the pass costs of the thread count asked for: it does not follow the load here
os.environ.setdefault("SPECCHAT_ADAPT_THREADS", "0")

SIZES = (1, 2, 4, 8, 16)
CONTEXT = 256
GREEDY_TOKENS = 128
WARM_UP = 12  # untimed plain passes a runtime runs before its sizes are timed, each round
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
FILLER = (
    "The history of the lighthouse goes back to antiquity, when fires were lit on hilltops to "
    "guide ships; later towers carried lamps, then lenses that threw the light far out to sea. "
)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load(threads: int):
    import torch

    from specchat.backends.int4.backend import Int4Backend
    from specchat.backends.llama import LlamaBackend
    from specchat.models import bundled_gguf

    path = bundled_gguf()
    say(f"loading {path.name} on llama.cpp and on the int4 runtime ({threads} threads)")
    llama = LlamaBackend(path, n_ctx=2048, threads=threads, max_branches=1)
    started = time.perf_counter()
    int4 = Int4Backend(path, n_ctx=2048, threads=threads, progress=lambda m: say(f"  int4: {m}"))
    say(f"  int4 loaded in {time.perf_counter() - started:.1f} s")
    torch.set_num_threads(threads)
    return {"llama.cpp": llama, "int4": int4}


def warm_up(backend, plain: Block, context: int) -> None:
    """`WARM_UP` untimed one-token passes of `backend` behind `context` cached tokens."""
    for _ in range(WARM_UP):
        backend.evaluate(plain)
        backend.rollback(context)


def settled_seconds(backend, chain: list[int], context: int) -> float:
    """Seconds of a pass over `chain` behind `context` cached tokens, timed as decoding meets it:
    after `WARM_UP` untimed one-token passes of the same runtime. Right after the other
    runtime's (or build's, or model's) passes, whose threads still spin on the same cores, one
    settling pass was not enough: int4's one-token pass read 5.6 ms where its greedy loop ran
    3.1 ms a token, and every multiple of it read flattered (docs/bench-log.md, sessions 35
    and 45)."""
    warm_up(backend, Block.chain(chain[:1]), context)
    started = time.perf_counter()
    backend.evaluate(Block.chain(chain))
    seconds = time.perf_counter() - started
    backend.rollback(context)
    return seconds


def pass_costs(backends: dict, repeats: int) -> dict[str, dict[int, float]]:
    """Median seconds of a k-token chain pass behind CONTEXT cached tokens, per runtime and k, as
    the draft policy's table times them (`time_passes`, one sweep a runtime a round)."""
    from specchat.backends.block_cost import time_passes

    times: dict[str, dict[int, list[float]]] = {name: {k: [] for k in SIZES} for name in backends}
    plain = {}
    for name, backend in backends.items():
        filler = (backend.tokenize(FILLER) * CONTEXT)[:CONTEXT]
        backend.rollback(0)
        backend.prefill(filler)
        plain[name] = Block.chain(filler[:1])
    for repeat in range(repeats):
        if repeat % 10 == 0:
            say(f"  timing passes: round {repeat + 1} of {repeats}")
        for name, backend in backends.items():
            warm_up(backend, plain[name], CONTEXT)
            for k, seconds in time_passes(backend, SIZES, 1).items():
                times[name][k].append(seconds)
    return {
        name: {k: statistics.median(v) for k, v in per_k.items()} for name, per_k in times.items()
    }


def greedy(backend, prompt: list[int]) -> tuple[list[int], float]:
    """GREEDY_TOKENS greedy tokens after the prompt (past any end of turn), and their seconds."""
    backend.rollback(0)
    backend.prefill(prompt[:-1])
    token = prompt[-1]
    out: list[int] = []
    started = time.perf_counter()
    for _ in range(GREEDY_TOKENS):
        logits = backend.evaluate(Block.chain([token]))
        backend.commit([0])
        token = int(np.argmax(logits[0]))
        out.append(token)
    return out, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--greedy-runs", type=int, default=3)
    args = parser.parse_args()
    backends = load(args.threads)
    memory = memory_probe.probe(bundled_gguf().stat().st_size)
    say(f"chain passes behind {CONTEXT} cached tokens, {args.repeats} repeats")
    costs = pass_costs(backends, args.repeats)
    say(f"greedy, {GREEDY_TOKENS} tokens, {args.greedy_runs} runs each")
    rates: dict[str, list[float]] = {name: [] for name in backends}
    answers: dict[str, list[int]] = {}
    for run in range(args.greedy_runs):
        for name, backend in backends.items():
            prompt = chat_prompt_ids(backend, [ChatMessage("user", PROMPT)])
            tokens, seconds = greedy(backend, prompt)
            rates[name].append(len(tokens) / seconds)
            answers[name] = tokens
            say(f"  run {run + 1}: {name} {len(tokens) / seconds:.1f} tok/s")

    print(f"\nbundled SmolLM2-135M Q4_1, {args.threads} threads, behind {CONTEXT} cached tokens")
    print(f"{'runtime':<10} {'1-token ms':>10}" + "".join(f"{f'k={k}':>8}" for k in SIZES[1:]))
    for name, per_k in costs.items():
        one = per_k[1]
        ratios = "".join(f"{per_k[k] / one:>7.2f}x" for k in SIZES[1:])
        print(f"{name:<10} {one * 1e3:>10.2f}{ratios}")
    llama_one, int4_one = costs["llama.cpp"][1], costs["int4"][1]
    print(f"int4 1-token pass / llama.cpp's: {int4_one / llama_one:.2f}")
    print(f"before the passes, {memory.describe()}")
    print(f"\ngreedy tok/s over {GREEDY_TOKENS} tokens (median of {args.greedy_runs})")
    medians = {name: statistics.median(r) for name, r in rates.items()}
    for name, rate in medians.items():
        print(f"{name:<10} {rate:>8.1f}")
    print(f"int4 / llama.cpp: {medians['int4'] / medians['llama.cpp']:.2f}")
    same = 0
    while same < GREEDY_TOKENS and answers["int4"][same] == answers["llama.cpp"][same]:
        same += 1
    print(f"greedy answers agree on the first {same} of {GREEDY_TOKENS} tokens")
    for backend in backends.values():
        backend.close()


if __name__ == "__main__":
    main()
