"""The model's own recycled candidates (Token Recycling, Luo et al., arXiv 2408.08696): for every
token, the likeliest tokens to follow it, taken from logits the target computed anyway.

Every pass yields a row of logits for each token it evaluated; the row of token t ranks what the
model would say after t in that context. Keeping each token's top `WIDTH` from its latest row
gives, for text that copies nothing, a guess at the next token before the pass that decides it:
measured on held-out first turns with a table filled only by the same answers, the next greedy
token was the table's first candidate for the previous token 27% of the time and among its first
four 41% (docs/bench-log.md). Drafts built from it are copies (q = 1), verified exactly as any.

One table per model (its token ids), shared by every decoder in the process, kept on disk under
the data dir beside the draft policy's learned rates (learned state, not a cache to rebuild) and
warmed by every answer: loaded in a background thread (start-up and the
first token never wait; until then it has only what this run learned), written atomically (a
temporary file renamed over the old one, so a kill leaves the old table or the new one), and a
file that does not hold a table of the model's shape is ignored with a one-line `problem`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from specchat.backends.base import Backend
from specchat.locations import data_dir

WIDTH = 8  # successors kept per token: a vocabulary of 50k tokens takes 1.5 MB, 150k 4.6 MB
_FOLDER = "recycled-candidates"
_tables: dict[str, RecycledCandidates] = {}
_tables_lock = threading.Lock()


def top_successors(logits: object, width: int = WIDTH) -> np.ndarray:
    """The indices of each row's `width` largest logits, largest first (int32 [rows, width])."""
    rows = np.ascontiguousarray(_as_numpy(logits), dtype=np.float32)
    if rows.ndim == 1:
        rows = rows[None, :]
    out = np.empty((rows.shape[0], width), dtype=np.int32)
    library = _kernels()
    if library is not None:
        library.top_k_rows(rows.ctypes.data, rows.shape[0], rows.shape[1], width, out.ctypes.data)
        return out
    part = np.argpartition(-rows, width - 1, axis=1)[:, :width]
    order = np.argsort(-np.take_along_axis(rows, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1).astype(np.int32)


def _as_numpy(logits: object) -> np.ndarray:
    if isinstance(logits, np.ndarray):
        return logits
    return logits.float().cpu().numpy()  # a torch tensor (transformers)


@functools.cache
def _kernels():
    """The int4 runtime's C kernels (a one-pass top-k), or None where they cannot be built;
    looked up once (finding the compiler on every pass would cost more than the top-k)."""
    from specchat.backends.int4.kernels import kernels
    from specchat.errors import SpecchatError

    try:
        return kernels()
    except SpecchatError:
        return None


def checkpoint() -> Callable[[], None]:
    """A function that puts every table of this process back as it is now (one made later:
    empty). A race runs each entrant from the same tables: otherwise a run would draft the answer
    that the run before it, to the same prompt, taught the table (a repeat, or another lane)."""
    with _tables_lock:
        kept = {key: (table.table.copy(), table._learned.copy()) for key, table in _tables.items()}

    def restore() -> None:
        with _tables_lock:
            tables = dict(_tables)
        for key, table in tables.items():
            rows, learned = kept.get(key, (None, None))
            with table._lock:
                if rows is None:
                    table.table.fill(-1)
                    table._learned[:] = False
                else:
                    table.table[:] = rows
                    table._learned[:] = learned

    return restore


def table_path(backend: Backend) -> Path:
    """Where the table of `backend`'s model is kept (by model and vocabulary, not runtime: the
    runtimes of one model rank its tokens alike)."""
    key = f"{backend.model_name}|{backend.vocab_size}"
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    return data_dir() / _FOLDER / f"{digest}.npy"


class RecycledCandidates:
    """Each token's likeliest successors (-1: none seen yet), learned from passes' logits."""

    def __init__(self, vocab_size: int, path: Path | None = None) -> None:
        self.table = np.full((vocab_size, WIDTH), -1, dtype=np.int32)
        self.path = path
        self.problem: str | None = None  # why the kept table was not loaded
        self.loaded = threading.Event()  # the kept table was read (or found missing or bad)
        self._learned = np.zeros(vocab_size, dtype=bool)  # rows this run wrote
        self._changed = False
        self._lock = threading.Lock()

    @classmethod
    def of(cls, backend: Backend) -> RecycledCandidates:
        """The process's table for `backend`'s model, its kept copy loading in the background."""
        path = table_path(backend)
        key = str(path)
        with _tables_lock:
            table = _tables.get(key)
            if table is None:
                table = _tables[key] = cls(backend.vocab_size, path)
                threading.Thread(target=table.load, name="recycled-table", daemon=True).start()
        return table

    def successors(self, token: int) -> np.ndarray:
        return self.table[token]

    def chain(self, token: int, length: int) -> list[int]:
        """The first candidates after `token`, each after the one before (what the model said
        last time after each of them), stopping where nothing is known or a token repeats."""
        out: list[int] = []
        while len(out) < length:
            token = int(self.table[token, 0])
            if token < 0 or token in out:
                break
            out.append(token)
        return out

    def learn(self, tokens: Sequence[int], logits: object) -> None:
        """Row i of `logits` is what the model said after `tokens[i]`: keep its top successors."""
        if not len(tokens):
            return
        top = top_successors(logits)
        rows = list(tokens)
        with self._lock:
            self.table[rows] = top
            self._learned[rows] = True
            self._changed = True

    # -- on disk ---------------------------------------------------------------------------
    def load(self) -> None:
        """Read the kept table; rows this run already learned keep what it learned."""
        try:
            if self.path is None or not self.path.exists():
                return
            try:
                kept = np.load(self.path, allow_pickle=False)
            except (OSError, ValueError, EOFError) as exc:
                self.problem = f"recycled candidates {self.path}: unreadable ({exc}); ignored"
                return
            vocab = self.table.shape[0]
            if (
                kept.dtype != np.int32
                or kept.shape != self.table.shape
                or kept.min(initial=0) < -1
                or kept.max(initial=-1) >= vocab
            ):
                self.problem = (
                    f"recycled candidates {self.path}: not a table for this model; ignored"
                )
                return
            with self._lock:
                self.table[~self._learned] = kept[~self._learned]
        finally:
            self.loaded.set()

    def save(self) -> None:
        """Write the table if it changed: a temporary file in the same folder, then renamed."""
        if self.path is None or not self._changed or not self.loaded.is_set():
            return  # (before the kept table is read, writing would throw its rows away)
        with self._lock:
            snapshot = self.table.copy()
            self._changed = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".recycled-", suffix=".npy", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                np.save(handle, snapshot, allow_pickle=False)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
