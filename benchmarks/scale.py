"""Each runtime's pass costs at the sizes people run, and the default decoder's speedup projected
there.

Random-weight Llama GGUFs of real shapes (a pass costs what its shapes cost, not what its weights
say), written straight in Q4_0 blocks with a Q8_0 tied embedding and cached under the cache dir.
Each keeps the bundled tokenizer, so its vocabulary (49,152) is SmolLM2's: a Llama 3 model's
128,256-row head costs more than the table says. Per size: each runtime's 1-token pass behind
256 cached tokens and its k = 2, 4, 8, 16 chain passes as multiples of it (medians over repeats,
taken in turn), then the projection: the default decoder (suffix) replayed over the bundled
model's greedy answers to the held-out questions (`benchmarks/replay_policy.py`'s replay: the
drafts it would make, accepted as far as greedy agrees) and charged this size's measured costs.
A projection: a larger model's answers, and so what copying finds in them, differ.

`--live D` (repeatable: `suffix`, `suffix:head=true`, `suffix:recycle=true`, ...) projects
decoders the replay cannot: sources that follow the model's logits or hidden state (recycled
candidates, the draft head). Each runs live on the bundled model (int4), every pass charged what a
pass of its size costs at this size's int4 table (`ChargedAs`), its policy deciding at those
costs, and its charged seconds are set against greedy's over the same questions. A step's own
Python (a tenth of a millisecond) is left out: beside a 48 ms pass it is noise; beside the
bundled model's 3 ms pass it is what keeps the head and the recycled candidates off by default.

    PYTHONPATH=. python benchmarks/scale.py [--sizes 360M,1.7B,3B,8B] [--threads 2] [--repeats 9]
        [--quant Q4_K_M|Q5_K_M] [--live suffix --live suffix:head=true ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from unittest.mock import patch

from benchmarks.measure_int4 import CONTEXT, SIZES, pass_costs, say
from benchmarks.random_gguf import RandomShape, quantize, write_block_gguf
from benchmarks.replay_policy import PricedAs, greedy_answers, replay
from specchat import cpu, locations
from specchat.backends.base import ChatMessage
from specchat.backends.block_cost import interpolate
from specchat.backends.registry import INT4, LLAMA_CPP
from specchat.decoding import draft_policy, recycled
from specchat.decoding.draft_policy import DraftLengthPolicy
from specchat.decoding.registry import build_decoder
from specchat.decoding.sampling import SamplingParams
from specchat.decoding.sources import DraftSources
from specchat.evaluation.race import run_decoder
from specchat.evaluation.variants import parse_variant
from specchat.prompting import turn_start

SHAPES = {
    "135M": RandomShape(layers=30, dim=576, ffn=1536, heads=9, kv_heads=3),  # SmolLM2-135M
    "360M": RandomShape(layers=32, dim=960, ffn=2560, heads=15, kv_heads=5),  # SmolLM2-360M
    "1.7B": RandomShape(layers=24, dim=2048, ffn=8192, heads=32, kv_heads=32),  # SmolLM2-1.7B
    "3B": RandomShape(layers=28, dim=3072, ffn=8192, heads=24, kv_heads=8),  # Llama-3.2-3B
    "8B": RandomShape(layers=32, dim=4096, ffn=14336, heads=32, kv_heads=8),  # Llama-3.1-8B
    # SmolLM3-3B: every fourth layer without RoPE
    "smollm3-3B": RandomShape(arch="smollm3", layers=36, dim=2048, ffn=11008, heads=16, kv_heads=4),
    # Gemma 2 2B: every other layer local (4096-token window); Gemma 3 1B and 4B: five of six
    "gemma2-2B": RandomShape(arch="gemma2", layers=26, dim=2304, ffn=9216, heads=8, kv_heads=4, head_dim=256, window=4096),
    "gemma3-1B": RandomShape(arch="gemma3", layers=26, dim=1152, ffn=6912, heads=4, kv_heads=1, head_dim=256, window=512),
    "gemma3-4B": RandomShape(arch="gemma3", layers=34, dim=2560, ffn=10240, heads=8, kv_heads=4, head_dim=256, window=1024),
}  # fmt: skip
HELD_OUT = Path(__file__).with_name("held_out.jsonl")


def with_sources(bundled, answers: list[dict]) -> list[tuple[dict, DraftSources]]:
    """Each turn with what its drafts may draw on: where its own turn starts in its prompt (a
    question's later turns follow its earlier ones)."""
    out, conversation = [], []
    for number, turn in enumerate(answers):
        if number and turn["question"] != answers[number - 1]["question"]:
            conversation = []
        conversation.append(ChatMessage("user", turn["turn"]))
        out.append(
            (turn, DraftSources(turn_start=turn_start(bundled, conversation, turn["prompt"])))
        )
        conversation.append(ChatMessage("assistant", turn["text"]))
    return out


def projected(bundled, answers: list[dict], costs: dict[int, float]) -> dict[str, float]:
    """The default decoder's replayed speedup over greedy at `costs`, per category and
    "overall": as bench reports it, the mean of per-question speeds. Its copies only: a replay
    never prepares the drafter on a runtime, so the draft head (which reads the live hidden
    state) stays silent; `--live` projects it."""
    priced = PricedAs(bundled, costs)
    decoder = build_decoder("suffix", {}, priced)
    policy = DraftLengthPolicy()
    speeds: dict[str, list[float]] = {}
    for turn, sources in with_sources(bundled, answers):
        if turn["answer"]:
            seconds, _, _ = replay(decoder, policy, priced, turn["prompt"], turn["answer"], sources)
            speed = len(turn["answer"]) * costs[1] / seconds
            for key in (turn["category"], "overall"):
                speeds.setdefault(key, []).append(speed)
    return {key: statistics.mean(values) for key, values in speeds.items()}


class ChargedAs(PricedAs):
    """PricedAs that also adds up what its passes would cost at the other table."""

    def __init__(self, backend, costs: dict[int, float]) -> None:
        super().__init__(backend, costs)
        self.charged = 0.0

    def evaluate(self, block):
        self.charged += interpolate(self._costs, len(block))
        return self._backend.evaluate(block)


def live_projection(
    bundled, answers: list[dict], costs: dict[int, float], specs: list[str], max_tokens: int
) -> dict[str, dict[str, float]]:
    """Each decoder's speedup over greedy, per category and "overall" (the mean of per-question
    speeds), decoding every turn's prompt live on `bundled` (the int4 runtime) with every pass
    charged at `costs`; a decoder that leaves greedy's answer stops it. Each decoder learns from
    its own answers only (the draft policy's rates, the recycled candidates), from nothing, as a
    user who runs only it would: run after another on the same prompt, it would draft the answer
    that run taught the candidates."""
    turns = with_sources(bundled, answers)
    charged: dict[str, list[float]] = {}
    greedy: list[tuple[int, ...]] = []
    # learned rates and candidate tables from nothing, as a cold bench starts (the user's own
    # left alone)
    with (
        tempfile.TemporaryDirectory() as folder,
        patch.dict(os.environ, {"SPECCHAT_DATA_DIR": folder}),
    ):
        nothing_learned = (recycled.checkpoint(), draft_policy.checkpoint())
        for spec in ["greedy", *specs]:
            for restore in nothing_learned:
                restore()
            variant = parse_variant(spec)
            for number, (turn, sources) in enumerate(turns):
                priced = ChargedAs(bundled, costs)
                done = run_decoder(
                    priced, variant.name, variant.values(), turn["prompt"], max_tokens,
                    SamplingParams(), sources,
                )  # fmt: skip
                if spec == "greedy":
                    greedy.append(done.token_ids)
                elif done.token_ids != greedy[number]:
                    raise SystemExit(f"{spec} left greedy's answer: no projection from it")
                charged.setdefault(spec, []).append(priced.charged)
    speeds: dict[str, dict[str, list[float]]] = {spec: {} for spec in specs}
    for spec in specs:
        for (turn, _), plain, drafted in zip(turns, charged["greedy"], charged[spec]):
            for key in (turn["category"], "overall"):
                speeds[spec].setdefault(key, []).append(plain / drafted)
    return {spec: {k: statistics.mean(v) for k, v in by.items()} for spec, by in speeds.items()}


def model_file(size: str, quant: str = "Q4_0") -> Path:
    """The size's random-weight file in `quant`: written in Q4_0 blocks, other types requantized
    from it by llama.cpp's quantizer (Q4_K_M, what most people download: Q4_K with Q6_K for
    some value and down projections)."""
    folder = locations.cache_dir() / "scale"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"random-{size}-q4_0-v2.gguf"  # v2: Q8_0 codes within -127..127
    if not path.exists():
        say(f"writing {path.name} (random weights, Q4_0 blocks)")
        partial = path.with_suffix(".partial")
        write_block_gguf(partial, SHAPES[size])
        partial.rename(path)
    if quant == "Q4_0":
        return path
    target = folder / f"random-{size}-{quant.lower()}-v2.gguf"
    if not target.exists():
        say(f"requantizing {path.name} to {quant}")
        partial = target.with_suffix(".partial")
        quantize(path, partial, quant)
        partial.rename(target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="360M,1.7B,3B")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--per-category", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--quant", default="Q4_0", choices=("Q4_0", "Q4_K_M", "Q5_K_M"))
    parser.add_argument("--live", action="append", default=[], metavar="DECODER")
    args = parser.parse_args()

    import torch

    from specchat.backends.int4.backend import Int4Backend
    from specchat.backends.llama import LlamaBackend
    from specchat.models import LoadOptions, load_model

    bundled = load_model(None, LoadOptions(backend=LLAMA_CPP, threads=1), lambda *a: None)
    answers = greedy_answers(bundled, args.per_category, args.max_tokens, str(HELD_OUT))
    for spec in args.live:
        parse_variant(spec)  # a misspelt decoder stops it before any timing
    rows, live = [], {}
    # the bundled model on int4, decoding live at each size's costs (its own greedy: int4's
    # answers are not llama.cpp's)
    int4 = (
        load_model(None, LoadOptions(backend=INT4, threads=args.threads), lambda *a: None)
        if args.live
        else None
    )
    for size in args.sizes.split(","):
        path = model_file(size, args.quant)
        say(f"{size}: loading {path.name} on llama.cpp and the int4 runtime")
        started = time.perf_counter()
        backends = {
            "llama.cpp": LlamaBackend(path, n_ctx=1024, threads=args.threads, max_branches=1),
            INT4: Int4Backend(path, n_ctx=1024, threads=args.threads),
        }
        torch.set_num_threads(args.threads)
        say(f"  loaded in {time.perf_counter() - started:.0f} s; timing passes")
        costs = pass_costs(backends, args.repeats)
        for backend in backends.values():
            backend.close()
        speedups = {name: projected(bundled, answers, per_k) for name, per_k in costs.items()}
        llama_one = costs["llama.cpp"][1]
        fastest = max(costs, key=lambda n: speedups[n]["overall"] * llama_one / costs[n][1])
        rows.append((size, costs, speedups, fastest, llama_one))
        if int4 is not None:
            say(f"  {size}: decoding live at its int4 costs: {', '.join(args.live)}")
            live[size] = live_projection(int4, answers, costs[INT4], args.live, args.max_tokens)
    bundled.close()
    if int4 is not None:
        int4.close()

    print(f"\n{cpu.describe()}, {args.threads} threads")
    print(
        f"random-weight {args.quant} files, behind {CONTEXT} cached tokens; projection: suffix replayed"
    )
    print(f"{'size':<11}{'runtime':<11}{'1-token ms':>11}" + "".join(f"{f'k={k}':>8}" for k in SIZES[1:]) + f"{'proj.':>8}")  # fmt: skip
    for size, costs, speedups, fastest, llama_one in rows:
        for name, per_k in costs.items():
            one = per_k[1]
            ratios = "".join(f"{per_k[k] / one:>7.2f}x" for k in SIZES[1:])
            print(
                f"{size:<11}{name:<11}{one * 1e3:>11.1f}{ratios}{speedups[name]['overall']:>7.2f}x"
            )
        best = speedups[fastest]["overall"] * llama_one / costs[fastest][1]
        print(f"{size:<11}default on {fastest}: {best:.2f}x llama.cpp's greedy (projected)")
        categories = [c for c in speedups[fastest] if c != "overall"]
        print(
            f"{'':<11}per category, ÷ {fastest}'s greedy: "
            + ", ".join(f"{c} {speedups[fastest][c]:.2f}x" for c in categories)
        )
    for size, by_spec in live.items():
        print(f"\n{size}, decoded live at its int4 costs (÷ int4's greedy, every turn):")
        for spec, figures in by_spec.items():
            categories = [c for c in figures if c != "overall"]
            print(
                f"  {spec:<32}{figures['overall']:.2f}x  "
                + ", ".join(f"{c} {figures[c]:.2f}x" for c in categories)
            )


if __name__ == "__main__":
    main()
