"""Lookahead's n-gram pool: for each key token, up to G continuations of N-1 tokens, newest kept.

Fed from two sources: n-grams the Jacobi window produced, and n-grams of the committed context
(prompt, history and answer so far), which makes lookahead a superset of prompt lookup. Each entry
remembers where it came from, so an accepted draft can say.
"""

from __future__ import annotations

from collections import OrderedDict

from specchat.decoding.sources import LOOKAHEAD, context_source


class NgramPool:
    def __init__(self, n: int, per_key: int) -> None:
        self.n = n  # n-gram length, key included
        self.per_key = per_key
        # key -> continuation -> where it came from (a sources name)
        self._pool: dict[int, OrderedDict[tuple[int, ...], str]] = {}
        self._seen = 0  # context tokens already harvested
        self._turn_start = 0

    def add(self, key: int, continuation: tuple[int, ...], origin: str = LOOKAHEAD) -> None:
        entries = self._pool.setdefault(key, OrderedDict())
        entries.pop(continuation, None)
        entries[continuation] = origin
        while len(entries) > self.per_key:
            entries.popitem(last=False)

    def candidates(self, key: int, limit: int) -> list[tuple[int, ...]]:
        """Up to `limit` continuations of `key`, newest first."""
        entries = self._pool.get(key)
        if not entries:
            return []
        return list(reversed(entries))[:limit]

    def origin(self, key: int, continuation: tuple[int, ...]) -> str:
        return self._pool.get(key, {}).get(continuation, LOOKAHEAD)

    def reset(self, context: list[int], seed_from_context: bool, turn_start: int = 0) -> None:
        self._pool = {}
        self._seen = 0
        self._turn_start = turn_start
        if seed_from_context:
            self.sync(context)
        else:
            self._seen = len(context)

    def sync(self, context: list[int]) -> None:
        """Harvest the context's n-grams that became complete since the last call."""
        n = self.n
        start = max(0, self._seen - n + 1)
        for end in range(start + n, len(context) + 1):
            origin = context_source(end - n + 1, self._turn_start)
            self.add(context[end - n], tuple(context[end - n + 1 : end]), origin)
        self._seen = len(context)
