"""A compact, static suffix index over many token sequences: what every saved chat is drafted from.

A suffix tree (ArcticInference's, used for the per-request sources) costs hundreds of bytes per
indexed token, too much for a store of thousands of messages (docs/bench-log.md). This
index keeps three int32 arrays — the text, its suffix array sorted on the first `DEPTH` tokens, and
the suffix-array positions grouped by the token before each suffix (an FM-index's occurrence lists)
— 12 bytes per token, built with numpy sorts, and saved to disk as plain .npy files.

Finding the longest tail of the context that occurs is a backward search (one token at a time from
the end, two binary searches per token), which also yields the range of suffixes for every shorter
tail. Backward search over a suffix array sorted on its first `DEPTH` tokens only (ties in position
order) is exact for patterns up to `DEPTH` tokens: a range depends only on that many tokens. The
continuation is then walked as SuffixDecoding does: the most frequent next token at each depth,
its probability the product of the shares, until it falls under `min_prob`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from specchat.decoding.sources import Continuation

DEPTH = 32  # longest context tail matched, in tokens
_SAMPLE = 64  # occurrences examined per depth at most (evenly spaced over a larger range)
_MAX_LENGTHS_TRIED = 4  # match lengths whose continuations are scored, longest first
_FILES = ("text", "suffixes", "by_previous", "starts")


class TokenSuffixArray:
    """Sequences of token ids, indexed for suffix matching. Immutable once built."""

    def __init__(
        self,
        text: np.ndarray,
        suffixes: np.ndarray,
        by_previous: np.ndarray,
        starts: np.ndarray,
    ) -> None:
        # text holds token + 1, with 0 between (and after) sequences; it is padded with zeros so
        # that reading past a suffix never leaves the array.
        self.text = text
        self.suffixes = suffixes
        self.by_previous = by_previous
        self.starts = starts  # first suffix-array index of each value (len = values + 1)
        self._starts: list[int] = np.asarray(starts).tolist()  # fast scalar lookups

    # -- building -------------------------------------------------------------------------------
    @classmethod
    def build(cls, sequences: Iterable[Sequence[int]]) -> TokenSuffixArray:
        parts: list[np.ndarray] = [np.zeros(1, dtype=np.int32)]
        for seq in sequences:
            parts.append(np.asarray(seq, dtype=np.int32) + 1)
            parts.append(np.zeros(1, dtype=np.int32))
        body = np.concatenate(parts)
        n = len(body)
        suffixes = _sort_suffixes(body, DEPTH)
        previous = body[(suffixes.astype(np.int64) - 1) % n]
        by_previous = np.argsort(previous, kind="stable").astype(np.int32)
        counts = np.bincount(body, minlength=1)
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        text = np.concatenate([body, np.zeros(DEPTH + 1, dtype=np.int32)])
        return cls(text, suffixes, by_previous, starts)

    @staticmethod
    def spans(sequences: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
        """Where each of the sequences `build` was given lies in `text` (its values are token + 1)."""
        found, start = [], 1
        for seq in sequences:
            found.append((start, start + len(seq)))
            start += len(seq) + 1
        return found

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name in _FILES)

    @property
    def n_tokens(self) -> int:
        """Indexed tokens, separators included."""
        return len(self.suffixes)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name in _FILES:
            np.save(folder / f"{name}.npy", getattr(self, name))

    @classmethod
    def load(cls, folder: Path) -> TokenSuffixArray:
        """Memory-mapped: loading costs nothing until a lookup touches the pages."""
        # plain arrays over the mapping: numpy's memmap subclass costs on every slice
        arrays = [np.asarray(np.load(folder / f"{name}.npy", mmap_mode="r")) for name in _FILES]
        return cls(*arrays)

    # -- looking up ----------------------------------------------------------------------------
    def matches(self, context: Sequence[int]) -> list[tuple[int, int, int]]:
        """(length, lo, hi) for every tail of `context` that occurs, longest last: the suffixes
        in suffixes[lo:hi] start with the context's last `length` tokens."""
        starts, by_previous = self._starts, self.by_previous
        top = len(starts) - 1
        found: list[tuple[int, int, int]] = []
        bounds = np.zeros(2, dtype=np.int32)
        for length, token in enumerate(reversed(context[-DEPTH:]), start=1):
            value = int(token) + 1
            if not 0 < value < top:
                break
            first, last = starts[value], starts[value + 1]
            if length == 1:
                lo, hi = first, last
            else:
                # searchsorted with an int32 key array: a Python int would cast the whole block
                lo, hi = (first + by_previous[first:last].searchsorted(bounds)).tolist()
            if lo >= hi:
                break
            bounds[0], bounds[1] = lo, hi
            found.append((length, lo, hi))
        return found

    def continuation(
        self, context: Sequence[int], limit: int, min_prob: float = 0.1, factor: float = 1.0
    ) -> Continuation | None:
        """The best-scored continuation of the context's tails (SuffixDecoding's rule: at most
        `factor` × match length tokens from a match; ties go to the longer match)."""
        best: Continuation | None = None
        tried = 0
        previous_size = -1
        for length, lo, hi in reversed(self.matches(context)):
            if hi - lo == previous_size:
                continue  # the same occurrences as the longer match: the same continuation
            previous_size = hi - lo
            cap = min(limit, int(length * factor + 1e-6))
            if cap > 0:
                found = self._walk(lo, hi, length, cap, min_prob)
                if found.tokens and (best is None or found.score > best.score):
                    best = found
            tried += 1
            if tried >= _MAX_LENGTHS_TRIED:
                break
        return best

    def _walk(self, lo: int, hi: int, offset: int, limit: int, min_prob: float) -> Continuation:
        """Follow the most frequent continuation of the occurrences in suffixes[lo:hi], a stretch
        where they all agree at a time (one numpy gather), deciding by counts where they part."""
        text = self.text
        if hi - lo > _SAMPLE:
            picked = self.suffixes[np.linspace(lo, hi - 1, _SAMPLE).astype(np.int64)]
        else:
            picked = self.suffixes[lo:hi]
        positions = np.asarray(picked, dtype=np.int64) + offset
        tokens: list[int] = []
        probs: list[float] = []
        prob = 1.0
        while len(tokens) < limit:
            width = limit - len(tokens)
            block = text[positions[:, None] + np.arange(width)]
            agree = (block == block[0]).all(axis=0)
            shared = width if agree.all() else int(np.argmin(agree))
            run = block[0, :shared]
            ends = np.flatnonzero(run == 0)
            if len(ends):
                run = run[: ends[0]]
            tokens.extend((run - 1).tolist())
            probs.extend([prob] * len(run))
            if len(ends) or shared == width:
                break
            column = block[:, shared]
            values, counts = np.unique(column, return_counts=True)
            if values[0] == 0:  # occurrences whose sequence ends here count against the others
                values, counts = values[1:], counts[1:]
                if not len(values):
                    break
            best = int(np.argmax(counts))
            prob *= float(counts[best]) / len(positions)
            if prob < min_prob:
                break
            tokens.append(int(values[best]) - 1)
            probs.append(prob)
            positions = positions[column == values[best]] + shared + 1
        return Continuation(tokens[:limit], probs[:limit], offset)


def _sort_suffixes(body: np.ndarray, depth: int) -> np.ndarray:
    """Suffix-array positions sorted on each suffix's first `depth` tokens (prefix doubling;
    suffixes equal on those tokens stay in position order)."""
    n = len(body)
    rank = np.unique(body, return_inverse=True)[1].astype(np.int64)
    width = 1
    while width < depth:
        shifted = np.zeros(n, dtype=np.int64)
        shifted[: n - width] = rank[width:] + 1
        key = rank * (n + 1) + shifted
        unique, rank = np.unique(key, return_inverse=True)
        rank = rank.astype(np.int64)
        width *= 2
        if len(unique) == n:
            break
    return np.argsort(rank, kind="stable").astype(np.int32)
