"""Lookahead's n-gram pool: newest continuations first, at most G per key, harvested from the
context incrementally — on the numpy backend's greedy text and on known numbers."""

from __future__ import annotations

import pytest

from specchat.decoding.ngram_pool import NgramPool
from tests.decoding.test_ngram_index import greedy_text


def expected_pool(ngrams: list[tuple[int, ...]], per_key: int) -> dict[int, list[tuple[int, ...]]]:
    """Newest first, each n-gram once (a repeat counts as new), at most `per_key` per key."""
    pool: dict[int, list[tuple[int, ...]]] = {}
    for gram in ngrams:
        entries = pool.setdefault(gram[0], [])
        if gram[1:] in entries:
            entries.remove(gram[1:])
        entries.insert(0, gram[1:])
        del entries[per_key:]
    return pool


def ngrams_of(tokens: list[int], n: int, first_end: int = 0) -> list[tuple[int, ...]]:
    """The n-grams of `tokens` in order, those ending at index ≥ first_end."""
    return [
        tuple(tokens[end - n + 1 : end + 1]) for end in range(max(n - 1, first_end), len(tokens))
    ]


def test_pool_keeps_the_newest_continuations_per_key():
    pool = NgramPool(n=3, per_key=2)
    pool.add(7, (1, 2))
    pool.add(7, (3, 4))
    assert pool.candidates(7, 5) == [(3, 4), (1, 2)]
    pool.add(7, (1, 2))  # seen again: the newest now
    assert pool.candidates(7, 5) == [(1, 2), (3, 4)]
    pool.add(7, (5, 6))  # a third: the oldest goes
    assert pool.candidates(7, 5) == [(5, 6), (1, 2)]
    assert pool.candidates(7, 1) == [(5, 6)]
    assert pool.candidates(8, 5) == []


@pytest.mark.parametrize("n,per_key", [(2, 1), (4, 5), (3, 2)])
def test_harvesting_token_by_token_equals_one_harvest(numpy_backend, n, per_key):
    text = greedy_text(numpy_backend, "Once upon a time", 150)
    whole = NgramPool(n, per_key)
    whole.reset(text, seed_from_context=True)
    grown = NgramPool(n, per_key)
    grown.reset(text[:1], seed_from_context=True)
    for length in range(2, len(text) + 1):
        grown.sync(text[:length])
    expected = expected_pool(ngrams_of(text, n), per_key)
    assert expected  # the text has n-grams to keep
    for key in range(numpy_backend.vocab_size):
        assert whole.candidates(key, per_key) == expected.get(key, []), key
        assert grown.candidates(key, per_key) == expected.get(key, []), key


def test_an_unseeded_pool_harvests_only_what_follows_the_prompt(numpy_backend):
    prompt = numpy_backend.tokenize("The dog sat on the log. The cat")
    text = greedy_text(numpy_backend, "The dog sat on the log. The cat", 60)
    n, per_key = 4, 3
    pool = NgramPool(n, per_key)
    pool.reset(prompt, seed_from_context=False)
    assert all(pool.candidates(key, per_key) == [] for key in set(prompt))
    pool.sync(text)
    # n-grams with at least one answer token: those ending at or after the prompt's end
    expected = expected_pool(ngrams_of(text, n, first_end=len(prompt)), per_key)
    for key in range(numpy_backend.vocab_size):
        assert pool.candidates(key, per_key) == expected.get(key, []), key
