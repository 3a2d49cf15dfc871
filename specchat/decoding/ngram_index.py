"""An incremental n-gram index over the context, so a lookup costs O(1) in the context length.

For every n in [min_n, max_n] it maps each n-gram to the `RECENT` places where it most recently
ended with at least one token after it. Appending a token updates only the n-grams that end just
before it. A lookup measures how far each of those occurrences really agrees with the context's
tail (up to `MATCH_CAP` tokens) and follows the one that agrees furthest back, the latest among
equals: a 3-gram that is the tail of a 40-token copy is a far better bet than a later place where
the same 3 tokens merely repeat. Rewriting code, "\n    return" recurs all through the prompt, and
the latest occurrence alone would lead a copy away from the line being rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass

MATCH_CAP = 64
RECENT = 16


@dataclass(frozen=True)
class Match:
    """What followed the earlier occurrence of the context's longest indexed tail that agrees with
    the context furthest back (of its `RECENT` latest; the latest among equals)."""

    continuation: list[int]
    ngram: int  # length of the indexed n-gram that matched (0: none)
    length: int  # how many tokens before the continuation agree with the context's tail (capped)
    end: int  # index of the occurrence's last matched token
    # of the matched n-gram's indexed occurrences, how many there are and how many were followed
    # by the continuation's first token: a short match whose every occurrence went on the same
    # way is a far better bet than one whose occurrences went many ways (docs/bench-log.md)
    occurrences: int = 0
    agreeing: int = 0


class NgramIndex:
    def __init__(self, min_n: int, max_n: int) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 ≤ min_ngram ≤ max_ngram")
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        self._ends: dict[tuple[int, ...], list[int]] = {}  # latest last

    def reset(self, tokens: list[int]) -> None:
        self.tokens = []
        self._ends = {}
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            end = len(self.tokens) - 1  # n-grams ending here now have a continuation
            for n in range(self.min_n, self.max_n + 1):
                if end - n + 1 < 0:
                    break
                ends = self._ends.setdefault(tuple(self.tokens[end - n + 1 : end + 1]), [])
                ends.append(end)
                if len(ends) > RECENT:
                    del ends[0]
            self.tokens.append(token)

    def sync(self, context: list[int]) -> None:
        """Catch up with a context that grew (or rebuild if it changed under us)."""
        known = len(self.tokens)
        if known <= len(context) and context[known - 1 : known] == self.tokens[known - 1 :]:
            self.extend(context[known:])
        else:
            self.reset(context)

    def match(self, limit: int, tail: list[int] | None = None) -> Match:
        """The continuation (at most `limit` tokens) of the earlier occurrence of the longest
        matching indexed suffix that agrees furthest back, with how long the match really is.
        With `tail`, the suffix is that of `tail` (another text's end looked up in this one),
        else its own."""
        tokens = self.tokens
        own = tail is None
        tail = tokens if tail is None else tail
        last = len(tail) - 1
        longest = min(self.max_n, len(tail) - 1 if own else len(tail))
        for n in range(longest, self.min_n - 1, -1):
            ends = self._ends.get(tuple(tail[-n:]))
            if not ends:
                continue
            best_end, best_length = -1, -1
            for end in reversed(ends):  # the latest first: it wins ties
                if best_length >= MATCH_CAP:
                    break
                reach = best_length  # it must agree there to reach further than the best
                if reach >= 0 and (
                    end - reach < 0 or last - reach < 0 or tokens[end - reach] != tail[last - reach]
                ):
                    continue
                length = n
                while (
                    length < MATCH_CAP
                    and end - length >= 0
                    and last - length >= 0
                    and tokens[end - length] == tail[last - length]
                ):
                    length += 1
                if length > best_length:
                    best_end, best_length = end, length
            following = tokens[best_end + 1]
            agreeing = sum(1 for end in ends if tokens[end + 1] == following)
            continuation = tokens[best_end + 1 : best_end + 1 + limit]
            return Match(continuation, n, best_length, best_end, len(ends), agreeing)
        return Match([], 0, 0, -1)

    def continuation(self, limit: int) -> tuple[list[int], int]:
        """Tokens that followed the best earlier occurrence of the longest matching suffix (as
        `match` chooses it), and that suffix's length (0: no match)."""
        found = self.match(limit)
        return found.continuation, found.ngram
