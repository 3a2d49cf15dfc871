"""Where a draft comes from, and what a request offers drafters besides its own tokens.

Every accepted drafted token keeps its source, so the chat can colour runs by where their drafts
came from as well as by their length. A request may carry material a drafter can copy from: where
the current turn begins (earlier turns are "earlier in this chat"), the answer being regenerated,
and the index of every saved chat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

PROMPT = "prompt"  # this turn: the question, and the answer so far
CHAT = "chat"  # earlier turns of this chat
SAVED = "saved"  # the saved chats (the chat store)
PREVIOUS = "previous"  # the answer being regenerated
LOOKAHEAD = "lookahead"  # n-grams lookahead's Jacobi window guessed
DRAFT = "draft"  # a draft model, or a draft head's guess (draft_head.py): a small network drafts
RECYCLED = "recycled"  # the model's own likeliest successors, from earlier passes' logits

# In legend order, with what the legend says (short: the legend is one line).
SOURCE_LABELS: dict[str, str] = {
    PROMPT: "this turn",
    CHAT: "this chat",
    SAVED: "saved",
    PREVIOUS: "old answer",
    LOOKAHEAD: "lookahead",
    DRAFT: "draft/head",
    RECYCLED: "recycled",
}


@dataclass(frozen=True)
class Continuation:
    """A continuation a suffix source proposes: tokens, with the estimated probability of reaching
    each (how often it followed, as SuffixDecoding counts), backed by `match_length` context
    tokens."""

    tokens: list[int]
    probs: Sequence[float]
    match_length: int

    def through_end(self, ends: frozenset[int]) -> Continuation:
        """This continuation up to and with the first end of answer (see `through_end`)."""
        if ends.isdisjoint(self.tokens):  # nearly always: no scan in Python on every step
            return self
        tokens = through_end(self.tokens, ends)
        if len(tokens) == len(self.tokens):
            return self
        return Continuation(tokens, self.probs[: len(tokens)], self.match_length)

    @property
    def score(self) -> float:
        """SuffixDecoding's score: the expected number of accepted tokens, by the counts."""
        return float(sum(self.probs))


Tokens = TypeVar("Tokens", list[int], tuple[int, ...])


def through_end(tokens: Tokens, ends: frozenset[int]) -> Tokens:
    """`tokens` (a list or a tuple, sliced as itself) up to and with the first end of answer: a
    token drafted after it is never kept (the answer ends there), however surely the target
    agrees — copies of earlier turns run on into the chat template's next turn."""
    for i, token in enumerate(tokens):
        if token in ends:
            return tokens[: i + 1]
    return tokens


class SavedChats(Protocol):
    """The index of saved chats as a drafter sees it (specchat.saved_chats builds it)."""

    def continuation(
        self, context: Sequence[int], limit: int, factor: float, min_prob: float
    ) -> Continuation | None:
        """The best continuation of the context's tail found in the saved chats (None: none):
        at most `factor` × match length tokens, probabilities down to `min_prob`."""
        ...


@dataclass(frozen=True)
class DraftSources:
    """What a request offers drafters: `turn_start` is the prompt index where the current turn
    begins (earlier tokens belong to earlier turns of the chat); `previous_answer` the tokens of
    an answer to the same prompt (Ctrl+R regenerates: a greedy regeneration re-verifies it in
    long passes); `saved` the saved chats' index, when the user lets drafters read them."""

    turn_start: int = 0
    previous_answer: tuple[int, ...] = ()
    saved: SavedChats | None = None


NO_SOURCES = DraftSources()


def context_source(position: int, turn_start: int) -> str:
    """The source of a copy from context position `position`."""
    return PROMPT if position >= turn_start else CHAT
