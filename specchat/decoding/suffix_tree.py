"""SuffixDecoding's suffix trees, from ArcticInference (`arctic-inference`, the implementation vLLM
uses), behind the two small shapes specchat needs.

ArcticInference's `SuffixDecodingCache` keeps one tree per active request (its prompt and the
tokens generated so far) and one global tree of past responses. Here:
- `SequenceTrees`: named sequences, each in a tree of its own (requests of a cache whose global
  tree is off) — the drafter's per-request sources, so each draft knows which one it came from;
- `SharedTree`: many sequences in one tree (the global tree), added and removed by key — the saved
  chats written since the saved-chat index was last built.
A speculation walks from the longest matching tail of the context along the most frequent
continuation, each token's probability the share of occurrences that continued that way; it costs
tens of microseconds and appending is amortised O(tree depth) per token.

The package ships as an sdist with a C++ extension; scripts/setup builds it once into the
wheelhouse. Without it the `suffix` decoder says it is unavailable.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from specchat.decoding.sources import Continuation

try:
    from arctic_inference.suffix_decoding import SuffixDecodingCache
except ImportError:  # not built here: the suffix decoder reports itself unavailable
    SuffixDecodingCache = None

DEPTH = 64  # longest context tail matched, in tokens
_LOOKUP = "__lookup__"


def unavailable_reason() -> str | None:
    if SuffixDecodingCache is None:
        return "it needs arctic-inference's suffix trees: run scripts/setup to build them"
    return None


def _continuation(draft) -> Continuation | None:
    if not draft.token_ids:
        return None
    return Continuation(list(draft.token_ids), list(draft.probs), int(draft.match_len))


class SequenceTrees:
    """Named sequences, one suffix tree each; sequences only grow (rebuild to change one)."""

    def __init__(self) -> None:
        self._cache = SuffixDecodingCache(max_tree_depth=DEPTH, max_cached_requests=0)

    def add(self, name: Hashable, tokens: Sequence[int]) -> None:
        if name in self._cache.active_requests:
            self._cache.stop_request(name)
        self._cache.start_request(name, list(tokens))

    def extend(self, name: Hashable, tokens: Sequence[int]) -> None:
        if tokens:
            self._cache.add_active_response(name, list(tokens))

    def names(self) -> list[Hashable]:
        return list(self._cache.active_requests)

    def continuation(
        self,
        name: Hashable,
        context: Sequence[int],
        limit: int,
        factor: float = 1.0,
        min_prob: float = 0.1,
    ) -> Continuation | None:
        """The best continuation of the context's tails found in sequence `name` (at most
        `factor` × match length tokens from a match, probabilities down to `min_prob`)."""
        draft = self._cache.speculate(
            name,
            list(context[-DEPTH:]),
            max_spec_tokens=limit,
            max_spec_factor=factor,
            min_token_prob=min_prob,
        )
        return _continuation(draft)


class SharedTree:
    """Many sequences in one suffix tree, each added whole and removed by its key."""

    def __init__(self) -> None:
        self._cache = SuffixDecodingCache(max_tree_depth=DEPTH, max_cached_requests=-1)
        self._cache.start_request(_LOOKUP, [])  # speculating needs an active request
        self._lengths: dict[Hashable, int] = {}

    @property
    def n_tokens(self) -> int:
        return sum(self._lengths.values())

    def add(self, key: Hashable, tokens: Sequence[int]) -> None:
        """Index `tokens` under `key`, replacing what `key` held."""
        self.remove(key)
        self._cache.start_request(key, [])
        self._cache.add_active_response(key, list(tokens))
        self._cache.stop_request(key)
        self._lengths[key] = len(tokens)

    def remove(self, key: Hashable) -> None:
        if key in self._cache.cached_requests:
            self._cache.evict_cached_response(key)
        self._lengths.pop(key, None)

    def continuation(
        self, context: Sequence[int], limit: int, factor: float = 1.0, min_prob: float = 0.1
    ) -> Continuation | None:
        draft = self._cache.speculate(
            _LOOKUP,
            list(context[-DEPTH:]),
            max_spec_tokens=limit,
            max_spec_factor=factor,
            min_token_prob=min_prob,
        )
        return _continuation(draft)
