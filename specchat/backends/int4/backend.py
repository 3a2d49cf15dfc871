"""The int4 backend: a GGUF model (`families.py`) on specchat's own C kernels, where a drafted
token costs little.

On this runtime a k-token block costs little more than one token (each 4-bit weight is unpacked
once for every token of the block), and every row of a block (chain or tree) is bitwise
the logits of that token evaluated alone behind the same prefix, so greedy-family decoders stay
exactly greedy. The forward is `model.Int4Model`; the tokenizer and chat template are
llama.cpp's for the same file (`gguf/vocab.py`), so prompts tokenize as on the llama backend.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np

from specchat.backends.base import Block, DraftFeatures, block_to_commit, grows
from specchat.backends.block_cost import CostsByThreads, MeasuredCosts
from specchat.backends.gguf.header import read_header
from specchat.backends.gguf.tensors import (
    GGUFTensors,
    dense_types,
    int4_types,
)
from specchat.backends.gguf.vocab import LlamaVocabulary, VocabularyOf
from specchat.backends.int4.families import FAMILIES, ROPE_SCALINGS
from specchat.backends.int4.kernels import kernels
from specchat.backends.registry import INT4
from specchat.backends.threads_by_load import ThreadsByLoad, following_load
from specchat.errors import SpecchatError
from specchat.hardware import physical_cores
from specchat.heap import give_back_freed

_PREFILL_CHUNK = 256
_MAX_BLOCK = 512  # widest block (and prefill chunk) one pass takes


@functools.lru_cache(maxsize=64)
def ancestry(parents: tuple[int, ...] | range) -> np.ndarray:
    """Row i: the block rows token i attends to (its ancestors from the root down, then itself),
    padded with zeros to the deepest row's count. Kept for the blocks decoding meets again and
    again (read-only): built anew, it was a few hundredths of a millisecond of every step."""
    paths: list[list[int]] = []
    for index, parent in enumerate(parents):
        paths.append([*(paths[parent] if parent >= 0 else []), index])
    table = _padded(paths)
    table.flags.writeable = False
    return table


def _padded(paths: list[list[int]]) -> np.ndarray:
    """Each path a row, padded with zeros to the longest."""
    table = np.zeros((len(paths), max((len(p) for p in paths), default=1)), dtype=np.int32)
    for index, path in enumerate(paths):
        table[index, : len(path)] = path
    return table


def _paths_of(tree: Block, rows: range) -> np.ndarray:
    """`ancestry`'s rows `rows` of `tree`, built for those rows alone (a beam's tree grows to
    thousands of rows, of which a pass evaluates a few)."""
    return _padded([tree.path_to(row) for row in rows])


def cost_key(path: Path, level: str | None = None) -> str:
    """What this runtime's pass costs (and exactness) on the file are kept under: the file, the
    instruction-set level its kernels run at and their build, each of which changes both."""
    library = kernels(level)
    return f"{INT4}|{path.name}|{path.stat().st_size}|{library.level}|{library.key}"


def unavailable_reason(path: Path, device: str) -> str | None:
    """Why the int4 runtime cannot run the GGUF at `path` on `device` (None: it can), from the
    file's header and the kernels' build: a model of a family it runs (`families.py`), with a
    RoPE scaling it implements, whose tensors are all of types it carries, on a CPU where its
    kernels build."""
    if device != "cpu":
        return "the int4 runtime runs on the CPU only"
    header = read_header(path)  # the file first: milliseconds, where a first build takes seconds
    arch = header.metadata.get("general.architecture")
    if arch not in FAMILIES:
        return f"the int4 runtime runs {', '.join(FAMILIES)} models, not {arch!r}"
    scaling = header.metadata.get(f"{arch}.rope.scaling.type")
    if scaling not in ROPE_SCALINGS:
        return f"the int4 runtime does not implement {scaling} RoPE scaling"
    if "rope_factors_long.weight" in header.tensors:
        return "the int4 runtime does not implement LongRoPE scaling"
    carried = int4_types() | dense_types()
    other = sorted({header.type_name(name) for name in header.tensors} - carried)
    if other:
        return f"the int4 runtime does not read {', '.join(other)} tensors"
    try:
        kernels()
    except SpecchatError as exc:
        return str(exc)
    return None


class Int4Backend(VocabularyOf, MeasuredCosts):
    """See the module docstring and base.Backend. The cache may also hold the last evaluated
    block's entries until the next `commit`, `evaluate`, `prefill` or `rollback`. A block's rows
    equal one-token passes bit for bit, chains and trees alike (the exactness probe finds it so):
    every op on the path computes a row the same way whatever else shares the pass."""

    name = INT4

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str = "cpu",
        threads: int | None = None,
        n_ctx: int = 4096,
        level: str | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        """`level`: the instruction-set level its kernels run at (default: the process's,
        `specchat.cpu.level`)."""
        path = Path(model_path)
        if not path.is_file():
            raise SpecchatError(f"model file not found: {path}")
        if device != "cpu":
            raise SpecchatError("the int4 backend runs on the CPU only (use --backend llama)")
        if progress:
            progress(f"loading {path.name} (int4)")
        try:
            self._load(path, n_ctx, threads, level, progress)
        except (
            ValueError,
            TypeError,
            ZeroDivisionError,
            OverflowError,
            IndexError,
            KeyError,
        ) as exc:
            # a header that parses but whose values make no model (a crafted file)
            raise SpecchatError(
                f"cannot load {path.name}: not a valid GGUF model ({exc})"
            ) from None
        self.level = self.model.level
        self._n_committed = 0
        self._pending: Block | None = None
        self._last_row: int | None = None  # the row of the last pass whose token was committed last
        self._costs = CostsByThreads(self, key=cost_key(path, self.level))

    def _load(self, path: Path, n_ctx: int, threads: int | None, level: str | None, progress):
        """The model, its vocabulary and hyper-parameters, every check on the file first."""
        from specchat.backends.int4.model import Int4Model
        from specchat.backends.int4.shape import ModelShape

        tensors = GGUFTensors(path)
        tensors.header.check_llama()
        shape = ModelShape.read(tensors)  # refuses other architectures before anything loads
        self.threads = threads or physical_cores()
        # the thread count follows the machine's load (threads_by_load.py; None: fixed), read
        # from here on: the first reading spans the loading, due by the prompt's pass
        self.threads_by_load = ThreadsByLoad.here(self.threads)
        self.vocabulary = LlamaVocabulary.load(path)
        if self.vocabulary.vocab_size > shape.vocab:
            raise SpecchatError(
                f"cannot load {path.name}: {self.vocabulary.vocab_size} tokens but "
                f"{shape.vocab} embedding rows"
            )
        self.device = "cpu"
        self.model_name = path.stem
        self.model_path = str(path)
        self.vocab_size = shape.vocab
        # within a declared sliding window every key is in sight: attention is the full one
        self.n_ctx = min(n_ctx, shape.context_length, shape.window or n_ctx)
        self.eos_ids = self.vocabulary.eos_ids
        self.add_bos = self.vocabulary.add_bos
        self.bos_id = self.vocabulary.bos_id
        self.model = Int4Model(
            tensors,
            n_ctx=self.n_ctx,
            max_block=_MAX_BLOCK,
            threads=self.threads,
            level=level,
            progress=progress,
        )

    # -- KV cache and blocks ---------------------------------------------------------------------

    @property
    def n_committed(self) -> int:
        return self._n_committed

    def prefill(self, ids: list[int]) -> None:
        self._pending = None
        self._last_row = None
        if self._n_committed + len(ids) > self.n_ctx:
            raise SpecchatError(
                f"the prompt needs {self._n_committed + len(ids)} tokens but the context "
                f"holds {self.n_ctx}"
            )
        for start in range(0, len(ids), _PREFILL_CHUNK):
            chunk = list(ids[start : start + _PREFILL_CHUNK])
            depths = range(len(chunk))
            with following_load(self, self._set_threads):  # a prompt's passes are the longest
                self.model.forward(
                    chunk, depths, ancestry(range(-1, len(chunk) - 1)), self._n_committed,
                    logits=False,
                )  # fmt: skip
            self._n_committed += len(chunk)

    def evaluate(self, block: Block) -> np.ndarray:
        """Logits of every block token in one pass (timed: use refines the pass costs), on the
        thread count the machine's load leaves (`threads_by_load.py`)."""
        with following_load(self, self._set_threads), self._costs.timing(block):
            return self._evaluate(block)

    def _set_threads(self, threads: int) -> None:
        self.model.threads = threads

    def _evaluate(self, block: Block) -> np.ndarray:
        """Logits of every block token in one pass; its cache entries stay until `commit`."""
        self._pending = None
        if len(block) == 0:
            return np.zeros((0, self.vocab_size), dtype=np.float32)
        if self._n_committed + max(block.depths) + 1 > self.n_ctx:
            raise SpecchatError("the context window is full")
        if len(block) > _MAX_BLOCK:
            raise SpecchatError(f"a block of {len(block)} tokens exceeds {_MAX_BLOCK}")
        logits = self.model.forward(
            list(block.tokens),
            block.depths,
            ancestry(block.parents),
            self._n_committed,
            logits=True,
        )
        self._pending = block
        return logits

    def evaluate_more(self, tree: Block, evaluated: int) -> np.ndarray | None:
        """See base.Backend: the new rows in one pass, written after the tree's earlier rows
        (tree row r in slot n_committed + r, as a block's rows are), attending to those of them
        that are their ancestors."""
        if not grows(self._pending, tree, evaluated):
            return None
        rows = len(tree) - evaluated
        if rows > _MAX_BLOCK or self._n_committed + len(tree) > self.model.slots:
            return None
        if self._n_committed + max(tree.depths[evaluated:]) + 1 > self.n_ctx:
            raise SpecchatError("the context window is full")
        with following_load(self, self._set_threads):
            logits = self.model.forward(
                list(tree.tokens[evaluated:]),
                tree.depths[evaluated:],
                _paths_of(tree, range(evaluated, len(tree))),
                self._n_committed,
                logits=True,
                first_row=evaluated,
            )
        self._pending = tree
        return logits

    def commit(self, path: list[int]) -> None:
        """Keep the cache entries of `path` (root-to-node in the last block) as committed."""
        if block_to_commit(self._pending, path) is None:
            return
        self.model.move(self._n_committed, list(path))
        self._n_committed += len(path)
        self._pending = None
        self._last_row = path[-1] if path else None

    def draft_features(self, token: int) -> DraftFeatures | None:
        """See base.Backend: the last committed row's sum before the final norm (the C wrote it
        into the pass's input), the norm, `token`'s embedding."""
        model = self.model
        x = None if model is None else model.last_residual
        row = self._last_row
        if x is None or row is None or not 0 <= row < x.shape[0]:
            return None
        return DraftFeatures(
            x[row], model.embedded([token])[0], model.final_norm,
            model.shape.norm_eps, model.threads,
        )  # fmt: skip

    def ride_draft_head(self, head) -> bool:
        """See base.Backend: the guess made inside the pass, after its logits (c/draft_head.c's
        guess_rows), costs a fraction of the same guess asked after it."""
        model = self.model
        if model is None or getattr(head, "dim", None) != model.shape.dim:
            return False
        return model.ride(head.c_pointer)

    def ridden_guess(self, token: int) -> tuple[int, float] | None:
        model, row = self.model, self._last_row
        if model is None or row is None or not 0 <= row < model.guessed_rows:
            return None
        if int(model.guess_tokens[row]) != token:
            return None
        return int(model.guesses[row]), float(model.guess_sure[row])

    def rollback(self, n_committed: int) -> None:
        self._pending = None
        self._last_row = None
        self._n_committed = max(0, min(n_committed, self._n_committed))

    def close(self) -> None:
        if getattr(self, "threads_by_load", None) is not None:
            self.threads_by_load.close()
        self.model = None
        self._pending = None
        if getattr(self, "vocabulary", None) is not None:
            self.vocabulary.close()
        give_back_freed()  # weights laid out this load sit in the heap, kept by glibc once freed


def load(path: Path, options, progress: Callable[[str], None] | None) -> Int4Backend:
    """The registry's loader (`backends/registry.py`): the file as `options` (models.LoadOptions)
    ask for it."""
    return Int4Backend(
        path, device=options.device, threads=options.threads, n_ctx=options.n_ctx, progress=progress
    )
