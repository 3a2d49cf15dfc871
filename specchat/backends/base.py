"""The one interface every model runtime offers to the decoders.

A backend holds one loaded model, its tokenizer and a KV cache of *committed* tokens. Decoders
evaluate a `Block` of new tokens after the committed prefix in one forward pass, then commit the
path they accepted; nothing above this module knows how a runtime lays out its cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class Block:
    """Tokens evaluated in one forward pass, shaped as a tree rooted at the committed prefix.

    `parents[i]` is the index of token i's parent in the block (always < i), or -1 when token i
    follows the committed prefix directly. Token i sits at position `n_committed + depth(i)` and
    attends to the committed prefix, its ancestors and itself: a chain is a draft, a tree holds
    several drafts (lookahead's window and n-gram branches, beam suffixes) at once.
    """

    tokens: tuple[int, ...]
    parents: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.parents):
            raise ValueError("a block needs one parent per token")
        for i, parent in enumerate(self.parents):
            if not -1 <= parent < i:
                raise ValueError(f"block token {i} has parent {parent}; parents must come first")

    @classmethod
    def chain(cls, tokens: list[int] | tuple[int, ...]) -> Block:
        """A single draft: each token follows the one before it."""
        return cls(tuple(tokens), tuple(range(-1, len(tokens) - 1)))

    def __len__(self) -> int:
        return len(self.tokens)

    @cached_property
    def depths(self) -> tuple[int, ...]:
        """Distance from the committed prefix: position offset of each token."""
        depths: list[int] = []
        for parent in self.parents:
            depths.append(0 if parent < 0 else depths[parent] + 1)
        return tuple(depths)

    @cached_property
    def is_chain(self) -> bool:
        return all(parent == i - 1 for i, parent in enumerate(self.parents))

    def path_to(self, index: int) -> list[int]:
        """Block indices from a root down to `index`, inclusive."""
        path = []
        while index >= 0:
            path.append(index)
            index = self.parents[index]
        return path[::-1]

    def check_path(self, path: list[int]) -> None:
        """Raise ValueError unless `path` (block indices) runs from a root down a chain of
        parents: what a backend may commit after evaluating this block."""
        if path and (not 0 <= path[-1] < len(self.tokens) or path != self.path_to(path[-1])):
            raise ValueError(f"commit path {path} is not a root-to-node chain of the block")

    @cached_property
    def leaves(self) -> tuple[int, ...]:
        has_child = set(p for p in self.parents if p >= 0)
        return tuple(i for i in range(len(self.tokens)) if i not in has_child)


@dataclass(frozen=True)
class Exactness:
    """Whether a block's logits equal one-token passes' on a model and runtime
    (`exactness.py` probes it)."""

    bitwise: bool  # a block's logits equal one-token passes', bit for bit
    max_difference: float  # the largest logit difference the probe saw

    @property
    def label(self) -> str:
        """What the status line, `--json` and race summaries say of greedy-family decoders."""
        return "exact" if self.bitwise else "exact to near-ties"

    @property
    def note(self) -> str | None:
        """What to tell a user whose greedy-family answers may part from greedy at near-ties."""
        if self.bitwise:
            return None
        return (
            "greedy-family decoders are exact to near-ties on this model: a block's logits "
            f"differ from one-token passes' by up to {self.max_difference:.2g}"
        )

    def as_dict(self) -> dict[str, object]:
        return {"bitwise": self.bitwise, "max_difference": round(self.max_difference, 6)}


@dataclass
class ChatMessage:
    role: str
    content: str


@dataclass(frozen=True)
class DraftFeatures:
    """What a draft head reads (decoding/draft_head.py) after a pass: the final hidden state h of
    the last committed token's row (the input of the logits the pending token came from) and
    the pending token's input embedding, float32. A runtime may hand over the row's sum before
    the final RMS norm instead (`norm`, `eps`): the head's C then normalizes it, as the forward
    does, without a copy in Python. `threads`: how many the runtime's passes run on now, which
    the head's products may share."""

    row: np.ndarray
    embedding: np.ndarray
    norm: np.ndarray | None = None
    eps: float = 0.0
    threads: int = 1

    def hidden(self) -> np.ndarray:
        """h in numpy (for checks and training; the head's C normalizes `row` itself)."""
        return self.row if self.norm is None else rms_normed(self.row, self.norm, self.eps)


def rms_normed(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm over the last axis, float32, as c/norms.c orders it (the mean of squares in
    double, the scale applied before the weight)."""
    wide = x.astype(np.float64)
    mean = ((wide * wide).mean(axis=-1, keepdims=True)).astype(np.float32)
    scale = np.float32(1.0) / np.sqrt(mean + np.float32(eps))
    return ((x * scale) * weight).astype(np.float32, copy=False)


@runtime_checkable
class Backend(Protocol):
    """What a decoder may ask of a model runtime specchat decodes on (a *local* runtime: it
    evaluates blocks and returns their logits). docs/architecture.md shows where it sits."""

    name: str  # its runtime's, in `backends/registry.py`
    device: str
    threads: int  # CPU threads its passes run on
    model_path: str | None  # the file it runs, where it runs one (None: a folder, a server)
    add_bos: bool  # a raw text's ids start with `bos_id`
    bos_id: int
    level: str  # the instruction-set level its CPU kernels run at (specchat.cpu), "" on a GPU
    model_name: str
    vocab_size: int
    eos_ids: frozenset[int]
    n_ctx: int

    @property
    def n_committed(self) -> int:
        """How many tokens the KV cache holds."""

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        """Token ids of text; `special` parses control tokens such as <|im_start|>."""

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes a token stands for (may be part of a UTF-8 character)."""

    def chat_prompt(self, messages: list[ChatMessage]) -> str:
        """The model's own chat template applied to the history, ready for the answer."""

    def prefill(self, ids: list[int]) -> None:
        """Evaluate and commit `ids` after the committed prefix (no logits are returned)."""

    def evaluate(self, block: Block) -> np.ndarray:
        """Logits (float32, [len(block), vocab_size]) of every block token, committing nothing."""

    def evaluate_more(self, tree: Block, evaluated: int) -> np.ndarray | None:
        """Logits of `tree`'s tokens from `evaluated` on, where its first `evaluated` tokens
        are the tree evaluated since the last commit or rollback (`evaluate`, then
        `evaluate_more`): those are not evaluated again, and `commit` then takes a path of the
        whole tree. Why: a beam's tree grows a token a beam a step, and evaluated whole every
        step, beams that disagree for a hundred tokens made each pass hundreds of rows. None
        where the runtime cannot, or `tree` does not begin with the tree it holds: then the
        caller evaluates the whole tree."""

    def commit(self, path: list[int]) -> None:
        """Keep the block entries `path` (a root-to-node chain of the last evaluated block)."""

    def rollback(self, n_committed: int) -> None:
        """Shrink the committed prefix to its first `n_committed` tokens."""

    def block_cost(self, k: int) -> float:
        """Seconds one pass over a k-token chain costs, measured once per model and device."""

    def glance_costs(self) -> Callable[[int], float]:
        """Pass costs from one timing of each size (kept costs where there are): enough to
        choose a runtime by (`runtimes.choose`); then `block_cost` times the rest of the sweep,
        or `keep_glanced_costs` keeps the glance."""

    def keep_glanced_costs(self) -> object:
        """Keep the glance as this model's pass costs (a runtime not chosen), and give what it
        timed, for another load of the model to go on from (`go_on_from_glance`)."""

    def go_on_from_glance(self, glance: object) -> None:
        """Time the rest of the sweep `glance` began (`keep_glanced_costs` of another load of
        this model: the runtime chosen after it was closed) and keep it whole."""

    def draft_features(self, token: int) -> DraftFeatures | None:
        """What a draft head reads, `token` the pending one. None where the runtime does not
        give it, or nothing was committed by a pass since the last prompt."""

    def ride_draft_head(self, head: object) -> bool:
        """Have the next pass with logits also guess, with `head` (a decoding.draft_head
        DraftHead), the token after each row's greedy token (`ridden_guess`). False where the
        runtime cannot: the head is then asked after the pass, from `draft_features`."""

    def ridden_guess(self, token: int) -> tuple[int, float] | None:
        """The guess (token, how sure) that the last pass made for the last committed row, if
        a head rode it and `token`, the pending one, is that row's greedy token."""

    def exactness(self) -> Exactness:
        """Whether a block's logits equal one-token passes' (`exactness.py`), probed once."""

    def calibrate(self, progress: Callable[[str], None] | None = None) -> None:
        """Measure the pass costs and the exactness if they were never measured (at load)."""

    def keep_costs(self, time_slice: bool = True) -> None:
        """Write what passes in use refined of the pass costs: the engine calls it after an
        answer, so no pass ever waits on a file; with `time_slice`, time a slice of a sweep
        the costs still lack (`block_cost.py`)."""

    def close(self) -> None:
        """Free the model."""


@runtime_checkable
class ServerBackend(Protocol):
    """A remote server: it applies its own template and decodes with its own method, and streams
    the answer's text; specchat sees neither its tokens nor its logits. The other protocol a
    runtime keeps (`registry.Runtime.local` says which); `engine.choice` reads it, once."""

    name: str
    device: str  # where it runs, as the status line shows it
    level: str
    model_name: str
    base_url: str

    @property
    def label(self) -> str:
        """How races and reports name it."""

    def stream_chat(self, messages: Sequence[ChatMessage], *, max_tokens: int, **sampling):
        """Start streaming the answer to `messages`."""

    def close(self) -> None:
        """Close the connection."""


AnyBackend = Backend | ServerBackend
"""What a loaded model is: one specchat decodes on, or a server that decodes itself. Code that
takes either says so with this type and asks `is_server` before it uses one protocol's parts."""


def grows(held: Block | None, tree: Block, evaluated: int) -> bool:
    """Whether `tree` is `held` (the tree a runtime evaluated since its last commit, its
    `evaluated` rows) with rows added: what `evaluate_more` may evaluate."""
    if held is None or len(held) != evaluated or len(tree) <= evaluated:
        return False
    return tree.tokens[:evaluated] == held.tokens and tree.parents[:evaluated] == held.parents


def block_to_commit(pending: Block | None, path: list[int]) -> Block | None:
    """What `commit(path)` keeps entries of: the block evaluated last, once `path` is checked
    against it (Block.check_path); None when none was evaluated and `path` is empty (a commit
    of nothing). A ValueError for a path with no block to take it from."""
    if pending is None:
        if path:
            raise ValueError("commit without a block evaluated since the last commit")
        return None
    pending.check_path(path)
    return pending


def is_server(backend: AnyBackend) -> bool:
    """Whether `backend` is a remote server (it streams its own answers) rather than a model
    specchat decodes on."""
    return isinstance(backend, ServerBackend)


def sync_cache(backend: Backend, cached: list[int], wanted: list[int]) -> None:
    """Make the backend's cache hold exactly `wanted`, given that it holds `cached`: keep the
    common prefix, evaluate the rest. Both the engine (across chat turns) and a draft model (across
    steps) call this so that nothing already in a cache is evaluated twice."""
    kept = 0
    limit = min(len(cached), len(wanted), backend.n_committed)
    while kept < limit and cached[kept] == wanted[kept]:
        kept += 1
    backend.rollback(kept)
    backend.prefill(wanted[kept:])
