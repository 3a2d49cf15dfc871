"""The TUI's cost: tokens/s the engine reaches inside the running app vs headless (`specchat ask`).

Both run the same prompt and decoder on the same loaded model, interleaved, from an empty cache;
the app runs for real (Textual's headless driver, rendering every step). Prints the median ratio.

    .venv/bin/python scripts/measure_ui_cost.py --decoder greedy --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile

os.environ.setdefault("SPECCHAT_CONFIG_DIR", tempfile.mkdtemp(prefix="specchat-ui-cost-"))
os.environ.setdefault("SPECCHAT_DATA_DIR", tempfile.mkdtemp(prefix="specchat-ui-cost-"))

from specchat.app.tui.app import SpecchatApp  # noqa: E402
from specchat.decoding.race import run_decoder  # noqa: E402
from specchat.decoding.sampling import SamplingParams  # noqa: E402
from specchat.models import LoadOptions, load_model  # noqa: E402
from specchat.prompting import chat_prompt_ids, messages_for  # noqa: E402
from specchat.settings import Settings  # noqa: E402

PROMPT = "Write a long story about a dragon who learns to bake bread. Use many details."


async def tui_run(backend, decoder: str, max_tokens: int) -> float:
    backend.rollback(0)
    app = SpecchatApp(
        settings=Settings(max_tokens=max_tokens, decoder=decoder),
        backend=backend,
        save_settings_file=False,
    )
    async with app.run_test(size=(120, 40)) as pilot:
        pilot.app.screen.query_one("#prompt").insert(PROMPT)
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        return float(app.screen.messages[-1].stats.tokens_per_second)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--decoder", default="greedy")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    backend = load_model(None, LoadOptions(threads=args.threads))
    ids = chat_prompt_ids(backend, messages_for(PROMPT))
    ratios, tui, headless = [], [], []
    for _ in range(args.repeats):
        done = run_decoder(backend, args.decoder, {}, ids, args.max_tokens, SamplingParams())
        headless.append(float(done.stats.tokens_per_second))
        tui.append(asyncio.run(tui_run(backend, args.decoder, args.max_tokens)))
        ratios.append(tui[-1] / headless[-1])
    print(
        f"decoder {args.decoder}: headless {statistics.median(headless):.1f} tok/s, "
        f"TUI {statistics.median(tui):.1f} tok/s, TUI/headless median "
        f"{statistics.median(ratios):.3f} (runs: {', '.join(f'{r:.3f}' for r in ratios)})"
    )


if __name__ == "__main__":
    main()
