"""llama.cpp backend through llama-cpp-python's low-level API.

Exactness is the point of this module's layout. On the batch-invariant build (GGML_LLAMAFILE=OFF,
flash attention off) a token's logits do not depend on how many tokens one call evaluates, as long
as its KV cells sit where sequential decoding would have put them. So:
- a chain block runs in the main sequence, whose cells stay contiguous: exact;
- a tree block runs one root-to-leaf path per sequence, each in its own KV stream
  (`kv_unified=False`), so every branch sees the prefix and its own ancestors contiguously, exactly
  as if it were evaluated alone. A stream that lags the committed prefix catches up by evaluating the
  missing tokens in the same pass (few tokens) or by a full stream copy (many tokens).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from specchat import cpu
from specchat.backends.base import Block, grows
from specchat.backends.block_cost import CostsByThreads, MeasuredCosts
from specchat.backends.gguf.header import read_header
from specchat.backends.gguf.vocab import LlamaVocabulary, VocabularyOf, import_llama_cpp
from specchat.backends.registry import LLAMA_CPP
from specchat.backends.threads_by_load import ThreadsByLoad, following_load
from specchat.errors import SpecchatError
from specchat.hardware import physical_cores

# Above this many missing tokens a lagging stream is refreshed by copying the main stream's buffer.
_CATCH_UP_BY_EVALUATION = 32


def cost_key(path: Path) -> str:
    """What this runtime's pass costs (and exactness) on the file are kept under: the build's
    features (LLAMAFILE, REPACK, ...) are in it, since they change both."""
    llama_cpp = import_llama_cpp()
    build = llama_cpp.llama_print_system_info().decode(errors="replace")
    build_key = hashlib.sha256(build.encode()).hexdigest()[:8]
    return f"{LLAMA_CPP}|{path.name}|{path.stat().st_size}|{build_key}"


def gpu_offload() -> bool:
    """Whether this llama.cpp build runs models on a GPU here: a CUDA (or other GPU) build that
    found a device (`--device auto`)."""
    try:
        return bool(import_llama_cpp().llama_supports_gpu_offload())
    except SpecchatError:  # not installed: the chat says so when it loads a model
        return False


class LlamaBackend(VocabularyOf, MeasuredCosts):
    """One GGUF model with a multi-stream KV cache; see the module docstring for the layout."""

    name = LLAMA_CPP

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str = "cpu",
        threads: int | None = None,
        n_ctx: int = 4096,
        max_branches: int = 4,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        llama_cpp = import_llama_cpp()
        self._lib = llama_cpp
        path = Path(model_path)
        if not path.is_file():
            raise SpecchatError(f"model file not found: {path}")
        if device not in ("cpu", "cuda"):
            raise SpecchatError(f"unknown device {device!r}: use cpu or cuda")
        if device == "cuda" and not llama_cpp.llama_supports_gpu_offload():
            raise SpecchatError(
                "CUDA is not available: this llama-cpp-python build has no GPU offload "
                "(rebuild it with CUDA: bash scripts/setup --cuda, see docs/gpu.md)"
            )
        # specchat's own reader first: a crafted header is refused here in one line, before
        # llama.cpp's parser meets it
        read_header(path).check_llama()
        if progress:
            progress(f"loading {path.name}")
        self.threads = threads or physical_cores()
        # on a CPU the thread count follows the machine's load (threads_by_load.py; None: fixed),
        # read from here on: the first reading spans the loading, due by the prompt's pass
        self.threads_by_load = ThreadsByLoad.here(self.threads) if device == "cpu" else None
        llama_cpp.llama_backend_init()
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = 999 if device == "cuda" else 0
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), model_params)
        if not self._model:
            raise SpecchatError(f"cannot load {path}: not a valid GGUF model")
        self.vocabulary = LlamaVocabulary(llama_cpp, self._model)
        self.device = device
        self.model_name = path.stem
        self.model_path = str(path)
        system_info = llama_cpp.llama_print_system_info().decode(errors="replace")
        self.level = "" if device == "cuda" else cpu.level_of_build(system_info)
        self.max_branches = max(1, max_branches)
        self.vocab_size = self.vocabulary.vocab_size
        n_ctx_train = llama_cpp.llama_model_n_ctx_train(self._model)
        self.n_ctx = min(n_ctx, n_ctx_train) if n_ctx_train > 0 else n_ctx
        self._n_batch = 512

        params = llama_cpp.llama_context_default_params()
        params.n_ctx = self.n_ctx * self.max_branches
        params.n_batch = self._n_batch
        params.n_ubatch = self._n_batch
        params.n_seq_max = self.max_branches
        params.kv_unified = False
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.n_threads = self.threads
        params.n_threads_batch = self.threads
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise SpecchatError(f"cannot create a llama.cpp context for {path.name}")
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self._n_batch, 0, 1)

        self.eos_ids = self.vocabulary.eos_ids
        self.add_bos = self.vocabulary.add_bos
        self.bos_id = self.vocabulary.bos_id
        # KV bookkeeping: the committed tokens; which sequence holds them all; how many of them
        # each other sequence's stream still holds.
        self._committed: list[int] = []
        self._main = 0
        self._valid = [0] * self.max_branches
        self._last_block: Block | None = None
        self._last_paths: list[list[int]] = []  # root-to-leaf paths of the last pass
        self._last_streams: list[int] = []  # the stream each of those paths ran in
        self._costs = CostsByThreads(self, key=cost_key(path))

    # -- KV cache --------------------------------------------------------------------------
    @property
    def n_committed(self) -> int:
        return len(self._committed)

    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> None:
        """Run llama_decode over (token, position, sequence, wants_logits) entries."""
        if len(entries) > self._n_batch:
            raise SpecchatError(f"a block of {len(entries)} tokens exceeds the batch size")
        batch = self._batch
        for i, (token, pos, seq, logits) in enumerate(entries):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = logits
        batch.n_tokens = len(entries)
        rc = self._lib.llama_decode(self._ctx, batch)
        if rc != 0:
            raise SpecchatError(f"llama_decode failed (code {rc}): context full?")

    def _decode_reading(
        self, entries: list[tuple[int, int, int, bool]], wanted: list[tuple[int, int]], logits
    ) -> None:
        """`_decode` in batches of at most the batch size (each stream's tokens in order), the
        logits of `wanted` (block index, entry) read into `logits` after each: a beam's tree, its
        beams apart for a hundred tokens, took more entries than one batch holds."""
        node_at = {row: node for node, row in wanted}
        for start in range(0, len(entries), self._n_batch):
            part = entries[start : start + self._n_batch]
            self._decode(part)
            for row in range(start, start + len(part)):
                if row in node_at:
                    logits[node_at[row]] = self._logits_row(row - start)

    def _logits_row(self, index: int) -> np.ndarray:
        ptr = self._lib.llama_get_logits_ith(self._ctx, index)
        return np.ctypeslib.as_array(ptr, shape=(self.vocab_size,)).copy()

    def _drop_block(self) -> None:
        """Forget the KV cells of an evaluated block that was not committed."""
        if self._last_block is None:
            return
        self._trim(range(self.max_branches))
        self._last_block = None

    def _trim(self, seqs) -> None:
        """Cut each stream back to what it validly holds (all committed tokens, for the main)."""
        for seq in seqs:
            keep = len(self._committed) if seq == self._main else self._valid[seq]
            self._lib.llama_memory_seq_rm(self._memory, seq, keep, -1)

    def prefill(self, ids: list[int]) -> None:
        self._drop_block()
        if len(self._committed) + len(ids) > self.n_ctx:
            raise SpecchatError(
                f"the prompt needs {len(self._committed) + len(ids)} tokens but the context "
                f"holds {self.n_ctx}"
            )
        for start in range(0, len(ids), self._n_batch):
            chunk = ids[start : start + self._n_batch]
            base = len(self._committed)
            with following_load(self, self._set_threads):  # a prompt's passes are the longest
                self._decode([(t, base + i, self._main, False) for i, t in enumerate(chunk)])
            self._committed.extend(chunk)

    def _sync_stream(self, seq: int) -> list[int]:
        """Tokens stream `seq` must evaluate before its branch; copies the buffer when far behind."""
        missing = len(self._committed) - self._valid[seq]
        if missing > _CATCH_UP_BY_EVALUATION:
            self._lib.llama_memory_seq_rm(self._memory, seq, -1, -1)
            self._lib.llama_memory_seq_cp(self._memory, self._main, seq, -1, -1)
            self._valid[seq] = len(self._committed)
            return []
        return self._committed[self._valid[seq] :]

    def draft_features(self, token: int) -> None:
        """None: llama.cpp gives a pass's hidden states only in its embeddings mode, which
        would change every pass (base.Backend)."""
        return None

    def ride_draft_head(self, head: object) -> bool:
        return False  # no hidden states to guess from (draft_features)

    def ridden_guess(self, token: int) -> None:
        return None

    def evaluate_more(self, tree: Block, evaluated: int) -> np.ndarray | None:
        """See base.Backend: each new row goes on the stream whose branch ends at its parent,
        or on a stream that takes a copy of a stream holding its parent, cut after it; only the
        new rows are decoded. None where the held tree's last pass left no stream with the
        parent (a tree of more branches than streams), or too few streams are left for the new
        rows."""
        if not grows(self._last_block, tree, evaluated):
            return None
        n = len(self._committed)
        if n + max(tree.depths[evaluated:]) + 1 > self.n_ctx:
            raise SpecchatError("the context window is full")
        branches = dict(zip(self._last_streams, self._last_paths))  # what each stream holds
        placed: dict[int, list[int]] = {}  # stream -> its branch after this pass
        copied: list[int] = []  # rows whose parent ends no free stream's branch
        for row in range(evaluated, len(tree)):  # first every row that extends a branch
            parent = tree.parents[row]
            tip = next(
                (s for s, b in branches.items() if b[-1] == parent and s not in placed), None
            )
            if tip is None:
                copied.append(row)
            else:
                placed[tip] = [*branches[tip], row]
        copies: list[tuple[int, int, int]] = []  # (from stream, to stream, rows to copy)
        for row in copied:  # then each other row on a copy, from a branch that stays
            parent = tree.parents[row]
            targets = {c[1] for c in copies}  # their branches are no longer what they held
            holders = sorted(
                (s for s, b in branches.items() if parent in b and s not in targets),
                key=placed.__contains__,  # a branch that is only extended stays: last, taken
            )
            sources = {c[0] for c in copies}
            free = [s for s in range(self.max_branches) if s not in placed and s not in sources]
            free = [s for s in free if s != (holders[-1] if holders else None)]
            if not holders or not free:
                return None  # the held tree's last pass left it on no stream, or too few streams
            source, target = holders[-1], min(free, key=branches.__contains__)
            path = branches[source][: branches[source].index(parent) + 1]
            copies.append((source, target, len(path)))
            placed[target] = [*path, row]
        if {c[1] for c in copies} & {c[0] for c in copies}:
            return None  # a stream both copied from and written to: left to a whole pass
        for source, target, rows in copies:  # whole streams copy (each its own buffer), then cut
            self._lib.llama_memory_seq_rm(self._memory, target, -1, -1)
            self._lib.llama_memory_seq_cp(self._memory, source, target, -1, -1)
            self._lib.llama_memory_seq_rm(self._memory, target, n + rows, -1)
            self._valid[target] = n
        logits = np.empty((len(tree) - evaluated, self.vocab_size), dtype=np.float32)
        entries = [(tree.tokens[b[-1]], n + tree.depths[b[-1]], s, True) for s, b in placed.items()]
        wanted = [(b[-1] - evaluated, i) for i, b in enumerate(placed.values())]
        with following_load(self, self._set_threads):
            self._decode_reading(entries, wanted, logits)
        kept = {**branches, **placed}
        self._last_block = tree
        self._last_streams, self._last_paths = list(kept), list(kept.values())
        return logits

    def evaluate(self, block: Block) -> np.ndarray:
        """Logits of every block token in one pass (timed: use refines the pass costs), on the
        thread count the machine's load leaves (`threads_by_load.py`)."""
        with following_load(self, self._set_threads), self._costs.timing(block):
            return self._evaluate(block)

    def _set_threads(self, threads: int) -> None:
        self._lib.llama_set_n_threads(self._ctx, threads, threads)

    def _evaluate(self, block: Block) -> np.ndarray:
        self._drop_block()
        n = len(self._committed)
        if n + max(block.depths, default=0) + 1 > self.n_ctx:
            raise SpecchatError("the context window is full")
        if block.is_chain:
            self._decode([(t, n + i, self._main, True) for i, t in enumerate(block.tokens)])
            self._last_block = block
            self._last_streams, self._last_paths = [self._main], [list(range(len(block)))]
            # every row was asked for, so llama.cpp holds them in batch order: one copy
            rows = self._lib.llama_get_logits(self._ctx)
            return np.ctypeslib.as_array(rows, shape=(len(block), self.vocab_size)).copy()
        return self._evaluate_tree(block, n)

    def _evaluate_tree(self, block: Block, n: int) -> np.ndarray:
        logits = np.empty((len(block), self.vocab_size), dtype=np.float32)
        paths = [block.path_to(leaf) for leaf in block.leaves]
        done: set[int] = set()
        # Paths go into streams, the main stream first; more paths than streams take more passes.
        others = [s for s in range(self.max_branches) if s != self._main]
        streams = [self._main, *others]
        self._last_paths = []
        for group_start in range(0, len(paths), self.max_branches):
            group = paths[group_start : group_start + self.max_branches]
            if group_start:
                self._trim(streams[: len(group)])
            entries: list[tuple[int, int, int, bool]] = []
            wanted: list[tuple[int, int]] = []  # (block index, batch row)
            for seq, path in zip(streams, group):
                catch_up = [] if seq == self._main else self._sync_stream(seq)
                start = n - len(catch_up)
                entries.extend((t, start + i, seq, False) for i, t in enumerate(catch_up))
                if catch_up:
                    self._valid[seq] = n
                for depth, node in enumerate(path):
                    need = node not in done
                    if need:
                        done.add(node)
                        wanted.append((node, len(entries)))
                    entries.append((block.tokens[node], n + depth, seq, need))
            self._decode_reading(entries, wanted, logits)
            self._last_paths = list(group)
        # Only the last group's KV stays; a commit along an earlier group's path re-evaluates it.
        self._last_block = block
        self._last_streams = streams
        return logits

    def commit(self, path: list[int]) -> None:
        block = self._last_block
        if block is None:
            raise RuntimeError("commit() without an evaluated block")
        block.check_path(path)
        n = len(self._committed)
        tokens = [block.tokens[i] for i in path]
        if block.is_chain:
            self._committed.extend(tokens)
            self._last_block = None
            self._lib.llama_memory_seq_rm(self._memory, self._main, len(self._committed), -1)
            return
        # Find the stream whose branch contains the path; it becomes the main stream.
        streams = self._last_streams
        holder = None
        for seq, branch in zip(streams, self._last_paths):
            if branch[: len(path)] == path:
                holder = seq
                break
        # Each stream keeps the part of its branch the path shares (the main stream is always in
        # the last pass, so the old main is covered here too).
        for seq, branch in zip(streams, self._last_paths):
            shared = 0
            while shared < min(len(branch), len(path)) and branch[shared] == path[shared]:
                shared += 1
            self._valid[seq] = n + shared
        self._last_block = None
        if holder is None:
            # The path's branch was evaluated in an earlier pass and its cells are gone.
            self._drop_all_to(n)
            self.prefill(tokens)
            return
        self._main = holder
        self._committed.extend(tokens)
        self._valid[holder] = len(self._committed)
        self._trim(range(self.max_branches))

    def _drop_all_to(self, n: int) -> None:
        for seq in range(self.max_branches):
            self._valid[seq] = min(self._valid[seq], n)
            keep = n if seq == self._main else self._valid[seq]
            self._lib.llama_memory_seq_rm(self._memory, seq, keep, -1)

    def rollback(self, n_committed: int) -> None:
        self._last_block = None
        n_committed = max(0, min(n_committed, len(self._committed)))
        del self._committed[n_committed:]
        self._drop_all_to(n_committed)

    def close(self) -> None:
        if getattr(self, "threads_by_load", None) is not None:
            self.threads_by_load.close()
        if getattr(self, "_ctx", None):
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._lib.llama_model_free(self._model)
            self._ctx = None

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order varies
        try:
            self.close()
        except Exception:
            pass


def load(path: Path, options, progress: Callable[[str], None] | None) -> LlamaBackend:
    """The registry's loader (`backends/registry.py`): the file as `options` (models.LoadOptions)
    ask for it."""
    return LlamaBackend(
        path, device=options.device, threads=options.threads, n_ctx=options.n_ctx, progress=progress
    )
