"""Lookahead's n-gram pool: for each key token, up to G continuations of N-1 tokens, newest kept.

Fed from two sources: n-grams the Jacobi window produced, and n-grams of the committed context
(prompt, history and answer so far), which makes lookahead a superset of prompt lookup.
"""

from __future__ import annotations

from collections import OrderedDict


class NgramPool:
    def __init__(self, n: int, per_key: int) -> None:
        self.n = n  # n-gram length, key included
        self.per_key = per_key
        self._pool: dict[int, OrderedDict[tuple[int, ...], None]] = {}
        self._seen = 0  # context tokens already harvested

    def add(self, key: int, continuation: tuple[int, ...]) -> None:
        entries = self._pool.setdefault(key, OrderedDict())
        entries.pop(continuation, None)
        entries[continuation] = None
        while len(entries) > self.per_key:
            entries.popitem(last=False)

    def candidates(self, key: int, limit: int) -> list[tuple[int, ...]]:
        """Up to `limit` continuations of `key`, newest first."""
        entries = self._pool.get(key)
        if not entries:
            return []
        return list(reversed(entries))[:limit]

    def reset(self, context: list[int], seed_from_context: bool) -> None:
        self._pool = {}
        self._seen = 0
        if seed_from_context:
            self.sync(context)
        else:
            self._seen = len(context)

    def sync(self, context: list[int]) -> None:
        """Harvest the context's n-grams that became complete since the last call."""
        n = self.n
        start = max(0, self._seen - n + 1)
        for end in range(start + n, len(context) + 1):
            self.add(context[end - n], tuple(context[end - n + 1 : end]))
        self._seen = len(context)
