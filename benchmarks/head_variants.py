"""How often draft heads of other shapes than the shipped one would guess the next greedy token.

The shipped head (specchat/decoding/draft_head.py) is a small MLP over the last committed row's
hidden state h_t and the pending token's embedding: right about a third of the time along
held-out greedy answers. Before building a costlier head into the runtime, this measures whether
a richer one would be right more often, all trained the same way on the same texts
(`train_draft_head.py`'s: the dev half's first turns, greedy's answer and `--samples` sampled
ones; the target the model's greedy token after the next token), judged on the held-out first
turns' greedy answers (answer positions only):

- `mlp`: the shipped head's shape, [h_t; e(x_t+1)] -> 256 -> h_t + delta;
- `prev`: the same with the row before's h_t-1 and e(x_t) as well;
- `attn`: EAGLE's decoder layer (Li et al., arXiv 2401.15077): the fused [h_s; e(x_s+1)] of every
  position so far through one causal attention layer (RoPE) and a gated MLP (`--ffn` wide);
- `--hf --layers 6,15,25`: every feature from transformers (float32) instead of int4 (`--hf`
  alone: the comparison), and with `--layers` the residual stream after those layers beside h_t
  (EAGLE-3's low, middle and high features; `mlp` and `prev` only).

    PYTHONPATH=. .venv/bin/python benchmarks/head_variants.py --work /tmp/head mlp prev attn \
        [--samples 1] [--epochs 4] [--hf [--layers 6,15,25]]

Texts and features are kept under --work (shared with train_draft_head.py's stages). Nothing is
written to specchat/. Results: docs/bench-log.md, session 61.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch
from train_draft_head import HELD_OUT, features, texts

from specchat.models import LoadOptions, load_model


def scaled(e: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """The embedding at h's length, as the shipped head takes it."""
    return e * (h.norm(dim=-1, keepdim=True) / e.norm(dim=-1, keepdim=True).clamp_min(1e-6))


def rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight


def shifted(x: torch.Tensor) -> torch.Tensor:
    """Each position's row before ([batch, time, dim]; zeros at the first)."""
    return torch.nn.functional.pad(x, (0, 0, 1, 0))[:, :-1]


class Mlp(torch.nn.Module):
    def __init__(self, dim: int, inputs: int, width: int = 256) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(inputs * dim, width), torch.nn.Linear(width, dim)
        torch.nn.init.zeros_(self.b.weight)
        torch.nn.init.zeros_(self.b.bias)

    def forward(self, h, e, extra, previous: bool):
        parts = [h, e, *extra, *((shifted(h), shifted(e)) if previous else ())]
        return h + self.b(torch.nn.functional.silu(self.a(torch.cat(parts, -1))))


class Attention(torch.nn.Module):
    def __init__(self, dim: int, ffn: int, heads: int = 9, base: float = 100000.0) -> None:
        super().__init__()
        self.heads, self.head_dim, self.base = heads, dim // heads, base
        self.fuse = torch.nn.Linear(2 * dim, dim)
        self.norms = torch.nn.Parameter(torch.ones(2, dim))
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.o = torch.nn.Linear(dim, dim, bias=False)
        self.gate, self.up = (torch.nn.Linear(dim, ffn, bias=False) for _ in range(2))
        self.down = torch.nn.Linear(ffn, dim, bias=False)
        self.out = torch.nn.Linear(dim, dim)  # zero at the start: the head starts as h_t
        torch.nn.init.zeros_(self.out.weight)
        torch.nn.init.zeros_(self.out.bias)

    def rope(self, x: torch.Tensor) -> torch.Tensor:
        half = self.head_dim // 2
        angles = torch.arange(x.shape[-2])[:, None] / self.base ** (torch.arange(half) / half)
        cos, sin, a, b = angles.cos(), angles.sin(), x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)

    def forward(self, h, e, valid):
        u = self.fuse(torch.cat([h, e], -1))
        batch, steps, dim = u.shape
        q, k, v = (
            self.qkv(rms(u, self.norms[0]))
            .view(batch, steps, 3, self.heads, self.head_dim)
            .permute(2, 0, 3, 1, 4)
        )
        mask = torch.ones(steps, steps, dtype=torch.bool).tril()[None, None] & valid[:, None, None]
        attended = torch.nn.functional.scaled_dot_product_attention(
            self.rope(q), self.rope(k), v, attn_mask=mask
        )
        u = u + self.o(attended.transpose(1, 2).reshape(batch, steps, dim))
        m = rms(u, self.norms[1])
        u = u + self.down(torch.nn.functional.silu(self.gate(m)) * self.up(m))
        return h + self.out(u)


def hf_features(rows, layers: list[int], out: Path) -> dict[str, np.ndarray]:
    """transformers' final hidden state and the residual after `layers`, at the positions
    `features` keeps (all but a text's last two tokens); cached in `out`."""
    if out.exists():
        with np.load(out) as cached:
            if all(f"l{n}" in cached for n in layers):
                return dict(cached)
    model = load_model(None, LoadOptions(backend="hf"), lambda *a: None).model.eval()
    kept: dict[str, list[np.ndarray]] = {"final": [], **{f"l{n}": [] for n in layers}}
    for tokens, _ in rows:
        with torch.no_grad():
            states = model(torch.tensor([tokens]), output_hidden_states=True).hidden_states
        keep = len(tokens) - 2
        kept["final"].append(states[-1][0, :keep].numpy().astype(np.float16))
        for n in layers:
            kept[f"l{n}"].append(states[n][0, :keep].numpy().astype(np.float16))
    found = {key: np.concatenate(v) for key, v in kept.items()}
    np.savez(out, **found)
    return found


def texts_of(found, hidden: np.ndarray, extra: list[np.ndarray], index: np.ndarray):
    """One (h, x, targets in the shortlist, targets, answer mask, extra features) a text."""
    bounds = np.flatnonzero(np.diff(found["text"])) + 1
    out = []
    for s, e in zip(np.r_[0, bounds], np.r_[bounds, len(found["text"])], strict=True):
        out.append(
            (
                torch.from_numpy(hidden[s:e].astype(np.float32)),
                torch.from_numpy(found["next"][s:e]),
                torch.from_numpy(index[found["target"][s:e]]),
                torch.from_numpy(found["target"][s:e]),
                torch.from_numpy(found["answer"][s:e]),
                [torch.from_numpy(x[s:e].astype(np.float32)) for x in extra],
            )
        )
    return out


def padded(group, dim: int):
    steps = max(len(g[0]) for g in group)
    h, x = torch.zeros(len(group), steps, dim), torch.zeros(len(group), steps, dtype=torch.long)
    y = torch.full((len(group), steps), -1, dtype=torch.long)
    valid = torch.zeros(len(group), steps, dtype=torch.bool)
    extra = [torch.zeros(len(group), steps, dim) for _ in group[0][5]]
    for b, g in enumerate(group):
        n = len(g[0])
        h[b, :n], x[b, :n], y[b, :n], valid[b, :n] = g[0], g[1], g[2], True
        for slot, feature in zip(extra, g[5], strict=True):
            slot[b, :n] = feature
    return h, x, y, valid, extra


def measure(kind, train, held, embeddings, rows, shortlist, args) -> str:
    dim = rows.shape[1]
    torch.manual_seed(0)
    if kind == "attn":
        head = Attention(dim, args.ffn)
    else:
        head = Mlp(dim, 2 + len(train[0][5]) + 2 * (kind == "prev"))

    def run(h, x, valid, extra):
        e = scaled(embeddings[x], h)
        z = head(h, e, valid) if kind == "attn" else head(h, e, extra, kind == "prev")
        return z @ rows.T

    opt = torch.optim.AdamW(head.parameters(), lr=1e-3, weight_decay=0.01)
    steps = args.epochs * math.ceil(len(train) / args.batch)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, 1e-3, total_steps=steps)
    started = time.time()
    for _ in range(args.epochs):
        order = torch.randperm(len(train)).tolist()
        for i in range(0, len(order), args.batch):
            h, x, y, valid, extra = padded([train[j] for j in order[i : i + args.batch]], dim)
            loss = torch.nn.functional.cross_entropy(
                run(h, x, valid, extra).reshape(-1, len(shortlist)), y.reshape(-1), ignore_index=-1
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
    right = [0, 0, 0]  # top-1 right, top-2 right, positions
    with torch.no_grad():
        for i in range(0, len(held), 8):
            group = held[i : i + 8]
            h, x, _, valid, extra = padded(group, dim)
            top = shortlist[run(h, x, valid, extra).topk(2, -1).indices]
            for b, g in enumerate(group):
                n, answer, target = len(g[0]), g[4], g[3]
                first = top[b, :n, 0] == target
                right[0] += int(first[answer].sum())
                right[1] += int((first | (top[b, :n, 1] == target))[answer].sum())
                right[2] += int(answer.sum())
    return (
        f"{kind}: the guess right {right[0] / right[2]:.3f}, one of two guesses "
        f"{right[1] / right[2]:.3f}, of {right[2]} answer positions ({time.time() - started:.0f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kinds", nargs="+", choices=("mlp", "prev", "attn"))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=1, help="sampled answers per question")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2, help="texts a step")
    parser.add_argument("--ffn", type=int, default=512, help="the attention layer's MLP width")
    parser.add_argument("--hf", action="store_true", help="features from transformers")
    parser.add_argument("--layers", default="", help="with --hf: e.g. 6,15,25")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    backend = load_model(None, LoadOptions(backend="int4"), lambda *a: None)
    rows_of = [texts(backend, None, seed, args.work / f"texts-{seed}.json")
               for seed in range(args.samples + 1)]  # fmt: skip
    train_rows = [row for rows in rows_of for row in rows]
    held_rows = texts(backend, HELD_OUT, 0, args.work / "held-out-texts.json")
    found = features(backend, train_rows, args.work / f"features-{args.samples}.npz")
    held_found = features(backend, held_rows, args.work / "held-out-features.npz")
    embeddings = torch.from_numpy(backend.model.embedded(list(range(backend.vocab_size))))
    dim = backend.model.shape.dim
    out_rows = torch.from_numpy(backend.model.head(torch.eye(dim)).numpy().T.copy())
    counts = np.bincount(found["target"], minlength=out_rows.shape[0])
    shortlist = np.argsort(-counts, kind="stable")[:2048]
    index = np.full(out_rows.shape[0], -1)
    index[shortlist] = np.arange(len(shortlist))
    rows, shortlist = out_rows[torch.from_numpy(shortlist)], torch.from_numpy(shortlist)
    layers = [int(n) for n in args.layers.split(",") if n]
    if args.hf:  # every feature from transformers: h and the layers' residuals
        normed = []
        for name, text_rows in (("train", train_rows), ("held-out", held_rows)):
            kept = hf_features(text_rows, layers, args.work / f"hf-{name}-{args.samples}.npz")
            final = kept["final"].astype(np.float32)
            length = np.linalg.norm(final, axis=-1, keepdims=True)
            extra = []
            for n in layers:  # each layer's residual at the length of h
                x = kept[f"l{n}"].astype(np.float32)
                extra.append(x * length / np.linalg.norm(x, axis=-1, keepdims=True).clip(1e-6))
            normed.append((final, extra))
        train = texts_of(found, *normed[0], index)
        held = texts_of(held_found, *normed[1], index)
    else:
        train = texts_of(found, found["hidden"], [], index)
        held = texts_of(held_found, held_found["hidden"], [], index)
    print(f"{len(train)} texts, {len(found['target'])} positions", flush=True)
    for kind in args.kinds:
        print(measure(kind, train, held, embeddings, rows, shortlist, args), flush=True)


if __name__ == "__main__":
    main()
