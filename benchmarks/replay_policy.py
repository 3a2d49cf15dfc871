"""Replay a chain drafter and its draft-length policy against greedy's own answers, without timing.

Greedy answers to the bundled Spec-Bench dev questions are generated once and cached. Each policy
variant then replays them: at every step the drafter plans from the same context the real decoder
would have, the policy picks a depth, the draft is accepted as far as it agrees with greedy's answer
(exactly what verification would do), and the pass is charged the backend's measured k-token cost.
The figure is deterministic — the same on a busy machine as on an idle one — so policy changes can
be compared before a real benchmark confirms them. The oracle (decoding.oracle) is the ceiling.

    .venv/bin/python benchmarks/replay_policy.py [--backend llama|hf] [--per-category 4]
        [--max-tokens 128] [-p pld.fixed_draft=10] [-d pld] [--costs hf] [--history]
        [--by-situation] [--data FILE] [--row-cost R]

With --row-cost R a pass of k tokens is charged 1 + R·(k − 1) of the backend's one-token pass
instead of its measured cost: what the drafts would replay to if a drafted row cost R of a plain
pass (the measured int4 rows cost about 0.17 at avx512; 0 is a pass as flat as a GPU's).

With --by-situation it also says where the time is saved: per situation the drafter plans in
(for pld and suffix, how long the context's match is), the share of plain decoding time the
oracle saves there and the share the policy saves. A situation where the oracle saves much and
the policy little is one the policy cannot tell apart from its failures.

With --history the questions run as `bench --history` runs them: each a chat of its own, saved
(with greedy's answers) into a temporary store before the next begins, for drafters that read
saved chats.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
from collections import defaultdict
from pathlib import Path

from specchat import locations
from specchat.backends.base import ChatMessage
from specchat.backends.block_cost import interpolate
from specchat.backends.registry import LLAMA_CPP, LOCAL_RUNTIMES
from specchat.bench.data import load_questions
from specchat.bench.history import BenchHistory
from specchat.decoding.draft_policy import DraftLengthPolicy
from specchat.decoding.prompt_lookup import MATCH_EDGES
from specchat.decoding.registry import build_decoder, scoped_params
from specchat.decoding.sampling import Sampler, SamplingParams
from specchat.decoding.sources import NO_SOURCES, DraftSources
from specchat.evaluation.race import run_decoder
from specchat.metrics.oracle import accepted_lengths, oracle_passes, oracle_speedup
from specchat.models import LoadOptions, load_model
from specchat.prompting import chat_prompt_ids, turn_start

GREEDY = Sampler(SamplingParams())  # the drafters copy: the sampler never draws


def greedy_answers(
    backend, per_category: int, max_tokens: int, data: str | None = None
) -> list[dict]:
    """[{question, category, turn, prompt, answer, text}] per turn, cached per model, length and
    question file."""
    # a question file is named by its content: two files of one name never share answers
    questions_name = f"-{hashlib.sha1(Path(data).read_bytes()).hexdigest()[:12]}" if data else ""
    cache = locations.cache_dir() / (
        f"greedy-answers-v2-{backend.name}-{backend.model_name}-{per_category}-{max_tokens}"
        f"{questions_name}.json"
    )
    if cache.exists():
        return json.loads(cache.read_text())
    turns = []
    questions = load_questions(data, limit_per_category=per_category)
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


class PricedAs:
    """A backend whose pass costs are another table's (seconds by pass size, interpolated):
    another size's measured costs (scale.py) or a synthetic price per drafted row
    (--row-cost)."""

    def __init__(self, backend, costs: dict[int, float]) -> None:
        self._backend, self._costs = backend, costs

    def __getattr__(self, name: str):
        return getattr(self._backend, name)

    def block_cost(self, k: int) -> float:
        return interpolate(self._costs, k)


def situation(key: tuple) -> tuple[str, int]:
    """A plan's situation without what the last draft did: for copies, the match-length bucket."""
    if len(key) >= 2 and key[0] in ("copy", "suffix"):
        return key[0], key[1]
    return str(key[:1]), -1


def situation_name(kind: str, bucket: int) -> str:
    if bucket < 0:
        return kind
    low = MATCH_EDGES[bucket]
    high = MATCH_EDGES[bucket + 1] - 1 if bucket + 1 < len(MATCH_EDGES) else None
    return f"{kind} match {low if high == low else f'{low}-{high or chr(8230)}'}"


def oracle_savings(decoder, backend, prompt, answer, sources, saved: dict[tuple, float]) -> None:
    """Add, per situation, the seconds the oracle's drafts save over plain passes."""
    drafter = decoder.drafter
    drafter.reset(list(prompt), sources)
    lengths = accepted_lengths(drafter.proposal, prompt, answer)
    drafter.reset(list(prompt), sources)
    keys, context = [], list(prompt)
    for i, token in enumerate(answer):
        keys.append(situation(drafter.plan(context, len(answer) - i).key))
        context.append(token)
    cost = backend.block_cost
    for i, k in oracle_passes(lengths, cost)[1]:
        saved[keys[i]] += (k + 1) * cost(1) - cost(k + 1)


def replay(
    decoder,
    policy: DraftLengthPolicy,
    backend,
    prompt: list[int],
    answer: list[int],
    sources: DraftSources = NO_SOURCES,
    saved: dict[tuple, float] | None = None,
):
    """(pass-cost seconds, drafted, accepted) of the decoder's chain drafts over greedy's answer,
    its depths chosen as the live step chooses them (with `policy`); `saved` gathers, per
    situation, the seconds its passes save over plain ones."""
    decoder.policy = policy
    drafter = decoder.drafter
    decoder.reset(list(prompt), sources)
    context, i, seconds, drafted, accepted = list(prompt), 0, 0.0, 0, 0
    while i < len(answer):
        room = len(answer) - i
        plan = drafter.plan(context, room)
        depth = decoder.choose_depth(backend, plan, room)
        draft = drafter.draft(backend, context, GREEDY, plan, depth)
        chain = draft.tokens[1:]  # a chain drafter's draft: one branch after the pending token
        n = 0
        while n < len(chain) and chain[n] == answer[i + n]:
            n += 1
        seconds += backend.block_cost(len(draft.tokens))
        if saved is not None:
            saved[situation(plan.key)] += (n + 1) * backend.block_cost(1) - backend.block_cost(
                len(draft.tokens)
            )
        if draft.drafted:
            policy.update(backend, plan, draft.drafted, n)  # what the live step learns
        drafter.observe(draft, None, n)
        drafted, accepted = drafted + draft.drafted, accepted + n
        context.extend(answer[i : i + n + 1])
        i += n + 1
    return seconds, drafted, accepted


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default=LLAMA_CPP, choices=LOCAL_RUNTIMES)
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
    parser.add_argument(
        "--data", help="Spec-Bench JSON Lines (default: the bundled dev half; see asked_twice.py)"
    )
    parser.add_argument(
        "--by-situation", action="store_true", help="where the oracle and the policy save time"
    )
    parser.add_argument("--optimism", type=float, help="the policy's optimism (default: its own)")
    parser.add_argument("--budget", type=float, help="the policy's exploration budget")
    parser.add_argument("--margin", type=float, help="the gain a draft must promise")
    parser.add_argument("--allowance", type=float, help="passes an answer may lose exploring")
    parser.add_argument("--fallback-margin", type=float, help="the gain once an answer has lost")
    parser.add_argument("--warm", action="store_true", help="learn over one replay first")
    parser.add_argument("--stake", type=float, help="passes one draft may lose beyond the ledger")
    parser.add_argument(
        "--row-cost", type=float, help="charge each drafted row this share of a plain pass"
    )
    args = parser.parse_args()
    backend = load_model(None, LoadOptions(backend=args.backend), lambda *a: None)
    # One thread generates the answers (a 2-thread pool collapses when anything else runs);
    # the replay charges the default backend's measured costs.
    generator = load_model(None, LoadOptions(backend=args.backend, threads=1), lambda *a: None)
    turns = greedy_answers(generator, args.per_category, args.max_tokens, args.data)
    generator.close()
    if args.costs:
        backend = load_model(None, LoadOptions(backend=args.costs), lambda *a: None)
    if args.row_cost is not None:  # 1 + R·(k − 1) plain passes: a line through sizes 1 and 2
        plain = backend.block_cost(1)
        backend = PricedAs(backend, {1: plain, 2: plain * (1.0 + args.row_cost)})
    params = dict(p.split("=", 1) for p in args.param)
    decoder = build_decoder(
        args.decoder, scoped_params([args.decoder], params)[args.decoder], backend
    )
    # from the priors, learning over the whole run (not the user's)
    knobs = {k: v for k, v in (("optimism", args.optimism), ("explore_budget", args.budget),
                               ("margin", args.margin), ("allowance", args.allowance),
                               ("fallback_margin", args.fallback_margin), ("stake", args.stake))
             if v is not None}  # fmt: skip
    policy = DraftLengthPolicy(**knobs)
    if args.warm:  # as a kept table: learned over one replay of the same answers first
        for turn in turns:
            if turn["answer"]:
                replay(decoder, policy, backend, turn["prompt"], turn["answer"])
    by_category: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    drafted = accepted = 0
    policy_saved: dict[tuple, float] = defaultdict(float)
    oracle_saved: dict[tuple, float] = defaultdict(float)
    plain_total = 0.0
    by_question: dict[int, list[float]] = defaultdict(lambda: [0.0] * 4)
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
        split = policy_saved if args.by_situation else None
        seconds, d, a = replay(decoder, policy, backend, prompt, answer, sources, split)
        if args.by_situation:
            oracle_savings(decoder, backend, prompt, answer, sources, oracle_saved)
        drafted, accepted = drafted + d, accepted + a
        decoder.drafter.reset(list(prompt), sources)
        oracle = oracle_speedup(
            accepted_lengths(decoder.drafter.proposal, prompt, answer), backend.block_cost
        )
        plain = len(answer) * backend.block_cost(1)
        plain_total += plain
        by_category[turn["category"]].append((plain / seconds, oracle.speedup, oracle.copyable))
        by_category["overall"].append(by_category[turn["category"]][-1])
        question = by_question[turn["question"]]
        for k, value in enumerate((len(answer), plain, seconds, oracle.seconds)):
            question[k] += value
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
    # bench's figure (bench.summary): the mean of per-question speeds over greedy's
    base = statistics.mean(q[0] / q[1] for q in by_question.values())
    speed = statistics.mean(q[0] / q[2] for q in by_question.values()) / base
    oracle = statistics.mean(q[0] / q[3] for q in by_question.values()) / base
    print(f"per question, as bench reports: replayed {speed:.3f}×, oracle {oracle:.3f}×")
    ratio = {q: plain / seconds for q, (_, plain, seconds, _) in by_question.items()}
    slowest = sorted(ratio, key=ratio.get)[:5]
    print("slowest questions: " + ", ".join(f"{q} {ratio[q]:.3f}×" for q in slowest))
    if args.by_situation:
        print("\nshare of plain decoding time saved, by the situation drafted in")
        print(f"{'situation':<20} {'oracle':>7} {'policy':>7}")
        for key in sorted(set(oracle_saved) | set(policy_saved)):
            oracle_share, policy_share = oracle_saved[key], policy_saved[key]
            name = situation_name(*key)
            print(
                f"{name:<20} {oracle_share / plain_total:>7.1%} {policy_share / plain_total:>7.1%}"
            )
        total_o, total_p = sum(oracle_saved.values()), sum(policy_saved.values())
        print(f"{'all':<20} {total_o / plain_total:>7.1%} {total_p / plain_total:>7.1%}")


if __name__ == "__main__":
    main()
