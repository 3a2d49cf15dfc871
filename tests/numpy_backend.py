"""A small deterministic backend in numpy: a character n-gram language model behind the Backend
protocol, for fast tests of what decoders do with a real model.

It is a real model, not a script of canned answers: counts of byte n-grams (order 8) from a small
built-in corpus, interpolated from the longest context seen down to single bytes and smoothed, give
a distribution over the next token for any context. Its greedy text follows the corpus, which
repeats itself (songs with refrains, code with near-identical functions), so prompt lookup and
lookahead find drafts that are accepted, and it branches where the corpus does, so some are not.

What the fast tests need and the big backends cannot give:
- logits are a function of the last `order - 1` tokens of each block token's own path (its
  ancestors and the committed prefix), so a tree block is evaluated exactly as its branches alone
  and a flattened pass over the same tokens is not: the tree mask matters;
- everything is bitwise reproducible, in any block size;
- `block_cost` is a model of a pass's cost (a fixed overhead plus a cost per token), not a timing,
  so a draft-length policy decides the same way on every machine; `clock` adds up the modelled
  seconds of every pass (`pass_seconds`, by default the same model) for tests of what measures.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specchat.backends.base import Block, ChatMessage, Exactness, block_to_commit
from specchat.backends.chat_template import CHATML_TEMPLATE, render_chat_template
from specchat.backends.exactness import probe_exactness
from specchat.errors import SpecchatError

SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
IM_START, IM_END, END_OF_TEXT = 256, 257, 258
VOCAB_SIZE = 256 + len(SPECIALS)

# What the model has read. Every document ends with <|im_end|>, the model's one EOS.
CORPUS = (
    "The cat sat on the mat. The cat sat on the hat. The dog sat on the log. "
    "The cat sat on the mat, and the dog sat on the log, and they slept in the sun.",
    "One, two, buckle my shoe; three, four, knock at the door; five, six, pick up sticks; "
    "seven, eight, lay them straight; nine, ten, a big fat hen.",
    "Row, row, row your boat, gently down the stream. Merrily, merrily, merrily, merrily, "
    "life is but a dream. Row, row, row your boat, gently down the stream.",
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
    "def mul(a, b):\n    return a * b\n",
    "Once upon a time a fox lived in a forest. Every day the fox ran to the river, and every "
    "day the fox ran back to the forest. The end.",
    "<|im_start|>user\nSay just: yes<|im_end|>\n<|im_start|>assistant\nyes",
    "<|im_start|>user\nRepeat: the cat sat on the mat.<|im_end|>\n<|im_start|>assistant\n"
    "The cat sat on the mat. The cat sat on the mat.",
)


def _encode(text: str, special: bool) -> list[int]:
    """UTF-8 bytes, with the control tokens' text as one token each when `special`."""
    if not special:
        return list(text.encode("utf-8"))
    ids: list[int] = []
    rest = text
    while rest:
        found = [(rest.find(s), i) for i, s in enumerate(SPECIALS) if s in rest]
        if not found:
            ids += rest.encode("utf-8")
            break
        at, which = min(found)
        ids += rest[:at].encode("utf-8")
        ids.append(256 + which)
        rest = rest[at + len(SPECIALS[which]) :]
    return ids


class CharNgramModel:
    """P(next | context): counts of every context of 0…order-1 tokens, mixed with weights that
    favour the longest context seen (4× per token), and 1% spread over the whole vocabulary."""

    def __init__(self, corpus: tuple[str, ...] = CORPUS, order: int = 8) -> None:
        self.order = order
        self.counts: dict[tuple[int, ...], dict[int, int]] = {}
        for document in corpus:
            tokens = _encode(document, special=True) + [IM_END]
            for i, token in enumerate(tokens):
                for n in range(min(order - 1, i) + 1):
                    followers = self.counts.setdefault(tuple(tokens[i - n : i]), {})
                    followers[token] = followers.get(token, 0) + 1
        self._rows: dict[tuple[int, ...], np.ndarray] = {}

    def logits(self, context: tuple[int, ...]) -> np.ndarray:
        """float32 logits of the token after `context` (only its last order-1 tokens count)."""
        context = context[len(context) - (self.order - 1) :] if context else ()
        row = self._rows.get(context)
        if row is None:
            mixed = np.zeros(VOCAB_SIZE)
            total_weight = 0.0
            for n in range(len(context) + 1):
                followers = self.counts.get(context[len(context) - n :])
                if followers is None:
                    continue
                weight = 4.0**n
                seen = sum(followers.values())
                for token, count in followers.items():
                    mixed[token] += weight * count / seen
                total_weight += weight
            probs = 0.99 * mixed / total_weight + 0.01 / VOCAB_SIZE
            row = np.log(probs).astype(np.float32)
            self._rows[context] = row
        return row


class NumpyBackend:
    """The Backend protocol over a CharNgramModel; the "KV cache" is the list of committed ids.

    Like the transformers backend, it is strict: a commit must be a root-to-node chain of the last
    evaluated block, and a rollback cannot grow the prefix.
    """

    name = "numpy"
    level = "generic"  # plain numpy: no kernels of its own
    device = "cpu"
    threads = 1
    model_path = None
    add_bos, bos_id = False, -1

    def __init__(
        self,
        model: CharNgramModel | None = None,
        *,
        n_ctx: int = 4096,
        overhead: float = 0.010,
        per_token: float = 0.0005,
        pass_seconds: Callable[[int], float] | None = None,
        model_name: str = "char-ngram",
    ) -> None:
        self.model = model or CharNgramModel()
        self.model_name = model_name
        self.vocab_size = VOCAB_SIZE
        self.eos_ids = frozenset({IM_END})
        self.n_ctx = n_ctx
        self.overhead, self.per_token = overhead, per_token
        self.pass_seconds = pass_seconds or self.block_cost
        self.clock = 0.0  # modelled seconds of every pass so far
        self.passes: list[int] = []  # the size of every evaluated block, in order
        self._committed: list[int] = []
        self._pending: Block | None = None

    # -- tokenizer ---------------------------------------------------------------------------
    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        return _encode(text, special)

    def token_bytes(self, token_id: int) -> bytes:
        if token_id < 256:
            return bytes([token_id])
        return SPECIALS[token_id - 256].encode("utf-8")

    def chat_prompt(self, messages: list[ChatMessage]) -> str:
        return render_chat_template(CHATML_TEMPLATE, messages)

    # -- the cache ---------------------------------------------------------------------------
    @property
    def n_committed(self) -> int:
        return len(self._committed)

    @property
    def committed(self) -> list[int]:
        return list(self._committed)

    def _check_room(self, extra: int) -> None:
        if len(self._committed) + extra > self.n_ctx:
            raise SpecchatError(
                f"context full: {len(self._committed)} + {extra} tokens exceed n_ctx {self.n_ctx}"
            )

    def prefill(self, ids: list[int]) -> None:
        self._pending = None
        self._check_room(len(ids))
        self.clock += self.pass_seconds(len(ids)) if ids else 0.0
        self._committed.extend(ids)

    def draft_features(self, token: int) -> None:
        """None: a table of logits has no hidden states (base.Backend)."""
        return None

    def ride_draft_head(self, head: object) -> bool:
        return False  # no hidden states to guess from (draft_features)

    def ridden_guess(self, token: int) -> None:
        return None

    def evaluate_more(self, tree: Block, evaluated: int) -> None:
        return None  # each pass evaluates its whole block (base.Backend)

    def evaluate(self, block: Block) -> np.ndarray:
        self._pending = None
        self._check_room(max(block.depths, default=-1) + 1)
        keep = self.model.order - 1
        prefix = tuple(self._committed[max(0, len(self._committed) - keep) :]) if keep else ()
        logits = np.empty((len(block), self.vocab_size), dtype=np.float32)
        for index in range(len(block)):
            path = tuple(block.tokens[i] for i in block.path_to(index)[-keep:])
            logits[index] = self.model.logits(prefix + path)
        self.clock += self.pass_seconds(len(block))
        self.passes.append(len(block))
        self._pending = block
        return logits

    def commit(self, path: list[int]) -> None:
        block, self._pending = self._pending, None
        if block_to_commit(block, path) is None:
            return
        self._committed.extend(block.tokens[i] for i in path)

    def rollback(self, n_committed: int) -> None:
        if not 0 <= n_committed <= len(self._committed):
            raise ValueError(f"cannot roll back to {n_committed} of {len(self._committed)} tokens")
        self._pending = None
        del self._committed[n_committed:]

    # -- cost --------------------------------------------------------------------------------
    def block_cost(self, k: int) -> float:
        """Modelled seconds of a k-token pass: what the draft-length policy plans with."""
        return self.overhead + self.per_token * k

    def glance_costs(self):
        """Modelled: the same costs a glance or a whole sweep."""
        return self.block_cost

    def keep_glanced_costs(self) -> None:
        """Nothing to keep: its costs are modelled."""

    def go_on_from_glance(self, glance: object) -> None:
        """Nothing to time: its costs are modelled."""

    def calibrate(self, progress=None) -> None:
        """Its costs are modelled, its exactness probed when asked."""

    def exactness(self) -> Exactness:
        """Probed as on any backend (its rows never depend on the block: bitwise)."""
        return probe_exactness(self)

    def keep_costs(self, time_slice: bool = True) -> None:
        """Nothing to write: its costs are modelled."""

    def close(self) -> None:
        self._committed = []
        self._pending = None
