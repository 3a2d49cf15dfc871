"""What a big chat store costs the `suffix` decoder: start-up and per-step time (issue #10's
targets: 10,000 saved messages add under 50 ms to start-up and under 1 ms to a step).

Builds a temporary store of N messages (half questions of 100-300 characters, half answers of
600-1,800, cut from the Python standard library's sources: real text with the repetition code
has), then measures with the bundled model's tokenizer and chat template:
- cold: the index built from nothing (tokenizing every chat, sorting the suffix array, saving it)
  — on its worker thread, so it only delays when saved chats start to draft;
- warm: the next start, from the saved index: what `open_saved_chats` costs the calling thread
  (start-up), and how long until the saved chats draft;
- per step: the saved chats' lookup, and the suffix drafter's whole `plan` with and without them,
  over contexts replayed from stored answers and from fresh text.
Nothing touches the user's files (temporary store and cache). Run it on an otherwise idle machine:

    .venv/bin/python benchmarks/measure_store_cost.py [--messages 10000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specchat.decoding.sources import DraftSources  # noqa: E402
from specchat.decoding.suffix import SuffixDrafter  # noqa: E402
from specchat.history import HistoryStore, StoredMessage  # noqa: E402
from specchat.models import LoadOptions, load_model  # noqa: E402
from specchat.saved_chats import SavedChatsIndex  # noqa: E402


def corpus() -> str:
    folder = Path(os.__file__).parent
    return "".join(p.read_text(errors="replace") for p in sorted(folder.glob("*.py")))


def fill_store(store: HistoryStore, n_messages: int, per_chat: int, seed: int) -> list[str]:
    """Chats of `per_chat` messages, alternating question and answer; returns the answers."""
    text = corpus()
    rng = random.Random(seed)
    pos, answers, chat = 0, [], None
    for i in range(n_messages):
        if i % per_chat == 0:
            chat = store.new_chat(f"chat {i // per_chat}")
        question = i % 2 == 0
        size = rng.randint(100, 300) if question else rng.randint(600, 1800)
        content = text[pos : pos + size]
        pos = (pos + size) % (len(text) - 2000)
        store.add_message(chat, StoredMessage("user" if question else "assistant", content))
        if not question:
            answers.append(content)
    return answers


def timings(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "mean_ms": round(statistics.mean(values) * 1e3, 4),
        "median_ms": round(statistics.median(values) * 1e3, 4),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1e3, 4),
        "max_ms": round(ordered[-1] * 1e3, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--per-chat", type=int, default=10, help="messages per chat")
    parser.add_argument("--steps", type=int, default=400, help="contexts timed per kind")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    backend = load_model(None, LoadOptions(n_ctx=4096))
    with tempfile.TemporaryDirectory(prefix="specchat-store-cost-") as tmp:
        folder = Path(tmp)
        store = HistoryStore(folder / "history.sqlite3")
        store._db.execute("PRAGMA synchronous=OFF")  # a throwaway store: no fsync per message
        t0 = time.perf_counter()
        answers = fill_store(store, args.messages, args.per_chat, seed=0)
        fill_seconds = time.perf_counter() - t0

        cache = folder / "index"
        t0 = time.perf_counter()
        cold = SavedChatsIndex(store.path, backend, cache_folder=cache, persist_min_tokens=0)
        cold.start()
        cold_call = time.perf_counter() - t0
        cold.wait_idle()
        cold_ready = time.perf_counter() - t0
        cold.close(wait=True)

        t0 = time.perf_counter()
        warm = SavedChatsIndex(store.path, backend, cache_folder=cache, persist_min_tokens=0)
        warm.start()
        store.add_listener(warm.chat_changed)
        warm_call = time.perf_counter() - t0
        warm.wait_idle()
        warm_ready = time.perf_counter() - t0
        assert warm.loaded, "the warm start should load the saved index"

        # Contexts grow token by token, as while decoding: answers the store holds (the same
        # question asked again) and text it does not.
        rng = random.Random(1)
        stored = [backend.tokenize(a) for a in rng.sample(answers, 8)]
        fresh = [
            backend.tokenize(
                "Specchat is a terminal chat for local language models that makes speculative "
                "decoding visible: every run of tokens a step accepted is coloured, the decoder "
                "switches with one key, and decoders race side by side with honest figures. "
                "Write a short story about a lighthouse keeper who collects lost letters."
            )
        ]

        def replay(sequences: list[list[int]]) -> list[list[int]]:
            contexts = [seq[:i] for seq in sequences for i in range(1, len(seq))]
            return contexts[: args.steps]

        results: dict[str, object] = {
            "messages": args.messages,
            "chats": args.messages // args.per_chat,
            "indexed_tokens": warm.n_tokens,
            "index_megabytes": round(warm.nbytes / 1e6, 1),
            "fill_store_seconds": round(fill_seconds, 3),
            "cold_start_call_ms": round(cold_call * 1e3, 3),
            "cold_build_seconds": round(cold_ready, 3),
            "warm_start_call_ms": round(warm_call * 1e3, 3),
            "warm_ready_ms": round(warm_ready * 1e3, 3),
        }
        for kind, contexts in (("stored", replay(stored)), ("fresh", replay(fresh))):
            lookups, with_saved, without_saved, drafted = [], [], [], 0
            for context in contexts:
                t = time.perf_counter()
                found = warm.continuation(context, 32)
                lookups.append(time.perf_counter() - t)
                drafted += len(found.tokens) if found else 0
            for saved, sink in ((warm, with_saved), (None, without_saved)):
                drafter = SuffixDrafter(32, 3, 1.0, 0.1)
                drafter.reset(contexts[0], DraftSources(saved=saved))
                for context in contexts:
                    t = time.perf_counter()
                    drafter.plan(context, 256)
                    sink.append(time.perf_counter() - t)
            results[f"step_{kind}"] = {
                "saved_lookup": timings(lookups),
                "plan_with_saved": timings(with_saved),
                "plan_without_saved": timings(without_saved),
                "mean_tokens_found": round(drafted / len(contexts), 2),
            }
        warm.close(wait=True)
        store.close()
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)


if __name__ == "__main__":
    main()
