"""A draft head: the token after next, guessed from the hidden state the target already computed.

A pass's last row ends in a hidden state h (after the final norm) whose logits gave the pending
token x. For text that copies nothing, the token after x is guessed by a small network over
[h; embedding(x)] — EAGLE's inputs (Li et al., arXiv 2401.15077) without its attention layer —
whose output goes through the model's own output rows for a shortlist of its commonest tokens.
It is trained per model on the model's own greedy continuations (self-distillation:
benchmarks/train_draft_head.py), so it guesses what greedy decoding would say, and a guess is a
draft like a copied one (q = 1), verified exactly.

Measured on held-out first turns of the bundled model (docs/bench-log.md, session 57): the guess
was the next greedy token at about a third or more of the positions where the conversation's
own copies offer nothing or one token of match — better than a one-token copy (26%) and the
recycled candidates (19–27%) there.

A head is a `.npz` file: `a_weight` [hidden, 2·dim], `a_bias`, `b_weight` [dim, hidden],
`b_bias`, `shortlist` (token ids) and `out_rows` [shortlist, dim] (the model's output rows for
them). The bundled model's ships with specchat (`specchat/draft_heads/`); a file that does not
hold a head of the model's shape is ignored with a one-line `problem`.

Where the runtime can, the head rides the pass (`Backend.ride_draft_head`, int4's
c/draft_head.c `guess_rows`): the pass makes the guess in C right after its logits, for the row
greedy verification stops at, and the next step reads it (`Backend.ridden_guess`). Asked after
the pass instead, the same guess cost 0.13-0.22 ms a step in Python and re-read caches, beside a
3.6 ms pass; riding, 0.03-0.06 ms inside it (docs/bench-log.md, session 61). `guess` below is
the after-the-pass path: the first step, and any runtime or step the head did not ride.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import NamedTuple

import numpy as np

from specchat.backends.base import Backend, DraftFeatures
from specchat.errors import SpecchatError

_FOLDER = Path(__file__).resolve().parent.parent / "draft_heads"
_KEYS = ("a_weight", "a_bias", "b_weight", "b_bias", "shortlist", "out_rows")


class Guess(NamedTuple):
    """The head's guess and its probability under the head (its softmax over the shortlist):
    the guess is right far more often where the head is sure (docs/bench-log.md, session 58)."""

    token: int
    sure: float


class DraftHead:
    """One model's head: its matrices as the int4 runtime's int8 rows, its biases float32."""

    def __init__(self, arrays: dict[str, np.ndarray], vocab: int) -> None:
        a, b, rows = arrays["a_weight"], arrays["b_weight"], arrays["out_rows"]
        shortlist = arrays["shortlist"]
        if a.ndim != 2 or a.shape[1] % 2:
            raise ValueError("not a draft head")
        hidden, dim = a.shape[0], a.shape[1] // 2
        self.dim = dim
        if (
            a.shape != (hidden, 2 * dim)
            or arrays["a_bias"].shape != (hidden,)
            or b.shape != (dim, hidden)
            or arrays["b_bias"].shape != (dim,)
            or shortlist.ndim != 1
            or rows.shape != (shortlist.shape[0], dim)
            or not shortlist.size
            or shortlist.min() < 0
            or shortlist.max() >= vocab
        ):
            raise ValueError("not a draft head for this model")
        f32 = functools.partial(np.ascontiguousarray, dtype=np.float32)
        weights = [f32(a), f32(b), f32(rows)]
        self.a_bias, self.b_bias = f32(arrays["a_bias"]), f32(arrays["b_bias"])
        if not all(np.isfinite(w).all() for w in (*weights, self.a_bias, self.b_bias)):
            raise ValueError("a draft head with weights that are not numbers")
        self.shortlist = shortlist.astype(np.int32)
        # in the int4 runtime's C (c/draft_head.c) as int8 codes (a byte a weight, a scale per
        # 32), on the passes' OpenMP team: numpy's BLAS would start threads of its own beside
        # it, and a pass waited on them at every barrier (an answer drafting a guess every step
        # ran 12x slower); in Python the step's few calls cost 0.4 ms
        from specchat.backends.int4.c_structs import CDraftHead, linear_weights
        from specchat.backends.int4.kernels import kernels

        self._kernels = kernels()
        self._linears = [_int8_linear(w, self._kernels) for w in weights]
        self._c = CDraftHead(
            *map(linear_weights, self._linears), self.a_bias.ctypes.data,
            self.b_bias.ctypes.data, self.shortlist.ctypes.data,
        )  # fmt: skip
        self.c_pointer = ctypes.addressof(self._c)  # what a pass a head rides reads too

    def guess(self, features: DraftFeatures) -> Guess | None:
        """The token after the pending one (None: features of another width)."""
        row, embedding, norm = features.row, features.embedding, features.norm
        if row.shape != (self.dim,) or embedding.shape != (self.dim,):
            return None
        if norm is not None and norm.shape != (self.dim,):
            return None
        row, embedding = (np.ascontiguousarray(v, dtype=np.float32) for v in (row, embedding))
        norm = None if norm is None else np.ascontiguousarray(norm, dtype=np.float32)
        out, sure = ctypes.c_int32(), ctypes.c_float()  # a call's own: races share a head
        self._kernels.draft_head_guesses(
            self.c_pointer, row.ctypes.data, None if norm is None else norm.ctypes.data,
            features.eps, embedding.ctypes.data, 1, features.threads, ctypes.byref(out),
            ctypes.byref(sure),
        )  # fmt: skip
        return Guess(int(out.value), float(sure.value))


def _int8_linear(weight: np.ndarray, library):
    """`weight` [rows, cols] as the C kernels' int8 rows: codes rounded to the nearest of 255
    steps of each 32 weights' largest magnitude (as Q8_0 stores a weight), float32 out."""
    from specchat.backends.gguf.tensors import GroupedInt8
    from specchat.backends.int4.linear import RowsLinear

    rows, cols = weight.shape
    if cols % 32:
        raise ValueError("a draft head whose widths are not multiples of 32")
    groups = weight.reshape(rows, cols // 32, 32)
    scales = np.abs(groups).max(axis=2) / np.float32(127.0)
    codes = np.rint(groups / np.where(scales > 0, scales, 1.0)[..., None]).astype(np.int8)
    packed = GroupedInt8(codes.reshape(rows, cols), scales.astype(np.float32), None, 32)
    return RowsLinear(packed, float32_out=True, library=library)


def head_path(backend: Backend) -> Path:
    """Where the head of `backend`'s model ships (by the model's name)."""
    return _FOLDER / f"{backend.model_name}.npz"


@functools.cache
def load_head(path: Path, vocab: int) -> tuple[DraftHead | None, str | None]:
    """The head in `path` (read once a process) and, where a file was there but not usable,
    why (one line); (None, None) where there is no file."""
    if not path.is_file():
        return None, None
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in _KEYS}
        return DraftHead(arrays, vocab), None
    except (OSError, ValueError, KeyError, EOFError, SpecchatError) as exc:
        return None, f"draft head {path}: not usable ({exc}); ignored"


def head_for(backend: Backend) -> tuple[DraftHead | None, str | None]:
    """The head of `backend`'s model, or None (and why, where a file was not usable). Only a
    runtime that gives its hidden states (`Backend.draft_features`) drafts from it."""
    return load_head(head_path(backend), int(backend.vocab_size))
