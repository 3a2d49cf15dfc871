"""The n-gram index's rule worked out the slow way, for the tests to compare against."""

from __future__ import annotations

from specchat.decoding.ngram_index import MATCH_CAP, RECENT


def agreement(tokens: list[int], end: int, tail: list[int] | None = None) -> int:
    """How far back the occurrence ending at `end` agrees with `tail`'s end (the tokens' own
    tail by default), capped at `MATCH_CAP`."""
    tail = tokens if tail is None else tail
    last, agree = len(tail) - 1, 0
    while (
        agree < MATCH_CAP
        and end - agree >= 0
        and last - agree >= 0
        and tokens[end - agree] == tail[last - agree]
    ):
        agree += 1
    return agree


def brute_force_ngram(tokens: list[int], tail: list[int], min_n: int, longest: int, limit: int):
    """(continuation, n, length, end) for the longest tail n-gram of `tail` (n from `longest` down
    to `min_n`) that occurs with at least one token after it: of its `RECENT` latest occurrences,
    the one that agrees with the tail furthest back (to `MATCH_CAP`; ties: the latest)."""
    for n in range(longest, min_n - 1, -1):
        ends = [
            end
            for end in range(n - 1, len(tokens) - 1)
            if tokens[end - n + 1 : end + 1] == tail[len(tail) - n :]
        ][-RECENT:]
        found = None
        for end in ends:
            length = agreement(tokens, end, tail)
            if found is None or length >= found[2]:
                found = tokens[end + 1 : end + 1 + limit], n, length, end
        if found is not None:
            return found
    return [], 0, 0, -1
