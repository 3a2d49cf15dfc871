"""The GPU check (`benchmarks/gpu_check.py`), dry-run on the CPU: every step it takes on a GPU
machine — models written, pass costs on both runtimes, `specchat bench` on both, the chat in a
headless pilot, `--device auto` — runs end to end on tiny models, and its table says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_dry_run_takes_every_step_and_reports_them(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--device", "cpu",
         "--out", str(tmp_path)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "SPECCHAT_DATA_DIR": str(tmp_path / "data"),
             "SPECCHAT_CONFIG_DIR": str(tmp_path / "config")},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["device"].startswith("CPU: ")
    steps = {step["name"]: step for step in report["steps"]}
    assert all(step["ok"] for step in steps.values()), steps
    for name in ("write the models", "bench llama tiny", "bench hf tiny", "the chat, headless"):
        assert name in steps
    assert "picked cpu" in steps["--device auto"]["detail"]
    # pass costs for each size on each runtime, growing with the tokens a pass carries
    runtimes = {row["runtime"] for row in report["passes"]}
    assert runtimes == {"llama.cpp", "transformers"}
    for row in report["passes"]:
        seconds = {int(k): v for k, v in row["seconds"].items() if k.isdigit()}
        assert sorted(seconds) == [1, 4, 16, 64]
        assert 0 < seconds[1] <= seconds[64]
        assert row["seconds"]["loop"] > 0  # a token in greedy's whole loop
    # every decoder of the race on both runtimes, greedy's tokens exactly on the CPU
    decoders = {(row["runtime"], row["decoder"]) for row in report["bench"]}
    for runtime in ("llama", "hf"):
        assert {(runtime, d) for d in ("greedy", "pld", "lookahead", "suffix")} <= decoders
    assert all(row["exact"] for row in report["bench"]), report["bench"]
    table = (tmp_path / "gpu_check.txt").read_text()
    assert "specchat GPU check on CPU" in table and "suffix" in table
    assert table.strip() in done.stdout
