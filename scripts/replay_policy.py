"""Replay a chain drafter and its draft-length policy against greedy's own answers, without timing.

Greedy answers to the bundled Spec-Bench dev questions are generated once and cached. Each policy
variant then replays them: at every step the drafter plans from the same context the real decoder
would have, the policy picks a depth, the draft is accepted as far as it agrees with greedy's answer
(exactly what verification would do), and the pass is charged the backend's measured k-token cost.
The figure is deterministic — the same on a busy machine as on an idle one — so policy changes can
be compared before a real benchmark confirms them. The oracle (decoding.oracle) is the ceiling.

    .venv/bin/python scripts/replay_policy.py [--backend llama|hf] [--per-category 4]
        [--max-tokens 128] [-p pld.fixed_draft=10] [-d pld] [--costs hf] [--history]

With --history the questions run as `bench --history` runs them: each a chat of its own, saved
(with greedy's answers) into a temporary store before the next begins, for drafters that read
saved chats.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from specchat import locations
from specchat.backends.base import ChatMessage
from specchat.bench.data import load_questions
from specchat.bench.history import BenchHistory
from specchat.decoding.draft_policy import DraftLengthPolicy
from specchat.decoding.oracle import accepted_lengths, oracle_speedup
from specchat.decoding.race import run_decoder
from specchat.decoding.registry import build_decoder, scoped_params
from specchat.decoding.sampling import SamplingParams
from specchat.decoding.sources import NO_SOURCES, DraftSources
from specchat.models import LoadOptions, load_model
from specchat.prompting import chat_prompt_ids, turn_start


def greedy_answers(backend, per_category: int, max_tokens: int) -> list[dict]:
    """[{question, category, turn, prompt, answer, text}] per turn, cached per model and length."""
    cache = locations.cache_dir() / (
        f"greedy-answers-v2-{backend.name}-{backend.model_name}-{per_category}-{max_tokens}.json"
    )
    if cache.exists():
        return json.loads(cache.read_text())
    turns = []
    questions = load_questions(None, limit_per_category=per_category)
    for number, question in enumerate(questions, 1):
        history: list[ChatMessage] = []
        for turn in question.turns:
            history.append(ChatMessage("user", turn))
            prompt = chat_prompt_ids(backend, history)
            done = run_decoder(backend, "greedy", {}, prompt, max_tokens, SamplingParams())
            turns.append(
                {
                    "question": number,
                    "category": question.category,
                    "turn": turn,
                    "prompt": prompt,
                    "answer": list(done.token_ids),
                    "text": done.text,
                }
            )
            history.append(ChatMessage("assistant", done.text))
        print(f"greedy answers: {number}/{len(questions)}", flush=True)
    Path(cache).write_text(json.dumps(turns))
    return turns


def replay(
    decoder,
    policy: DraftLengthPolicy,
    backend,
    prompt: list[int],
    answer: list[int],
    sources: DraftSources = NO_SOURCES,
):
    """(pass-cost seconds, drafted, accepted) of the decoder's chain drafts over greedy's answer."""
    drafter = decoder.drafter
    drafter.reset(list(prompt), sources)
    context, i, seconds, drafted, accepted = list(prompt), 0, 0.0, 0, 0
    while i < len(answer):
        room = len(answer) - i
        plan = drafter.plan(context, room)
        if decoder.fixed_draft:
            depth = max(0, min(decoder.fixed_draft, plan.available, room - 1))
        else:
            depth = policy.depth(backend, plan, room)
        draft = drafter.draft(backend, context, None, plan, depth)
        chain = draft.chain_tokens()
        n = 0
        while n < len(chain) and chain[n] == answer[i + n]:
            n += 1
        seconds += backend.block_cost(len(draft.tokens))
        if draft.drafted:
            policy.update(plan, draft.drafted, n)
        drafter.observe(draft, None, n)
        drafted, accepted = drafted + draft.drafted, accepted + n
        context.extend(answer[i : i + n + 1])
        i += n + 1
    return seconds, drafted, accepted


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="llama")
    parser.add_argument("--per-category", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument(
        "--costs",
        default=None,
        help="charge another backend's measured pass costs (its answers are near-identical)",
    )
    parser.add_argument("-d", "--decoder", default="pld")
    parser.add_argument("-p", "--param", action="append", default=[])
    parser.add_argument("--history", action="store_true", help="earlier questions as saved chats")
    args = parser.parse_args()
    backend = load_model(None, LoadOptions(backend=args.backend), lambda *a: None)
    # One thread generates the answers (a 2-thread pool collapses when anything else runs);
    # the replay charges the default backend's measured costs.
    generator = load_model(None, LoadOptions(backend=args.backend, threads=1), lambda *a: None)
    turns = greedy_answers(generator, args.per_category, args.max_tokens)
    generator.close()
    if args.costs:
        backend = load_model(None, LoadOptions(backend=args.costs), lambda *a: None)
    params = dict(p.split("=", 1) for p in args.param)
    decoder = build_decoder(
        args.decoder, scoped_params([args.decoder], params)[args.decoder], backend
    )
    policy = DraftLengthPolicy()  # from the priors, learning over the whole run (not the user's)
    by_category: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    drafted = accepted = 0
    saved = BenchHistory(backend) if args.history else None
    conversation: list[ChatMessage] = []
    for number, turn in enumerate(turns):
        if number and turn["question"] != turns[number - 1]["question"]:
            if saved is not None:  # the question before is a saved chat from now on
                saved.record(conversation[0].content, conversation)
            conversation = []
        prompt, answer = turn["prompt"], turn["answer"]
        conversation.append(ChatMessage("user", turn["turn"]))
        sources = DraftSources(
            turn_start=turn_start(backend, conversation, prompt),
            saved=saved.index if saved is not None else None,
        )
        conversation.append(ChatMessage("assistant", turn["text"]))
        if not answer:
            continue
        seconds, d, a = replay(decoder, policy, backend, prompt, answer, sources)
        drafted, accepted = drafted + d, accepted + a
        decoder.drafter.reset(list(prompt), sources)
        oracle = oracle_speedup(
            accepted_lengths(decoder.drafter.proposal, prompt, answer), backend.block_cost
        )
        plain = len(answer) * backend.block_cost(1)
        by_category[turn["category"]].append((plain / seconds, oracle.speedup, oracle.copyable))
        by_category["overall"].append(by_category[turn["category"]][-1])
    if saved is not None:
        saved.close()
    print(f"{'category':<16} {'replayed':>8} {'oracle':>7} {'eff.':>6} {'copyable':>8}")
    for category, rows in sorted(by_category.items(), key=lambda kv: kv[0] == "overall"):
        speed = statistics.mean(r[0] for r in rows)
        oracle = statistics.mean(r[1] for r in rows)
        copyable = statistics.mean(r[2] for r in rows)
        eff = (speed - 1) / (oracle - 1) if oracle > 1 else float("nan")
        print(f"{category:<16} {speed:>7.3f}× {oracle:>6.3f}× {eff:>6.2f} {copyable:>8.0%}")
    print(f"drafted {drafted}, accepted {accepted} ({accepted / max(drafted, 1):.0%})")


if __name__ == "__main__":
    main()
