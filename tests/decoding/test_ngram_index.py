"""Prompt lookup's incremental n-gram index on a real model's text (the numpy backend's greedy
answers, which repeat themselves as prompt lookup expects), against a brute-force search."""

from __future__ import annotations

import pytest

from specchat.decoding.ngram_index import NgramIndex
from specchat.decoding.plain import GreedyDecoder
from specchat.engine.local import Engine
from specchat.engine.protocol import GenerationRequest
from specchat.prompting import raw_prompt_ids
from tests.decoding.ngram_oracle import brute_force_ngram


def greedy_text(backend, prompt: str, tokens: int) -> list[int]:
    """The prompt and the model's greedy answer: the context prompt lookup searches."""
    ids = raw_prompt_ids(backend, prompt)
    done = list(Engine(backend, GreedyDecoder()).generate(GenerationRequest(tuple(ids), tokens)))
    return ids + list(done[-1].token_ids)


def brute_force_match(tokens: list[int], min_n: int, max_n: int, limit: int) -> list[int]:
    """What followed, of the `RECENT` latest earlier occurrences of the longest tail n-gram that
    has one, the one that agrees with the context furthest back (ties: the latest)."""
    return brute_force_ngram(tokens, tokens, min_n, min(max_n, len(tokens) - 1), limit)[0]


def test_a_copy_under_way_is_followed_past_a_later_repeat_of_its_last_tokens():
    """Rewriting a function, the answer's last tokens ("\n    return") may recur later in the
    prompt than where the copy is: the longer agreement says which occurrence is being copied."""
    copied = [10, 11, 12, 13, 14, 15, 16]  # the passage the answer copies
    elsewhere = [20, 12, 13, 14, 21]  # its last three tokens again, followed differently
    index = NgramIndex(1, 3)
    index.reset(copied + elsewhere + [10, 11, 12, 13, 14])
    found = index.match(2)
    assert found.continuation == [15, 16]
    assert found.length == 5


@pytest.mark.parametrize("min_n,max_n", [(1, 3), (2, 4), (1, 1), (3, 8)])
@pytest.mark.parametrize("prompt", ["The cat", "Once upon a time", "def add(a, b):\n"])
def test_incremental_index_finds_the_longest_recent_match(numpy_backend, prompt, min_n, max_n):
    text = greedy_text(numpy_backend, prompt, 120)
    index = NgramIndex(min_n, max_n)
    index.reset(text[:1])
    found_any = False
    for length in range(2, len(text) + 1):
        context = text[:length]
        index.sync(context)  # grows one token at a time, as during an answer
        continuation, ngram = index.continuation(10)
        assert continuation == brute_force_match(context, min_n, max_n, 10), length
        assert (ngram == 0) == (continuation == [])
        found_any |= bool(continuation)
    assert found_any
    rebuilt = NgramIndex(min_n, max_n)
    rebuilt.reset(text)
    assert rebuilt.match(10) == index.match(10)


def test_sync_rebuilds_when_the_context_is_not_a_continuation(numpy_backend):
    """A regenerated answer (the context rolled back, then different tokens): the index must not
    keep n-grams of the answer that was thrown away."""
    text = greedy_text(numpy_backend, "Once upon a time", 80)
    for changed in (text[:40], text[:40] + list(b"zebra zebra zeb")):
        index = NgramIndex(1, 3)
        index.reset(text)
        index.sync(changed)
        fresh = NgramIndex(1, 3)
        fresh.reset(changed)
        assert index.tokens == changed
        assert index.match(10) == fresh.match(10)
        assert index.match(10).continuation == brute_force_match(changed, 1, 3, 10)


@pytest.mark.parametrize("min_n,max_n", [(0, 3), (4, 3)])
def test_bad_ngram_bounds_are_refused(min_n, max_n):
    with pytest.raises(ValueError):
        NgramIndex(min_n, max_n)
