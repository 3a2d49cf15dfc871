"""An incremental n-gram index over the context, so a lookup costs O(1) in the context length.

For every n in [min_n, max_n] it maps each n-gram to where it most recently ended with at least
one token after it. Appending a token updates only the n-grams that end just before it.
"""

from __future__ import annotations


class NgramIndex:
    def __init__(self, min_n: int, max_n: int) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 ≤ min_ngram ≤ max_ngram")
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        self._last_end: dict[tuple[int, ...], int] = {}

    def reset(self, tokens: list[int]) -> None:
        self.tokens = []
        self._last_end = {}
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            end = len(self.tokens) - 1  # n-grams ending here now have a continuation
            for n in range(self.min_n, self.max_n + 1):
                if end - n + 1 < 0:
                    break
                self._last_end[tuple(self.tokens[end - n + 1 : end + 1])] = end
            self.tokens.append(token)

    def sync(self, context: list[int]) -> None:
        """Catch up with a context that grew (or rebuild if it changed under us)."""
        known = len(self.tokens)
        if known <= len(context) and context[known - 1 : known] == self.tokens[known - 1 :]:
            self.extend(context[known:])
        else:
            self.reset(context)

    def continuation(self, limit: int) -> tuple[list[int], int]:
        """Tokens that followed the most recent earlier occurrence of the longest matching suffix,
        and that suffix's length (0: no match)."""
        tokens = self.tokens
        for n in range(min(self.max_n, len(tokens) - 1), self.min_n - 1, -1):
            end = self._last_end.get(tuple(tokens[-n:]))
            if end is not None:
                return tokens[end + 1 : end + 1 + limit], n
        return [], 0
