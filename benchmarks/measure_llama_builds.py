"""llama.cpp builds against each other: the installed one (specchat's patched build) and any
other llama-cpp-python installed into a folder (e.g. the same sdist built without
scripts/patches: `pip install --target DIR WHEEL`).

Each build runs in its own process (one libllama a process), in turn, round after round, so load
changes hit all alike. Prints each build's 1-token pass (ms) and its k = 2, 4, 8 chain passes as
multiples of its own 1-token pass, behind 256 cached tokens on the bundled model (medians over
all rounds), and whether the builds' greedy logits agree bit for bit.

    PYTHONPATH=. python benchmarks/measure_llama_builds.py --build upstream=DIR [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

SIZES = (1, 2, 4, 8)
CONTEXT = 256
FILLER = (
    "The history of the lighthouse goes back to antiquity, when fires were lit on hilltops to "
    "guide ships; later towers carried lamps, then lenses that threw the light far out to sea. "
)


def child(threads: int, repeats: int) -> None:
    """One round in this process: seconds of every pass, and a digest of the logits."""
    import hashlib
    import time

    from specchat.backends.base import Block
    from specchat.backends.llama import LlamaBackend
    from specchat.models import bundled_gguf

    backend = LlamaBackend(bundled_gguf(), n_ctx=2048, threads=threads, max_branches=1)
    filler = (backend.tokenize(FILLER) * CONTEXT)[:CONTEXT]
    backend.prefill(filler)
    draft = backend.tokenize(FILLER)[: max(SIZES)]
    times: dict[int, list[float]] = {k: [] for k in SIZES}
    digest = hashlib.sha256()
    for repeat in range(repeats):
        for k in SIZES:
            started = time.perf_counter()
            logits = backend.evaluate(Block.chain(draft[:k]))
            times[k].append(time.perf_counter() - started)
            if repeat == 0:
                digest.update(logits.tobytes())
            backend.rollback(CONTEXT)
    print(json.dumps({"times": times, "logits": digest.hexdigest()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20, help="passes of each size a round")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.threads, args.repeats)
        return
    builds = {"installed": None}
    for spec in args.build:
        name, _, folder = spec.partition("=")
        builds[name] = str(Path(folder).resolve())
    times = {name: {k: [] for k in SIZES} for name in builds}
    digests = {}
    for round_ in range(args.rounds):
        for name, folder in builds.items():
            env = dict(os.environ)
            paths = [p for p in (folder, env.get("PYTHONPATH")) if p]
            env["PYTHONPATH"] = os.pathsep.join(paths)
            command = [sys.executable, __file__, "--child", "--threads", str(args.threads)]
            command += ["--repeats", str(args.repeats)]
            result = json.loads(subprocess.check_output(command, env=env))
            for k in SIZES:
                times[name][k] += result["times"][str(k)]
            digests[name] = result["logits"]
            print(f"round {round_ + 1}/{args.rounds}: {name}", file=sys.stderr, flush=True)
    print(f"\nbundled SmolLM2-135M Q4_1, {args.threads} threads, behind {CONTEXT} cached tokens")
    print(f"{'build':<12} {'1-token ms':>10}" + "".join(f"{f'k={k}':>8}" for k in SIZES[1:]))
    for name, per_k in times.items():
        medians = {k: statistics.median(v) for k, v in per_k.items()}
        ratios = "".join(f"{medians[k] / medians[1]:>7.2f}x" for k in SIZES[1:])
        print(f"{name:<12} {medians[1] * 1e3:>10.2f}{ratios}")
    same = len(set(digests.values())) == 1
    print(f"logits of every pass size: {'the same bits' if same else 'differ'} across builds")


if __name__ == "__main__":
    main()
