"""Benchmark data where every question is asked twice in a row, for `bench --history`: the second
time (category "<name>-again") the first answer is a saved chat, which `suffix` can draft from.

    .venv/bin/python benchmarks/asked_twice.py /tmp/twice.jsonl [--data FILE] [--categories a,b]
    .venv/bin/specchat bench --data /tmp/twice.jsonl -d suffix --history --markdown twice.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specchat.bench.data import load_questions  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--data", help="Spec-Bench JSON Lines (default: the bundled dev half)")
    parser.add_argument("--categories", help="comma-separated categories")
    args = parser.parse_args()
    categories = args.categories.split(",") if args.categories else None
    with open(args.out, "w", encoding="utf-8") as out:
        for q in load_questions(args.data, categories):
            for suffix in ("", "-again"):
                item = {
                    "question_id": f"{q.question_id}{suffix}",
                    "category": f"{q.category}{suffix}",
                    "turns": list(q.turns),
                }
                out.write(json.dumps(item) + "\n")


if __name__ == "__main__":
    main()
