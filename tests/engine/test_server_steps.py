"""How a server's chunks become steps, on the cases a real server produces rarely or never on
demand: a token without text of its own (it arrives with the next chunk), a pass cut short when
the answer ends, a chunk that closes one pass and opens the next. The common case — one token per
chunk, counters raised on a pass's first token — is checked against llama-server itself in
test_llama_server.py."""

from __future__ import annotations

from specchat.backends.remote import ServerChunk
from specchat.engine.server_steps import NONE, PER_TOKEN, ServerSteps


def timed(text: str, generated: int, drafted: int, accepted: int, ms: float) -> ServerChunk:
    return ServerChunk(
        text=text, generated=generated, drafted=drafted, accepted=accepted, generated_ms=ms
    )


def feed(chunks: list[ServerChunk]):
    steps = ServerSteps()
    out = []
    for chunk in chunks:
        out += steps.add(chunk, 0.0)
    return steps, out + steps.finish()


def shape(out) -> list[tuple[str, int, int, int]]:
    return [(s.text, s.tokens, s.drafted, s.accepted) for s in out]


def test_a_verified_pass_is_one_step_of_its_accepted_tokens_plus_one():
    steps, out = feed(
        [
            timed("A", 1, 0, 0, 1.0),  # plain
            timed(" b", 2, 4, 2, 5.0),  # a pass drafted 4, accepted 2: this token opens it
            timed(" c", 3, 4, 2, 5.0),
            timed(" d", 4, 4, 2, 5.0),  # ... and this one, the server's own token, closes it
            timed(" e", 5, 8, 2, 9.0),  # a pass drafted 4, accepted none: one token
        ]
    )
    assert steps.reports == PER_TOKEN
    assert shape(out) == [("A", 1, 0, 0), (" b c d", 3, 4, 2), (" e", 1, 4, 0)]
    assert [s.seconds for s in out] == [0.001, 0.004, 0.004]


def test_a_token_without_text_arrives_with_the_next_chunk():
    _, out = feed(
        [
            timed("x", 1, 0, 0, 1.0),
            # tokens 2 and 3 (half a character each) sent nothing; token 4 brings their text
            timed("é!", 4, 0, 0, 4.0),
        ]
    )
    assert sum(s.tokens for s in out) == 4
    assert "".join(s.text for s in out) == "xé!"
    assert all(s.tokens == 1 for s in out)  # plain passes stay plain


def test_a_pass_cut_short_by_the_end_keeps_its_counts():
    _, out = feed([timed("A", 1, 0, 0, 1.0), timed(" b", 2, 3, 3, 2.0), timed(" c", 3, 3, 3, 2.5)])
    # the pass had 3 accepted drafts + 1 own token, but the answer ended after two of them
    assert shape(out) == [("A", 1, 0, 0), (" b c", 2, 3, 3)]
    assert sum(s.accepted for s in out) == 3


def test_one_chunk_can_close_a_pass_and_open_the_next():
    _, out = feed(
        [
            timed("A", 1, 2, 1, 1.0),  # pass 1: accepted 1 -> 2 tokens
            # its second token had no text; the next pass (accepted 1) begins with this chunk's token
            timed("BC", 3, 4, 2, 2.0),
            timed("D", 4, 4, 2, 2.0),
        ]
    )
    assert [(s.tokens, s.drafted, s.accepted) for s in out] == [(2, 2, 1), (2, 2, 1)]
    assert "".join(s.text for s in out) == "ABCD"


def test_chunks_without_timings_are_text_only_steps():
    steps, out = feed([ServerChunk(text="Hel"), ServerChunk(text="lo"), ServerChunk()])
    assert steps.reports == NONE
    assert shape(out) == [("Hel", 0, 0, 0), ("lo", 0, 0, 0)]
