"""What one flush of a streaming answer costs the UI thread: specchat's answer body (its own
renderer on markdown-it-py, finished blocks settled into pieces) against Textual's Markdown widget
fed through `append` (as `Markdown.get_stream` does), on the same answer cut into the same
fragments, in a headless app of the chat's width. Each flush is timed from the call to the
frame that shows it (the UI thread's CPU time), medians and the total over the answer.

    .venv/bin/python benchmarks/measure_markdown_flush.py                 # 3 repeats
    .venv/bin/python benchmarks/measure_markdown_flush.py --repeats 5 --fragment 40

Run it alone on the machine (`flock /tmp/specchat-cpu.lock …`).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Markdown

from specchat.app.tui.widgets.answer_body import AnswerBody
from specchat.themes.palette import COLOUR_BLIND_SAFE

ANSWER = (
    "## Baking bread, step by step\n\n"
    + "A dragon who bakes needs patience more than fire. " * 6
    + "\n\nYou will need:\n\n"
    + "".join(f"- {n} cups of something good, sifted twice\n" for n in range(1, 9))
    + "\n| step | minutes | temperature |\n|---|---:|---:|\n"
    + "".join(f"| knead {n} | {n * 5} | {180 + n} |\n" for n in range(1, 7))
    + "\n```python\n"
    + "".join(f"def step_{n}(dough):\n    return knead(dough, minutes={n})\n\n" for n in range(8))
    + "```\n\n"
    + "And then the dragon waited, and the bread rose, and the whole cave smelled of it. " * 8
    + "\n"
)


class Bench(App):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            if self.kind == "specchat":
                yield AnswerBody(COLOUR_BLIND_SAFE)
            else:
                yield Markdown("")


async def one_run(kind: str, fragment: int) -> list[float]:
    """The UI thread's CPU seconds for each flush of the answer, `fragment` characters each."""
    app = Bench(kind)
    costs = []
    async with app.run_test(size=(110, 40)) as pilot:
        await pilot.pause()
        text, runs = "", []
        for start in range(0, len(ANSWER), fragment):
            piece = ANSWER[start : start + fragment]
            began = time.thread_time()
            if kind == "specchat":
                runs.append((len(text), len(text) + len(piece), 3, "prompt"))
                text += piece
                await app.query_one(AnswerBody).show(text, runs)
            else:
                await app.query_one(Markdown).append(piece)
            await pilot.pause()  # the frame that shows it
            costs.append(time.thread_time() - began)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fragment", type=int, default=20, help="characters per flush")
    args = parser.parse_args()
    for kind in ("specchat", "textual"):
        medians, totals = [], []
        for _ in range(args.repeats):
            costs = asyncio.run(one_run(kind, args.fragment))
            medians.append(statistics.median(costs))
            totals.append(sum(costs))
        print(
            f"{kind:9s} flushes {len(costs):4d}  median {statistics.median(medians) * 1000:6.2f} ms"
            f"  last-quarter max {max(costs[len(costs) * 3 // 4 :]) * 1000:6.2f} ms"
            f"  total {statistics.median(totals):6.2f} s"
        )


if __name__ == "__main__":
    main()
