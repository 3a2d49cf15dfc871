"""Speed beside a busy machine, in one run: each runtime's greedy and the default decoder alone,
then beside one and two busy processes (a Python loop each), with the thread count following the
load (the default) and fixed (`SPECCHAT_ADAPT_THREADS=0`). Ratios to the same configuration alone.

    PYTHONPATH=. .venv/bin/python benchmarks/measure_busy.py --repeats 3

Each answer is a real `specchat ask --json` process on every core; the busy processes start before
it and stop after it. Measure alone: nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from specchat import cpu

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
BUSY = "while True: pass"


def tokens_per_second(runtime: str, decoder: str, adapt: bool, max_tokens: int) -> float:
    env = {**os.environ, "SPECCHAT_ADAPT_THREADS": "1" if adapt else "0"}
    env.pop("SPECCHAT_THREADS", None)  # every core, as a user runs it
    done = subprocess.run(
        [sys.executable, "-m", "specchat", "ask", "--json", "--backend", runtime, "-d", decoder,
         "--max-tokens", str(max_tokens), "--no-end-loops", PROMPT],
        capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, check=True,
    )  # fmt: skip
    last = json.loads(done.stdout.strip().splitlines()[-1])
    return float(last["stats"]["tokens_per_second"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--runtimes", default="int4,llama")
    parser.add_argument("--decoders", default="greedy,suffix")
    parser.add_argument(
        "--following-only", action="store_true",
        help="leave out the fixed count (beside two busy processes it runs at about 1 tok/s)",
    )  # fmt: skip
    args = parser.parse_args()
    print(f"{cpu.cpu_name()}, level {cpu.level()}", flush=True)
    rows = []
    for runtime in args.runtimes.split(","):
        for decoder in args.decoders.split(","):
            for adapt in (True,) if args.following_only else (True, False):
                speeds = {}
                for busy in (0, 1, 2):
                    loops = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(busy)]
                    try:
                        runs = [
                            tokens_per_second(runtime, decoder, adapt, args.max_tokens)
                            for _ in range(args.repeats)
                        ]
                    finally:
                        for loop in loops:
                            loop.kill()
                            loop.wait()
                    speeds[busy] = statistics.median(runs)
                row = (runtime, decoder, "follows load" if adapt else "fixed", speeds)
                rows.append(row)
                print(
                    f"{runtime:6} {decoder:7} {row[2]:12} alone {speeds[0]:7.1f} tok/s   "
                    f"1 busy {speeds[1]:7.1f} ({speeds[1] / speeds[0]:.2f}x)   "
                    f"2 busy {speeds[2]:7.1f} ({speeds[2] / speeds[0]:.2f}x)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
