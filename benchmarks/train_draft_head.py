"""Train a draft head (specchat/decoding/draft_head.py) for the bundled model, by self-distillation.

Text: the dev half's questions (never the held-out file) with greedy's answers, and answers
sampled from the model at temperature 0.8 (`--samples` per question, seeds 1..N), so the head
sees the model's own kind of text. At every position t of that text the int4 runtime gives the
final hidden state h_t, the next token x = text[t + 1], and the target: the model's greedy token
after x (the argmax of row t + 1). The head learns target from [h_t; embedding(x)] through the
model's own output rows for the `--shortlist` commonest targets (the only tokens it can guess).

    PYTHONPATH=. .venv/bin/python benchmarks/train_draft_head.py --work /tmp/head \
        [--samples 4] [--epochs 4] [--hidden 256] [--shortlist 2048] [--kept 1024] [--report]

writes specchat/draft_heads/<model>.npz. --report prints, on held-out first turns' greedy
answers, how often the head's guess was the next greedy token, by how long the conversation's
own match was there (the copies' situation). Each stage's output is kept under --work, so a
stopped run resumes.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from specchat.backends.base import Block, ChatMessage, DraftFeatures, rms_normed
from specchat.bench.data import load_questions
from specchat.decoding.draft_head import DraftHead, head_path
from specchat.decoding.sampling import SamplingParams
from specchat.evaluation.race import run_decoder
from specchat.models import LoadOptions, load_model
from specchat.prompting import chat_prompt_ids

HELD_OUT = Path(__file__).resolve().parent / "held_out.jsonl"
_CHUNK = 256  # rows a feature pass evaluates


def texts(backend, data: Path | None, seed: int, out: Path) -> list[tuple[list[int], int]]:
    """(prompt + answer, prompt length) for every question's first turn: greedy's answer
    (seed 0) or one sampled with `seed`; cached in `out`."""
    if out.exists():
        return [tuple(row) for row in json.loads(out.read_text())]
    rows = []
    questions = load_questions(str(data) if data else None, limit_per_category=1000)
    sampling = SamplingParams()
    decoder = "greedy" if seed == 0 else "sample"
    for number, question in enumerate(questions):
        prompt = chat_prompt_ids(backend, [ChatMessage("user", question.turns[0])])
        if seed:
            sampling = SamplingParams(temperature=0.8, top_p=0.95, seed=seed * 1000 + number)
        done = run_decoder(backend, decoder, {}, prompt, 256, sampling)
        rows.append((prompt + list(done.token_ids), len(prompt)))
        if number % 40 == 0:
            print(f"  text seed {seed}: {number}/{len(questions)}", flush=True)
    out.write_text(json.dumps(rows))
    return rows


def features(backend, rows, out: Path) -> dict[str, np.ndarray]:
    """Per position: h_t (float16), x = text[t + 1], the greedy token after x, whether x is
    an answer token, and which text it is from."""
    if out.exists():
        with np.load(out) as kept:
            return dict(kept)
    model = backend.model
    final_norm = model.final_norm
    hidden, nexts, targets, answer, text = [], [], [], [], []
    for index, (tokens, prompt_length) in enumerate(rows):
        backend.rollback(0)
        h, greedy = [], []
        for start in range(0, len(tokens), _CHUNK):
            chunk = tokens[start : start + _CHUNK]
            # (not `evaluate`: these passes are not the use its pass-cost table learns from)
            greedy.append(backend._evaluate(Block.chain(chunk)).argmax(-1))
            # the rows after the final norm: what the LM head multiplied
            h.append(rms_normed(model.last_residual, final_norm, model.shape.norm_eps))
            backend.commit(list(range(len(chunk))))
        h, greedy = np.concatenate(h), np.concatenate(greedy)
        t = np.arange(len(tokens) - 2)
        hidden.append(h[t].astype(np.float16))
        nexts.append(np.asarray(tokens[1:-1]))
        targets.append(greedy[1:-1])
        answer.append(t + 1 >= prompt_length)
        text.append(np.full(len(t), index))
    found = {
        "hidden": np.concatenate(hidden),
        "next": np.concatenate(nexts),
        "target": np.concatenate(targets),
        "answer": np.concatenate(answer),
        "text": np.concatenate(text),
    }
    np.savez(out, **found)
    return found


class Head(torch.nn.Module):
    """draft_head.DraftHead's computation, trainable."""

    def __init__(self, dim: int, hidden: int, out_rows: torch.Tensor) -> None:
        super().__init__()
        self.a = torch.nn.Linear(2 * dim, hidden)
        self.b = torch.nn.Linear(hidden, dim)
        torch.nn.init.zeros_(self.b.weight)
        torch.nn.init.zeros_(self.b.bias)
        self.out_rows = out_rows

    def forward(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        e = e * (h.norm(dim=-1, keepdim=True) / e.norm(dim=-1, keepdim=True).clamp_min(1e-6))
        z = h + self.b(torch.nn.functional.silu(self.a(torch.cat([h, e], -1))))
        return z @ self.out_rows.T


def train(found, embeddings, out_rows_all, args) -> dict[str, np.ndarray]:
    counts = np.bincount(found["target"], minlength=out_rows_all.shape[0])
    shortlist = np.argsort(-counts, kind="stable")[: args.shortlist]
    index = np.full(out_rows_all.shape[0], -1)
    index[shortlist] = np.arange(len(shortlist))
    keep = index[found["target"]] >= 0
    print(f"targets in the shortlist: {keep.mean():.3f} of {len(keep)} positions", flush=True)
    h = torch.from_numpy(found["hidden"][keep].astype(np.float32))
    e = torch.from_numpy(embeddings[found["next"][keep]])
    y = torch.from_numpy(index[found["target"][keep]])
    rows = torch.from_numpy(out_rows_all[shortlist])
    torch.manual_seed(0)
    head = Head(h.shape[1], args.hidden, rows)
    opt = torch.optim.AdamW(
        [*head.a.parameters(), *head.b.parameters()], lr=1e-3, weight_decay=0.01
    )
    batch = 256
    steps = args.epochs * (len(y) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 1e-3, total_steps=steps)
    started = time.time()
    for epoch in range(args.epochs):
        order = torch.randperm(len(y))
        for i in range(0, len(y) - batch + 1, batch):
            idx = order[i : i + batch]
            loss = torch.nn.functional.cross_entropy(head(h[idx], e[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        print(
            f"epoch {epoch + 1}: loss {loss.item():.3f}, {time.time() - started:.0f} s", flush=True
        )
    half = np.float16
    return {
        "a_weight": head.a.weight.detach().numpy().astype(half),
        "a_bias": head.a.bias.detach().numpy().astype(half),
        "b_weight": head.b.weight.detach().numpy().astype(half),
        "b_bias": head.b.bias.detach().numpy().astype(half),
        # the commonest `--kept` only: each row costs every guess a read from memory (a
        # shortlist of 1,024 guessed 0.352 along held-out answers, 2,048 0.359, in 0.6 the time)
        "shortlist": shortlist[: args.kept].astype(np.int32),
        "out_rows": out_rows_all[shortlist[: args.kept]].astype(half),
    }


def conversation_match(context: list[int], longest: int = 3) -> int:
    """How many of the context's last tokens (up to `longest`) occurred before, together."""
    best = 0
    for n in range(1, min(longest, len(context) - 1) + 1):
        tail = context[-n:]
        if not any(context[j : j + n] == tail for j in range(len(context) - n)):
            break
        best = n
    return best


def report(head: DraftHead, found, rows, embeddings) -> None:
    """The guess against the next greedy token on held-out answers, by conversation match."""
    hits: dict[int, list[int]] = {}
    offsets = np.searchsorted(found["text"], np.arange(len(rows)))
    for position in np.flatnonzero(found["answer"]):
        tokens = rows[found["text"][position]][0]
        t = position - offsets[found["text"][position]]
        guess = head.guess(
            DraftFeatures(
                found["hidden"][position].astype(np.float32), embeddings[found["next"][position]]
            )
        ).token
        bucket = conversation_match(tokens[: t + 2])
        tally = hits.setdefault(bucket, [0, 0])
        tally[0] += 1
        tally[1] += int(guess == found["target"][position])
    total = sum(n for n, _ in hits.values())
    right = sum(h for _, h in hits.values())
    print(f"held-out answers: the guess was the next greedy token {right / total:.3f} of {total}")
    for bucket in sorted(hits):
        n, h = hits[bucket]
        print(f"  conversation match {bucket}{'+' if bucket == 3 else ''}: {h / n:.3f} of {n}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--work", type=Path, required=True, help="where each stage's output is kept"
    )
    parser.add_argument("--samples", type=int, default=4, help="sampled answers per question")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--shortlist", type=int, default=2048, help="targets trained on")
    parser.add_argument("--kept", type=int, default=1024, help="of them, the commonest written")
    parser.add_argument("--report", action="store_true", help="measure it on held-out answers")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    backend = load_model(None, LoadOptions(backend="int4"), lambda *a: None)
    rows = []
    for seed in range(args.samples + 1):
        rows += texts(backend, None, seed, args.work / f"texts-{seed}.json")
    found = features(backend, rows, args.work / "features.npz")
    ids = np.arange(backend.vocab_size)
    embeddings = backend.model.embedded(list(ids))
    # the output rows: the LM head's (the bundled model ties them to the embeddings)
    eye = torch.eye(backend.model.shape.dim)
    out_rows = backend.model.head(eye).numpy().T.copy()  # [vocab, dim]: the LM head's rows
    arrays = train(found, embeddings, out_rows, args)
    path = head_path(backend)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    if args.report:
        held = texts(backend, HELD_OUT, 0, args.work / "held-out-texts.json")
        held_found = features(backend, held, args.work / "held-out-features.npz")
        head = DraftHead({k: np.asarray(v) for k, v in arrays.items()}, backend.vocab_size)
        report(head, held_found, held, embeddings)


if __name__ == "__main__":
    main()
