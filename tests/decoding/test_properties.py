"""Properties of the decoding core, checked by hypothesis on generated inputs against brute force:

- the detokenizer: streamed text equals the one-shot decode of all the bytes, every streamed
  prefix is a prefix of it (nothing shown is taken back: a split UTF-8 sequence waits), and a
  stop string is caught however the tokens split it, with nothing of it shown;
- the n-gram index (prompt lookup) and the suffix index (saved chats) find what a brute-force
  search finds; the suffix tree (ArcticInference) proposes only what follows the matched tail;
- chain and tree verification in greedy mode accept exactly the longest drafted prefix greedy
  agrees with, then greedy's own next token (the numpy backend is the model).

Runs are reproducible (`derandomize=True`) and each property takes seconds.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specchat.backends.base import Block
from specchat.decoding.ngram_index import NgramIndex
from specchat.decoding.sampling import Sampler, SamplingParams, verify_tree
from specchat.decoding.speculative import Draft, insert_branch
from specchat.decoding.suffix_array import DEPTH, TokenSuffixArray
from specchat.decoding.suffix_tree import SharedTree, unavailable_reason
from specchat.engine.detokenizer import Detokenizer
from tests.decoding.ngram_oracle import brute_force_ngram
from tests.numpy_backend import CORPUS, CharNgramModel, NumpyBackend

REPRODUCIBLE = settings(
    deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

# -- the detokenizer ---------------------------------------------------------------------------

# text with one-, two-, three- and four-byte characters, so token splits fall inside characters
TEXT = st.text(
    alphabet=st.sampled_from(list("ab ,.\nxé€中文😀🎉ß") + ["\u0301", "\U0001f9ea"]),
    max_size=40,
)


@st.composite
def split_bytes(draw, data: bytes) -> list[bytes]:
    """`data` cut into tokens at arbitrary byte offsets (empty tokens too, as a tokenizer's
    special tokens that print nothing)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=len(data) + 2)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


@st.composite
def tokenized_text(draw) -> tuple[str, list[bytes]]:
    text = draw(TEXT)
    return text, draw(split_bytes(text.encode("utf-8")))


@st.composite
def tokenized_bytes(draw) -> list[bytes]:
    """Any bytes — also invalid UTF-8, as a model can emit byte tokens in any order."""
    return draw(split_bytes(draw(st.binary(max_size=40))))


def stream(pieces: list[bytes], stop: tuple[str, ...] = ()) -> tuple[Detokenizer, list[str]]:
    """Feed the pieces as tokens one by one, as the engine does; the chunks it released."""
    detok = Detokenizer(lambda token: pieces[token], stop)
    chunks = [detok.add(token) for token in range(len(pieces))]
    if detok.stopped_by is None:
        chunks.append(detok.flush())
    return detok, chunks


@REPRODUCIBLE
@given(tokenized_text())
def test_streamed_valid_text_is_the_text_and_never_shows_a_partial_character(case):
    text, pieces = case
    detok, chunks = stream(pieces)
    assert "".join(chunks) == detok.text == text
    assert all("\ufffd" not in chunk for chunk in chunks)


@REPRODUCIBLE
@given(tokenized_bytes())
def test_streamed_bytes_equal_the_one_shot_decode_and_are_never_taken_back(pieces):
    whole = b"".join(pieces).decode("utf-8", errors="replace")
    detok = Detokenizer(lambda token: pieces[token])
    shown = ""
    for token in range(len(pieces)):
        shown += detok.add(token)
        assert whole.startswith(shown)  # what is on screen stays
    shown += detok.flush()
    assert shown == detok.text == whole


@st.composite
def text_with_a_stop(draw) -> tuple[str, str, list[bytes]]:
    """Text, a stop string taken from inside it, and the text cut into tokens anywhere."""
    text = draw(TEXT.filter(lambda t: len(t) >= 1))
    start = draw(st.integers(0, len(text) - 1))
    stop = text[start : draw(st.integers(start + 1, min(len(text), start + 6)))]
    return text, stop, draw(split_bytes(text.encode("utf-8")))


def first_stop(pieces: list[bytes], stops: tuple[str, ...]) -> tuple[str, int] | None:
    """Brute force: the text after each token (whole characters only), the first one that holds
    a stop string, and where the earliest stop in it starts. Generation stops at the token that
    completes a stop, so a longer stop that would have started earlier never completes."""
    data = b""
    for piece in pieces:
        data += piece
        text = data.decode("utf-8", errors="ignore")  # valid text: drops only a split tail
        found = [text.find(s) for s in stops if s in text]
        if found:
            return text, min(found)
    return None


@REPRODUCIBLE
@given(text_with_a_stop(), st.lists(TEXT.filter(bool), max_size=2))
def test_a_stop_string_split_across_tokens_is_caught_and_never_shown(case, other_stops):
    text, stop, pieces = case
    stops = (stop, *other_stops)
    detok, chunks = stream(pieces, stops)
    expected = first_stop(pieces, stops)
    assert expected is not None  # `stop` is in the text
    seen, at = expected
    assert detok.stopped_by is not None and seen.find(detok.stopped_by) == at
    assert "".join(chunks) == detok.text == seen[:at]
    assert not any(s in detok.text for s in stops)


@REPRODUCIBLE
@given(tokenized_text(), TEXT.filter(bool))
def test_text_without_the_stop_string_is_released_whole(case, stop):
    text, pieces = case
    if stop in text:
        return
    detok, chunks = stream(pieces, (stop,))
    assert detok.stopped_by is None and "".join(chunks) == text


# -- the n-gram index and the suffix index -------------------------------------------------------

TOKENS = st.lists(st.integers(0, 5), max_size=80)  # a small vocabulary: many repeats


@REPRODUCIBLE
@given(TOKENS, st.integers(1, 4), st.integers(0, 3), st.integers(1, 10), st.data())
def test_ngram_index_grown_token_by_token_finds_what_brute_force_finds(
    tokens, min_n, extra, limit, data
):
    max_n = min_n + extra
    index = NgramIndex(min_n, max_n)
    index.reset(tokens[:1])
    for length in range(1, len(tokens) + 1):
        context = tokens[:length]
        index.sync(context)  # grows as the context does during an answer
        found = index.match(limit)
        expected = brute_force_ngram(context, context, min_n, min(max_n, length - 1), limit)
        assert (found.continuation, found.ngram, found.length, found.end) == expected
    # another text's tail looked up in this one (a regenerated answer, the chat's earlier turns)
    tail = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=12))
    found = index.match(limit, tail)
    expected = brute_force_ngram(tokens, tail, min_n, min(max_n, len(tail)), limit)
    assert (found.continuation, found.ngram, found.length, found.end) == expected


SEQUENCES = st.lists(st.lists(st.integers(0, 4), max_size=40), min_size=1, max_size=5)


def occurrences(sequences: list[list[int]], pattern: list[int]) -> list[tuple[int, int]]:
    """(sequence, offset) of every occurrence of `pattern` inside one sequence."""
    return [
        (i, j)
        for i, seq in enumerate(sequences)
        for j in range(len(seq) - len(pattern) + 1)
        if seq[j : j + len(pattern)] == pattern
    ]


@REPRODUCIBLE
@given(SEQUENCES, st.lists(st.integers(0, 5), min_size=1, max_size=DEPTH + 8))
def test_suffix_index_matches_every_occurrence_of_every_tail(sequences, context):
    index = TokenSuffixArray.build(sequences)
    spans = TokenSuffixArray.spans(sequences)
    found = index.matches(context)
    longest = 0
    for length in range(1, min(len(context), DEPTH) + 1):
        where = occurrences(sequences, context[-length:])
        if not where:
            break
        longest = length
        got_length, lo, hi = found[length - 1]
        assert got_length == length
        assert sorted(int(p) for p in index.suffixes[lo:hi]) == sorted(
            spans[i][0] + j for i, j in where
        )
    assert len(found) == longest


def follows_a_match(sequences: list[list[int]], context: list[int], continuation) -> bool:
    """The proposal is what came after the matched tail somewhere in the indexed sequences."""
    matched = context[len(context) - continuation.match_length :]
    return bool(occurrences(sequences, matched + continuation.tokens))


def followed_somewhere(sequences: list[list[int]], token: int) -> bool:
    """`token` occurs in the sequences with a token after it: a one-token match to continue."""
    return any(seq[k] == token for seq in sequences for k in range(len(seq) - 1))


@REPRODUCIBLE
@given(SEQUENCES, st.lists(st.integers(0, 5), min_size=1, max_size=20), st.integers(1, 12))
def test_suffix_index_proposes_only_what_followed_its_match(sequences, context, limit):
    found = TokenSuffixArray.build(sequences).continuation(context, limit, 0.0, factor=8.0)
    assert (found is not None) == followed_somewhere(sequences, context[-1])
    if found is not None:
        assert 1 <= len(found.tokens) <= limit and found.match_length >= 1
        assert follows_a_match(sequences, context, found)
        assert all(0 < p <= 1 for p in found.probs)
        assert found.probs == sorted(found.probs, reverse=True)


@pytest.mark.skipif(unavailable_reason() is not None, reason="the C++ suffix trees are not built")
@REPRODUCIBLE
@given(SEQUENCES, st.lists(st.integers(0, 5), min_size=2, max_size=20), st.integers(1, 12))
def test_suffix_tree_proposes_only_what_followed_its_match(sequences, context, limit):
    """(ArcticInference's trees propose nothing after a one-token context: the chat always has
    more.)"""
    tree = SharedTree()
    for i, seq in enumerate(sequences):
        tree.add(i, seq)
    found = tree.continuation(context, limit, factor=8.0, min_prob=0.0)
    assert (found is not None) == followed_somewhere(sequences, context[-1])
    if found is not None:
        assert 1 <= len(found.tokens) <= limit
        assert follows_a_match(sequences, context, found)


# -- verification --------------------------------------------------------------------------------

MODEL = CharNgramModel()
CORPUS_BYTES = [list(document.encode("utf-8")) for document in CORPUS[:5]]


def greedy_continuation(context: list[int], length: int) -> list[int]:
    """What plain greedy decoding says next, token by token, straight from the model."""
    out: list[int] = []
    for _ in range(length):
        out.append(int(np.argmax(MODEL.logits(tuple(context + out)))))
    return out


@st.composite
def context_and_branches(draw) -> tuple[list[int], list[list[int]]]:
    """A context cut from the corpus and draft branches: greedy's own continuation spoiled at
    a random depth (or not at all), and random token runs."""
    document = draw(st.sampled_from(CORPUS_BYTES))
    end = draw(st.integers(2, len(document)))
    context = document[max(0, end - 24) : end]
    greedy = greedy_continuation(context, 8)
    branches = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            cut = draw(st.integers(0, 8))
            branch = greedy[:cut] + draw(st.lists(st.integers(0, 258), max_size=3))
        else:
            branch = draw(st.lists(st.sampled_from(sorted(set(document))), max_size=6))
        branches.append(branch)
    return context, branches


def evaluate(context: list[int], tokens: list[int], parents: list[int]) -> np.ndarray:
    backend = NumpyBackend(MODEL)
    backend.prefill(context[:-1])
    return backend.evaluate(Block(tuple(tokens), tuple(parents)))


@settings(REPRODUCIBLE, max_examples=60)
@given(context_and_branches())
def test_greedy_tree_verification_accepts_the_longest_branch_greedy_agrees_with(case):
    context, branches = case
    tokens, parents = [context[-1]], [-1]
    children: dict[int, dict[int, int]] = {0: {}}
    for branch in branches:
        insert_branch(tokens, parents, children, {}, branch, "test")
    verdict = verify_tree(evaluate(context, tokens, parents), children, Sampler(SamplingParams()))
    accepted, node, next_token = verdict.accepted, verdict.node, verdict.next_token
    assert verdict.distance is None
    greedy = greedy_continuation(context, len(accepted) + 1)
    assert accepted == greedy[: len(accepted)]
    assert next_token == greedy[len(accepted)]
    # the longest: greedy's next token is not among the accepted node's drafted children
    assert next_token not in children.get(node, {})
    assert [tokens[i] for i in Block(tuple(tokens), tuple(parents)).path_to(node)[1:]] == accepted


@settings(REPRODUCIBLE, max_examples=60)
@given(context_and_branches())
def test_greedy_chain_verification_accepts_the_longest_prefix_greedy_agrees_with(case):
    context, branches = case
    draft = branches[0]
    logits = evaluate(context, [context[-1], *draft], list(range(-1, len(draft))))
    greedy = greedy_continuation(context, len(draft) + 1)
    agree = next((i for i, (a, b) in enumerate(zip(draft, greedy)) if a != b), len(draft))
    # with and without a draft model's q: greedy verification ignores q
    q = np.full((len(draft), MODEL.logits(()).shape[0]), 1.0 / MODEL.logits(()).shape[0])
    for draft_probs in (None, q):
        chain = Draft.chain(context[-1], draft, draft_probs)
        verdict = verify_tree(logits, chain.children, Sampler(SamplingParams()), chain.q, 0.5)
        assert len(verdict.accepted) == agree and verdict.next_token == greedy[agree]
        assert verdict.distance is None  # greedy: soft matching has nothing to move
