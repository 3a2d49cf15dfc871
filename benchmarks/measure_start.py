"""How long `specchat ask` takes to answer a short question, start to exit, as a user runs it.

Each start is a fresh process (`python -m specchat ask QUESTION --max-tokens 8 --no-log`). The
first runs in an empty cache dir (the int4 kernels built, the pass costs timed, the weights laid
out and kept: what a new user's first start pays), the others in the cache it left (every later
start). The figures are wall seconds and the peak memory (max RSS) each process reached.

    .venv/bin/python benchmarks/measure_start.py                       # the bundled model, int4
    .venv/bin/python benchmarks/measure_start.py --model FILE.gguf --backend int4 --repeats 3
    .venv/bin/python benchmarks/measure_start.py --model FILE.gguf --backend auto  # as chosen

Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from specchat import cpu  # noqa: E402


def start(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Seconds and peak MiB of one `specchat ask`."""
    began = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "specchat", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    errors = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)  # this child's own peak, not every child's
    seconds = time.perf_counter() - began
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"specchat ask failed: {errors.strip().splitlines()[-1:]}")
    return seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a GGUF file (default: the bundled model)")
    parser.add_argument("--backend", default="int4", help="a runtime, or auto (the choice)")
    parser.add_argument("--repeats", type=int, default=5, help="later starts timed")
    parser.add_argument("--question", default="Say hi.")
    options = parser.parse_args()
    args = ["ask", options.question, "--max-tokens", "8", "--no-log"]
    if options.backend != "auto":  # auto: the runtime chosen as a plain `ask` chooses it
        args += ["--backend", options.backend]
    if options.model:
        args += ["--model", options.model]
    with tempfile.TemporaryDirectory() as scratch:
        env = {
            **os.environ,
            "SPECCHAT_CONFIG_DIR": str(Path(scratch) / "config"),
            "SPECCHAT_DATA_DIR": str(Path(scratch) / "data"),
            "SPECCHAT_CACHE_DIR": str(Path(scratch) / "cache"),
        }
        first, first_peak = start(args, env)
        later = [start(args, env) for _ in range(options.repeats)]
    print(f"CPU: {cpu.describe()}")
    print(f"model: {options.model or 'bundled'} on {options.backend}")
    print(f"first start (empty cache dir): {first:.2f} s, peak {first_peak:.0f} MiB")
    seconds = [run[0] for run in later]
    print(
        f"later starts: median {statistics.median(seconds):.2f} s (min {min(seconds):.2f}, "
        f"max {max(seconds):.2f}, {len(seconds)} runs), "
        f"peak {statistics.median(run[1] for run in later):.0f} MiB"
    )


if __name__ == "__main__":
    main()
