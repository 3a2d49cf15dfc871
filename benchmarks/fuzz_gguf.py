"""Crafted GGUFs against every runtime: what `specchat ask --model FILE` does with a mutated file.

A small random-weight Llama GGUF (`benchmarks/random_gguf.py`, the bundled tokenizer) is
mutated where parsers go wrong — counts, lengths, dims, offsets and types in the header and the
tensor table set to edge values, value types swapped, bytes flipped, the file truncated — and each
file is run through the CLI's own entry point (`specchat ask --model F --backend RT`), in a child
process that the parent restarts when it dies. A file passes when the command answers (exit 0) or
refuses it in one line (`specchat: error: ...`, exit 2); a traceback, any other exit, a signal
or a hang is a failure, and the file is kept in --out.

    PYTHONPATH=. python benchmarks/fuzz_gguf.py --files 5000 [--runtimes llama,int4] [--seed 0]
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from benchmarks.random_gguf import SPOT_BYTES

EDGES = (0, 1, 2, 3, 7, 255, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1)
TIMEOUT = 120.0  # seconds for one file on one runtime


def mutate(data: bytes, spots: list[tuple[int, str]], rng: random.Random) -> tuple[bytes, str]:
    """One mutated copy of `data` and what was done to it."""
    out = bytearray(data)
    header_end = spots[-1][0]
    choice = rng.random()
    if choice < 0.12:
        cut = rng.choice([rng.randrange(header_end), rng.randrange(len(data))])
        return bytes(out[:cut]), f"truncated at {cut}"
    if choice < 0.25:
        done = []
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(header_end)
            out[at] = rng.randrange(256)
            done.append(at)
        return bytes(out), f"bytes {done} randomized"
    at, kind = rng.choice(spots[:-1])
    size = SPOT_BYTES[kind]
    if kind not in ("type", "ttype") and not kind.startswith("v"):
        old = int.from_bytes(out[at : at + size], "little")
        new = rng.choice(
            [
                *EDGES,
                old + 1,
                max(old - 1, 0),
                old * 2,
                rng.randrange(2**size * 8 if size < 8 else 2**64),
            ]
        ) % (2 ** (8 * size))
        out[at : at + size] = new.to_bytes(size, "little")
        return bytes(out), f"{kind} at {at}: {old} -> {new}"
    if kind in ("type", "ttype"):
        new = rng.choice([*range(0, 42), 2**31, 2**32 - 1])
        out[at : at + 4] = new.to_bytes(4, "little")
        return bytes(out), f"{kind} at {at} -> {new}"
    new = rng.choice(EDGES) % (2 ** (8 * size))
    out[at : at + size] = new.to_bytes(size, "little")
    return bytes(out), f"value at {at} ({size} bytes) -> {new}"


# -- the child: the CLI on each file -------------------------------------------------------------


def child(runtimes: list[str]) -> None:
    """Reads file paths from stdin; for each runtime prints one JSON outcome line."""
    from specchat.app.cli import main as cli_main

    # the outcomes go out on a copy of stdout; what C code prints there lands in the log
    outcomes = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    # the paths come on stdin; `ask` would take piped text into its prompt: it gets none
    control, sys.stdin = sys.stdin, io.StringIO()
    for line in control:
        path = line.strip()
        for runtime in runtimes:
            print(json.dumps({"start": runtime}), file=outcomes, flush=True)
            argv = ["specchat", "ask", "Hi", "--model", path, "--backend", runtime]
            argv += ["--max-tokens", "2", "--threads", "1", "-d", "greedy"]
            err, out, code, raised = io.StringIO(), io.StringIO(), None, None
            sys.argv = argv
            try:
                with redirect_stderr(err), redirect_stdout(out):
                    cli_main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException as exc:  # noqa: BLE001 — a traceback is what we look for
                raised = f"{type(exc).__name__}: {exc}"
            print(json.dumps({"runtime": runtime, "code": code, "stderr": err.getvalue(),
                              "raised": raised}), file=outcomes, flush=True)  # fmt: skip


def verdict(result: dict) -> str | None:
    """None when the outcome is what a user may see; else what went wrong."""
    if result.get("raised"):
        return f"raised {result['raised'][:200]}"
    lines = [line for line in result["stderr"].splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("specchat: error:")]
    if "Traceback" in result["stderr"]:
        return "traceback"
    if result["code"] == 0:
        return None
    if result["code"] == 2 and len(errors) == 1:
        return None
    return f"exit {result['code']}: {' | '.join(lines[-3:])[:300]}"


class Child:
    def __init__(self, runtimes: list[str], env: dict, log: Path) -> None:
        """`log` collects what C code writes to the child's stderr (an assertion's message)."""
        command = [sys.executable, __file__, "--child", "--runtimes", ",".join(runtimes)]
        self.log = log
        self.noise: list[str] = []
        with open(log, "w") as sink:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sink, text=True,
                env=env, bufsize=1,
            )  # fmt: skip

    def last_words(self) -> str:
        lines = [line for line in self.log.read_text(errors="replace").splitlines() if line]
        return " | ".join(lines[-2:])[:300]

    def run(self, path: Path, runtimes: list[str]) -> list[tuple[str, dict | str]]:
        """Each runtime's outcome, or 'signal N' / 'hang' for the one the child died on."""
        import selectors

        self.process.stdin.write(f"{path}\n")
        self.process.stdin.flush()
        outcomes: list[tuple[str, dict | str]] = []
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        current = None
        while len(outcomes) < len(runtimes):
            if not selector.select(timeout=TIMEOUT):
                self.process.kill()
                self.process.wait()
                outcomes.append((current or "?", "hang"))
                return outcomes
            line = self.process.stdout.readline()
            if not line:
                code = self.process.wait()
                how = f"signal {-code}" if code < 0 else f"exit {code}"
                outcomes.append((current or "?", f"died: {how}: {self.last_words()}"))
                return outcomes
            try:
                message = json.loads(line)
            except json.JSONDecodeError:  # not an outcome: keep it for the record
                self.noise.append(line.strip()[:200])
                continue
            if "start" in message:
                current = message["start"]
            else:
                outcomes.append((message["runtime"], message))
        return outcomes

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self.alive():
            self.process.stdin.close()
            self.process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runtimes", default="llama,int4")
    parser.add_argument("--out", type=Path, default=Path("fuzz-failures"))
    parser.add_argument("--reasons", type=int, default=12, help="refusals to list")
    parser.add_argument("--arch", default="llama", help="the seed file's family (random_gguf)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    runtimes = args.runtimes.split(",")
    if args.child:
        child(runtimes)
        return
    from benchmarks.random_gguf import RandomShape, field_spots, write_random_gguf

    work = Path(tempfile.mkdtemp(prefix="specchat-fuzz-"))
    env = dict(os.environ)
    for name in ("CONFIG", "DATA", "CACHE"):  # passes measured once, for every mutated file
        env[f"SPECCHAT_{name}_DIR"] = str(work / name.lower())
    seed_file = write_random_gguf(work / "seed.gguf", RandomShape(arch=args.arch), quant="Q4_0")
    data = seed_file.read_bytes()
    spots = field_spots(data)
    rng = random.Random(args.seed)
    target = work / "fuzz.gguf"  # one name: the runtimes' cost keys are reused
    tally: collections.Counter = collections.Counter()
    reasons: collections.Counter = collections.Counter()  # refusals, digits masked
    failures: list[str] = []
    worker = Child(runtimes, env, work / "child.log")
    started = time.perf_counter()
    for index in range(args.files):
        mutated, what = mutate(data, spots, rng)
        target.write_bytes(mutated)
        if not worker.alive():
            worker = Child(runtimes, env, work / "child.log")
        for runtime, result in worker.run(target, runtimes):
            problem = result if isinstance(result, str) else verdict(result)
            if problem is None:
                tally[(runtime, "answered" if result["code"] == 0 else "refused")] += 1
                if result["code"]:
                    reasons[re.sub(r"[0-9]+", "N", result["stderr"].strip())[:90]] += 1
                continue
            tally[(runtime, "failed")] += 1
            args.out.mkdir(parents=True, exist_ok=True)
            kept = args.out / f"{index:05d}-{runtime}.gguf"
            shutil.copyfile(target, kept)
            failures.append(f"{kept}: {runtime}: {problem} ({what})")
            print(failures[-1], file=sys.stderr, flush=True)
        if not worker.alive():
            worker = Child(runtimes, env, work / "child.log")
        if (index + 1) % 100 == 0:
            rate = (index + 1) / (time.perf_counter() - started)
            print(f"{index + 1}/{args.files} files, {rate:.1f}/s, {len(failures)} failures",
                  file=sys.stderr, flush=True)  # fmt: skip
    worker.close()
    shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.files} mutated files (seed {args.seed}), each on {', '.join(runtimes)}")
    for runtime in runtimes:
        counts = {kind: tally[(runtime, kind)] for kind in ("answered", "refused", "failed")}
        print(f"{runtime:<8} " + "  ".join(f"{kind} {n}" for kind, n in counts.items()))
    print("most common refusals:")
    for reason, count in reasons.most_common(args.reasons):
        print(f"  {count:>6}  {reason}")
    print(f"failures: {len(failures)}" + (f" (kept in {args.out})" if failures else ""))
    for failure in failures[:20]:
        print(f"  {failure}")


if __name__ == "__main__":
    main()
