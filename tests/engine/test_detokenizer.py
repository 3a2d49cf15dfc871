"""Incremental detokenizing on the real tokenizer: split UTF-8 and stop strings across tokens."""

from __future__ import annotations

import pytest

from specchat.engine.detokenizer import Detokenizer

TEXTS = [
    "Café crème brûlée, naïve façade.",
    "東京は日本の首都です。北京是中国的首都。",
    "Party 🎉 family 👩‍👩‍👧‍👦 flags 🇫🇷🇯🇵 done",
    "mixed: ñ, 日本, 🙂 and plain",
]


@pytest.mark.parametrize("text", TEXTS)
def test_split_utf8_is_never_shown_as_garbage(llama_backend, text):
    ids = llama_backend.tokenize(text)
    # the tokenizer really splits characters across tokens for these texts
    pieces = [llama_backend.token_bytes(t) for t in ids]
    if text != TEXTS[0]:
        assert any(_is_partial_utf8(p) for p in pieces)
    detok = Detokenizer(llama_backend.token_bytes)
    released = [detok.add(t) for t in ids] + [detok.flush()]
    assert all("\ufffd" not in chunk for chunk in released)
    assert "".join(released) == text


def _is_partial_utf8(piece: bytes) -> bool:
    try:
        piece.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def _feed(backend, text, stops):
    detok = Detokenizer(backend.token_bytes, stops)
    released = []
    consumed = 0
    for t in backend.tokenize(text):
        released.append(detok.add(t))
        consumed += 1
        if detok.stopped_by is not None:
            break
    else:
        released.append(detok.flush())
    return detok, released, consumed


def test_stop_string_spanning_tokens_is_caught_and_never_shown(llama_backend):
    text = "The answer is 42. END_OF_ANSWER and then more text follows"
    stop = "END_OF_ANSWER"
    assert len(llama_backend.tokenize(stop)) > 1  # spans several tokens
    detok, released, consumed = _feed(llama_backend, text, [stop])
    assert detok.stopped_by == stop
    assert "".join(released) == "The answer is 42. "
    assert all("END" not in chunk for chunk in released)
    # generation stopped at the token that completed the stop string
    assert consumed < len(llama_backend.tokenize(text))


def test_text_that_only_looks_like_a_stop_string_is_released(llama_backend):
    text = "Ends with END_OF_ANSWEX, not the stop."
    detok, released, _ = _feed(llama_backend, text, ["END_OF_ANSWER"])
    assert detok.stopped_by is None
    assert "".join(released) == text


def test_held_back_text_is_released_as_soon_as_it_cannot_be_a_stop(llama_backend):
    detok = Detokenizer(llama_backend.token_bytes, ["\nUser:"])
    out = ""
    for t in llama_backend.tokenize("Hello\nThere"):
        out += detok.add(t)
    assert out == "Hello\nThere"


def test_earliest_of_several_stop_strings_wins(llama_backend):
    detok, released, _ = _feed(llama_backend, "alpha beta gamma delta", ["delta", "beta"])
    assert detok.stopped_by == "beta"
    assert "".join(released) == "alpha "
