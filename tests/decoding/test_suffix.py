"""SuffixDecoding over everything the chat has seen: the suffix index of saved chats (checked against
brute force and against ArcticInference's suffix tree), the index following the store and its disk
cache, and the `suffix` decoder drafting from the store, the previous answer and the chat — always
token-identical to greedy, with its drafts' sources reported."""

from __future__ import annotations

import random

import pytest

from specchat.backends.base import ChatMessage
from specchat.decoding.registry import DECODERS, build_decoder
from specchat.decoding.sources import CHAT, PREVIOUS, PROMPT, SAVED, DraftSources
from specchat.decoding.suffix import SAVED_MIN_MATCH, SuffixDrafter
from specchat.decoding.suffix_array import DEPTH, TokenSuffixArray
from specchat.decoding.suffix_tree import SharedTree
from specchat.engine.events import StepEvent
from specchat.engine.local import Engine
from specchat.engine.protocol import GenerationRequest
from specchat.errors import SpecchatError
from specchat.history import HistoryStore, StoredMessage
from specchat.prompting import chat_prompt_ids, turn_start
from specchat.saved_chats import SavedChatsIndex

# -- the suffix array ---------------------------------------------------------------------------


def test_matches_are_every_occurrence_of_every_tail():
    rng = random.Random(7)
    for _ in range(150):
        vocab = rng.choice([2, 4, 30])
        seqs = [[rng.randrange(vocab) for _ in range(rng.randrange(0, 50))] for _ in range(4)]
        index = TokenSuffixArray.build(seqs)
        spans = TokenSuffixArray.spans(seqs)
        context = [rng.randrange(vocab) for _ in range(rng.randrange(1, 60))]
        found = index.matches(context)
        for length in range(1, min(len(context), DEPTH) + 1):
            tail = context[-length:]
            expected = sorted(
                spans[i][0] + j
                for i, seq in enumerate(seqs)
                for j in range(len(seq) - length + 1)
                if seq[j : j + length] == tail
            )
            if not expected:
                assert len(found) == length - 1
                break
            got_length, lo, hi = found[length - 1]
            assert got_length == length
            assert sorted(int(p) for p in index.suffixes[lo:hi]) == expected


@pytest.mark.parametrize(
    "seqs, context",
    [
        ([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 5]], [9, 1, 2]),
        ([[5, 6, 7, 8, 9, 10], [6, 7, 1]], [4, 5, 6, 7]),
        ([[1, 2, 3], [7, 2, 3, 4, 4]], [0, 7, 2, 3]),
        ([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]], [1, 4, 1, 5]),
    ],
)
def test_continuation_agrees_with_arctic_inference(seqs, context):
    """The same counts, the same most frequent path, the same probabilities as SuffixDecoding's
    own suffix tree (cases without ties, which the two break differently; ArcticInference matches
    tails shorter than the context it is given, hence a leading token)."""
    index = TokenSuffixArray.build(seqs)
    tree = SharedTree()
    for i, seq in enumerate(seqs):
        tree.add(i, seq)
    ours = index.continuation(context, 8, min_prob=0.1, factor=4.0)
    theirs = tree.continuation(context, 8, factor=4.0, min_prob=0.1)
    assert ours is not None and theirs is not None
    assert ours.tokens == theirs.tokens
    assert ours.probs == pytest.approx(theirs.probs, rel=1e-6)


def test_saved_and_loaded_index_answer_alike(tmp_path):
    seqs = [[1, 2, 3, 4, 5], [2, 3, 4, 6], [9, 9, 2, 3, 4, 5]]
    built = TokenSuffixArray.build(seqs)
    built.save(tmp_path / "i")
    loaded = TokenSuffixArray.load(tmp_path / "i")
    for context in ([2, 3], [9, 2, 3, 4], [7]):
        assert loaded.continuation(context, 5, factor=4.0) == built.continuation(
            context, 5, factor=4.0
        )


# -- the bundled model ------------------------------------------------------------------------

QUESTION = "Write a Python function that returns the sum of a list of numbers."


@pytest.fixture(autouse=True)
def own_policy(tmp_path, monkeypatch):
    """Every test's draft policy starts from its priors (none learned by other tests)."""
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))


def _generate(backend, name, ids, max_tokens=96, sources=DraftSources(), **params):
    backend.rollback(0)
    engine = Engine(backend, build_decoder(name, params, backend))
    events = list(engine.generate(GenerationRequest(tuple(ids), max_tokens, sources=sources)))
    steps = [e for e in events if isinstance(e, StepEvent) and not e.tail]
    return events[-1], steps


@pytest.fixture
def store_with_answer(fresh_llama, tmp_path):
    """A store holding QUESTION and greedy's answer as a saved chat, and its index (ready)."""
    ids = chat_prompt_ids(fresh_llama, [ChatMessage("user", QUESTION)])
    greedy, _ = _generate(fresh_llama, "greedy", ids)
    store = HistoryStore(tmp_path / "history.sqlite3")
    index = SavedChatsIndex(store.path, fresh_llama, cache_folder=tmp_path / "index").start()
    store.add_listener(index.chat_changed)
    chat = store.new_chat("earlier")
    store.add_message(chat, StoredMessage("user", QUESTION))
    store.add_message(chat, StoredMessage("assistant", greedy.text))
    index.wait_idle()
    yield ids, greedy, store, index
    index.close(wait=True)
    store.close()


def test_the_same_question_again_drafts_the_saved_answer(fresh_llama, store_with_answer):
    ids, greedy, _, index = store_with_answer
    # a fixed draft length: what the saved chat offers, whatever the pass costs measured here
    saved = DraftSources(saved=index)
    done, steps = _generate(fresh_llama, "suffix", ids, sources=saved, fixed_draft=16)
    assert done.token_ids == greedy.token_ids
    assert done.stats.generated_tokens / done.stats.steps >= 4
    sources = {s.source for s in steps if s.accepted}
    assert sources == {SAVED}


def test_a_saved_chat_drafts_only_after_a_long_match(fresh_llama, store_with_answer):
    """A few words in common with an old answer are no reason to draft it: its proposal counts
    only after SAVED_MIN_MATCH tokens matched (short ones lost to the chat's own on the dev half)."""
    _, greedy, _, index = store_with_answer
    answer = list(greedy.token_ids)
    assert len(answer) > 40
    unrelated = fresh_llama.tokenize("Zebras hum quietly in violet rain.")
    drafter = SuffixDrafter(num_pred_tokens=16, candidates=3, factor=4.0, min_prob=0.1)

    def sources_after(shared: int) -> set[str]:
        context = unrelated + answer[10 : 10 + shared]
        drafter.reset(context, DraftSources(saved=index))
        return {source for _, source in drafter.proposals(context, 16)}

    assert SAVED not in sources_after(5)
    assert SAVED in sources_after(SAVED_MIN_MATCH + 4)


def test_without_the_store_nothing_comes_from_it(fresh_llama, store_with_answer):
    ids, greedy, _, _ = store_with_answer
    done, steps = _generate(fresh_llama, "suffix", ids)
    assert done.token_ids == greedy.token_ids
    assert SAVED not in {s.source for s in steps}


@pytest.mark.parametrize("name", ["suffix", "pld"])
def test_regenerating_reverifies_the_previous_answer(fresh_llama, name):
    ids = chat_prompt_ids(fresh_llama, [ChatMessage("user", QUESTION)])
    greedy, _ = _generate(fresh_llama, "greedy", ids)
    sources = DraftSources(previous_answer=greedy.token_ids)
    # a fixed draft length: what the old answer offers, whatever the pass costs measured here
    done, steps = _generate(fresh_llama, name, ids, sources=sources, fixed_draft=16)
    assert done.token_ids == greedy.token_ids
    assert {s.source for s in steps if s.accepted} == {PREVIOUS}
    assert done.stats.generated_tokens / done.stats.steps >= 3


def test_drafts_from_earlier_turns_say_so(fresh_llama):
    """A second turn that asks to repeat the first answer copies from 'this chat'."""
    first = [ChatMessage("user", "List the planets of the solar system, comma separated.")]
    ids = chat_prompt_ids(fresh_llama, first)
    answer, _ = _generate(fresh_llama, "greedy", ids, max_tokens=48)
    chat = [*first, ChatMessage("assistant", answer.text), ChatMessage("user", "Repeat that.")]
    ids = chat_prompt_ids(fresh_llama, chat)
    start = turn_start(fresh_llama, chat, ids)
    assert 0 < start < len(ids)
    greedy, _ = _generate(fresh_llama, "greedy", ids, max_tokens=48)
    done, steps = _generate(
        fresh_llama, "suffix", ids, max_tokens=48, sources=DraftSources(turn_start=start)
    )
    assert done.token_ids == greedy.token_ids
    assert CHAT in {s.source for s in steps if s.accepted}
    assert {s.source for s in steps if s.accepted} <= {CHAT, PROMPT}


def test_index_follows_the_store_and_keeps_itself_on_disk(fresh_llama, tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite3")
    chat = store.new_chat("a")
    store.add_message(chat, StoredMessage("user", "Tell me about otters."))
    store.add_message(chat, StoredMessage("assistant", "Otters are playful river mammals."))
    folder = tmp_path / "index"

    def index() -> SavedChatsIndex:
        found = SavedChatsIndex(store.path, fresh_llama, cache_folder=folder, persist_min_tokens=0)
        found.start().wait_idle()
        return found

    def finds(found: SavedChatsIndex, text: str, then: str) -> bool:
        """The index continues `text` with `then` (and the chat template after it)."""
        cont = found.continuation(fresh_llama.tokenize(text), 16, factor=8.0)
        expected = fresh_llama.tokenize(then)
        return cont is not None and cont.tokens[: len(expected)] == expected

    first = index()
    assert first.ready and not first.loaded
    assert finds(first, "Otters are playful", " river mammals.")
    second = index()
    assert second.loaded  # from disk, nothing tokenized again
    store.add_listener(second.chat_changed)
    other = store.new_chat("b")
    store.add_message(other, StoredMessage("user", "And beavers?"))
    store.add_message(other, StoredMessage("assistant", "Beavers build dams of sticks and mud."))
    second.wait_idle()
    assert finds(second, "Beavers build dams", " of sticks and mud.")
    store.delete_chat(other)
    second.wait_idle()
    assert not finds(second, "Beavers build dams", " of sticks and mud.")
    store.delete_chat(chat)  # the built part held it: the next start rebuilds without it
    third = index()
    assert not third.loaded and not finds(third, "Otters are playful", " river mammals.")
    for found in (first, second, third):
        found.close(wait=True)
    store.close()


def test_suffix_is_registered_with_checked_params(fresh_llama):
    cls = DECODERS["suffix"]
    assert cls.key == "f8" and cls.speculative and cls.greedy_family and cls.reads_saved_chats
    assert build_decoder("suffix", {"candidates": "2"}, fresh_llama).values["candidates"] == 2
    with pytest.raises(SpecchatError, match="suffix.candidates must be ≤ 8"):
        build_decoder("suffix", {"candidates": 9}, fresh_llama)
    assert len({c.key for c in DECODERS.values()}) == len(DECODERS)


@pytest.mark.parametrize("name", ["pld", "suffix", "lookahead"])
def test_no_draft_runs_past_the_end_of_an_answer(fresh_llama, name):
    """Asked the same question again, a copy of the first answer runs on into the chat
    template's next turn; what a draft holds after the end of the answer is never kept, so it is
    never drafted: a step that took the end as drafted took nothing after it and was offered
    nothing after it, and no rejected tail goes on after an end."""
    first = _generate(
        fresh_llama, "greedy", chat_prompt_ids(fresh_llama, [ChatMessage("user", QUESTION)]), 256
    )[0]
    chat = [
        ChatMessage("user", QUESTION),
        ChatMessage("assistant", first.text),
        ChatMessage("user", QUESTION),
    ]
    ids = chat_prompt_ids(fresh_llama, chat)
    greedy, _ = _generate(fresh_llama, "greedy", ids, 256)
    assert greedy.finish_reason == "eos"  # the answer ends within the limit: the end is drafted
    done, steps = _generate(fresh_llama, name, ids, 256, fixed_draft=32)
    assert done.token_ids == greedy.token_ids
    assert sum(s.accepted for s in steps) > len(done.token_ids) / 2  # it copied
    ends = fresh_llama.eos_ids
    for step in steps:  # `tokens` are the kept ones: the end and what follows it are cut
        assert step.accepted <= len(step.tokens) + 1
        if step.accepted == len(step.tokens) + 1:  # the end was drafted and taken
            assert not step.rejected
    assert not any(token in ends for s in steps for token in s.rejected[:-1])
