"""The draft head: the hidden state it reads is the one the logits came from, the bundled model's
head drafts in `suffix` on text that copies nothing and the answer stays greedy's, and a file
that is not a head is ignored in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specchat.backends.base import Block, ChatMessage, DraftFeatures
from specchat.decoding.draft_head import DraftHead, Guess, head_for, head_path, load_head
from specchat.decoding.registry import build_decoder
from specchat.decoding.sources import DRAFT
from specchat.decoding.suffix import SuffixDrafter
from specchat.engine.local import Engine
from specchat.engine.protocol import GenerationRequest
from specchat.prompting import chat_prompt_ids
from tests.decoding.test_recycled import STORY, _answer


def test_the_features_are_the_hidden_state_the_logits_came_from(int4_backend):
    backend = int4_backend
    backend.rollback(0)
    ids = backend.tokenize("The lighthouse keeper climbed the stairs")
    assert backend.draft_features(ids[-1]) is None  # nothing committed by a pass yet
    logits = backend.evaluate(Block.chain(ids))
    backend.commit([0, 1, 2])  # the third row's token is the last committed
    features = backend.draft_features(ids[3])
    hidden, embedding = features.hidden(), features.embedding
    again = backend.model.head(torch.from_numpy(hidden)[None]).numpy()[0]
    assert int(np.argmax(again)) == int(np.argmax(logits[2]))
    np.testing.assert_allclose(again, logits[2], rtol=0, atol=1e-3 * np.abs(logits[2]).max())
    assert np.array_equal(embedding, backend.model.embedded([ids[3]])[0])
    backend.prefill(ids)  # a prompt: no pass row to read until the next one commits
    assert backend.draft_features(ids[0]) is None


def test_the_bundled_model_ships_a_head_and_llama_cpp_gives_no_features(int4_backend, fresh_llama):
    head, problem = head_for(int4_backend)
    assert head is not None and problem is None, head_path(int4_backend)
    assert fresh_llama.draft_features(0) is None


def test_suffix_drafts_the_heads_guess_where_nothing_copies_and_stays_greedy(int4_backend):
    ids = chat_prompt_ids(int4_backend, [ChatMessage("user", STORY)])
    greedy, _ = _answer(int4_backend, "greedy", ids)
    done, steps = _answer(int4_backend, "suffix", ids, fixed_draft=1)  # on by default
    assert done.token_ids == greedy.token_ids
    taken = [s for s in steps if s.accepted and s.source == DRAFT]
    assert len(taken) >= 5, [(s.source, s.accepted) for s in steps]
    off, off_steps = _answer(int4_backend, "suffix", ids, fixed_draft=1, head=False)
    assert off.token_ids == greedy.token_ids
    assert not any(s.source == DRAFT for s in off_steps)
    assert done.stats.steps < off.stats.steps  # fewer passes for the same answer


def test_a_runtime_without_hidden_states_never_reads_a_head(fresh_llama, monkeypatch):
    """The default asks for a head only where the runtime gives what it reads: on llama.cpp
    the bundled model's head is never loaded (nor the int4 kernels it runs on)."""
    import specchat.decoding.suffix as suffix

    looked = []
    monkeypatch.setattr(suffix, "head_for", lambda backend: looked.append(backend) or (None, None))
    ids = chat_prompt_ids(fresh_llama, [ChatMessage("user", STORY)])
    greedy, _ = _answer(fresh_llama, "greedy", ids)
    done, steps = _answer(fresh_llama, "suffix", ids)
    assert done.token_ids == greedy.token_ids
    assert not looked and not any(s.source == DRAFT for s in steps)


def test_a_copy_the_head_agrees_with_is_learned_apart(int4_backend, tmp_path, monkeypatch):
    """Where the head guessed a short copy's first token the policy learns that copy's
    acceptance apart from one it did not (the head's agreement is part of the copy's
    situation), and a guess drafted alone apart by how sure the head was."""
    ids = chat_prompt_ids(int4_backend, [ChatMessage("user", STORY)])

    def marks(head: bool) -> tuple[set[str], set[tuple]]:
        monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / str(head)))  # rates learned apart
        engine = Engine(int4_backend, build_decoder("suffix", {"head": head}, int4_backend))
        int4_backend.rollback(0)
        list(engine.generate(GenerationRequest(tuple(ids), 96)))
        situations = engine.decoder.policy.situations
        copies = [key for key in situations if key[0] in ("copy", "suffix")]
        guesses = {key for key in situations if key[0] == "head"}
        return {key[-1] for key in copies} & {"head agrees", "head differs"}, guesses

    agreement, guesses = marks(True)
    assert agreement == {"head agrees", "head differs"}
    sureness = {"unsure", "fair", "sure"}
    assert {key[1] for key in guesses} <= sureness
    assert {("head", name) for name in sureness} & guesses  # a guess drafted alone
    assert {("head", name, "then copy") for name in sureness} & guesses  # and then a copy
    assert marks(False) == (set(), set())


def test_a_guess_is_followed_by_what_followed_the_pending_token_and_it_before():
    """Where the conversation holds the pending token and the guess together, the head's draft
    goes on with what followed them there (LogitSpec's order: guess, then retrieve)."""
    drafter = SuffixDrafter(8, 3, 1.0, 0.1, head=True)
    context = [5, 6, 7, 8, 9, 20, 21, 6]  # pending 6; "6 7 8 9" earlier
    drafter.reset(context)
    drafter.proposals(context, 6)
    drafter._guess = Guess(7, 0.95)  # what the head would say: sure of 7
    then = [p for p in drafter._head_plans(context, 6) if p.key[-1] == "then copy"]
    assert [(p.key, p.available) for p in then] == [(("head", "sure", "then copy"), 6)]
    draft = drafter.draft(None, context, None, then[0], 4)
    assert draft.tokens == [6, 7, 8, 9, 20] and draft.source == DRAFT
    drafter._guess = Guess(30, 0.5)  # a guess never seen after 6: nothing to follow
    assert not [p for p in drafter._head_plans(context, 6) if p.key[-1] == "then copy"]


def test_the_head_drafts_stay_greedy_where_the_answer_repeats_itself(int4_backend):
    prompt = "Give three tips for learning a new language, each as a numbered item."
    ids = chat_prompt_ids(int4_backend, [ChatMessage("user", prompt)])
    greedy, _ = _answer(int4_backend, "greedy", ids)
    done, _ = _answer(int4_backend, "suffix", ids)
    assert done.token_ids == greedy.token_ids


SHORTLIST = tuple(range(3, 27))


def _arrays(dim=32, hidden=32, shortlist=SHORTLIST):
    rng = np.random.default_rng(0)
    return {
        "a_weight": rng.standard_normal((hidden, 2 * dim)).astype(np.float16),
        "a_bias": np.zeros(hidden, np.float16),
        "b_weight": rng.standard_normal((dim, hidden)).astype(np.float16),
        "b_bias": np.zeros(dim, np.float16),
        "shortlist": np.asarray(shortlist, np.int32),
        "out_rows": rng.standard_normal((len(shortlist), dim)).astype(np.float16),
    }


def _reference_scores(arrays, hidden: np.ndarray, embedding: np.ndarray) -> np.ndarray:
    """The head's shortlist scores in float64 numpy, unrounded weights (what training
    computed)."""
    a, b, rows = (arrays[k].astype(np.float64) for k in ("a_weight", "b_weight", "out_rows"))
    scale = np.linalg.norm(hidden) / max(np.linalg.norm(embedding), 1e-6)
    inner = a @ np.concatenate([hidden, embedding * scale]) + arrays["a_bias"]
    inner = inner / (1.0 + np.exp(-inner))
    z = hidden + b @ inner + arrays["b_bias"]
    return rows @ z


def test_a_guess_is_a_shortlisted_token_and_another_width_gets_none():
    head = DraftHead(_arrays(), vocab=64)
    rng = np.random.default_rng(1)
    hidden, embedding = rng.standard_normal((2, 32)).astype(np.float32)
    guess = head.guess(DraftFeatures(hidden, embedding))
    assert guess.token in SHORTLIST and 1 / len(SHORTLIST) <= guess.sure <= 1
    assert head.guess(DraftFeatures(hidden[:16], embedding[:16])) is None


def test_the_bundled_heads_guesses_in_c_are_its_own_in_numpy(int4_backend):
    """Along a real answer, the C's guess (int8 weights, the final norm applied in C) is the
    head's own float computation's wherever that one's best score leads by a margin."""
    backend = int4_backend
    head, _ = head_for(backend)
    with np.load(head_path(backend)) as data:
        arrays = {k: data[k] for k in data.files}
    backend.rollback(0)
    ids = chat_prompt_ids(backend, [ChatMessage("user", STORY)])
    backend.prefill(ids[:-1])
    token, compared, guesses = ids[-1], [], set()
    for _ in range(64):
        token = int(np.argmax(backend.evaluate(Block.chain([token]))[0]))
        backend.commit([0])
        features = backend.draft_features(token)
        guess = head.guess(features)
        guesses.add(guess.token)
        scores = _reference_scores(arrays, features.hidden(), features.embedding)
        second, first = np.sort(scores)[-2:]
        if first - second > 0.02 * (first - scores.min()):  # int8 weights may swap a near tie
            best = int(arrays["shortlist"][np.argmax(scores)])
            sure = 1.0 / np.exp(scores - first).sum()
            compared.append((guess.token, best, round(guess.sure, 2), round(sure, 2)))
    assert len(compared) >= 40, compared
    assert all(c == r and abs(s - t) < 0.05 for c, r, s, t in compared), compared
    assert len(guesses) > 10


def _asked_after(backend, head, token: int) -> tuple[int, float]:
    guess = head.guess(backend.draft_features(token))
    return guess.token, guess.sure


def test_a_pass_the_head_rides_guesses_what_the_head_guesses_after_it(int4_backend):
    """The guess made inside the pass is, bit for bit, the one asked after it, for the row
    greedy verification stops at: the last of a chain greedy agrees with, the first row whose
    greedy token is not the drafted one after it; every row of a tree. One pass a ride."""
    backend = int4_backend
    head, _ = head_for(backend)
    backend.rollback(0)
    ids = chat_prompt_ids(backend, [ChatMessage("user", STORY)])
    backend.prefill(ids[:-1])
    base = backend.n_committed
    greedy = [ids[-1]]
    for _ in range(3):  # greedy's next tokens, one pass each
        greedy.append(int(np.argmax(backend.evaluate(Block.chain([greedy[-1]]))[0])))
        backend.commit([0])
    backend.rollback(base)

    def ridden(block: Block, path: list[int], pending: int):
        backend.rollback(base)
        assert backend.ride_draft_head(head)
        logits = backend.evaluate(block)
        assert int(np.argmax(logits[path[-1]])) == pending
        backend.commit(path)
        return backend.ridden_guess(pending), _asked_after(backend, head, pending)

    # the chain greedy agrees with: its last row is guessed
    got, asked = ridden(Block.chain(greedy[:3]), [0, 1, 2], greedy[3])
    assert got == asked
    # a wrong second token: the first row is the one verification stops at
    wrong = (greedy[2] + 1) % backend.vocab_size
    got, asked = ridden(Block.chain([greedy[0], greedy[1], wrong]), [0, 1], greedy[2])
    assert got == asked
    # a tree (two children of the pending token): every row
    tree = Block((greedy[0], greedy[1], wrong), (-1, 0, 0))
    got, asked = ridden(tree, [0, 1], greedy[2])
    assert got == asked
    # the next pass was not ridden: nothing to read, and a token not the row's greedy: none
    backend.evaluate(Block.chain([greedy[2]]))
    backend.commit([0])
    assert backend.ridden_guess(greedy[3]) is None
    assert backend.ride_draft_head(head)
    backend.evaluate(Block.chain([greedy[3]]))
    backend.commit([0])
    assert backend.ridden_guess((greedy[3] + 7) % backend.vocab_size) is None
    backend.rollback(0)


def test_the_default_reads_its_guesses_from_the_passes_and_stays_greedy(int4_backend):
    """Where the head is asked, the guess comes from the pass it rode (not asked after it), and
    the answer is greedy's."""
    backend = int4_backend
    ids = chat_prompt_ids(backend, [ChatMessage("user", STORY)])
    greedy, _ = _answer(backend, "greedy", ids)
    asked_after = []
    original = DraftHead.guess
    DraftHead.guess = lambda self, features: asked_after.append(1) or original(self, features)
    try:
        done, steps = _answer(backend, "suffix", ids, fixed_draft=1)
    finally:
        DraftHead.guess = original
    assert done.token_ids == greedy.token_ids
    taken = [s for s in steps if s.accepted and s.source == DRAFT]
    assert len(taken) >= 5
    assert len(asked_after) <= 3, len(asked_after)  # the first asks only, then the passes


@pytest.mark.parametrize(
    "spoil",
    [
        lambda path: path.write_bytes(b"not a numpy archive"),
        lambda path: np.savez(path, **{**_arrays(), "shortlist": np.arange(50, 74)}),
        lambda path: np.savez(path, **{k: v for k, v in _arrays().items() if k != "b_bias"}),
        lambda path: np.savez(path, **{**_arrays(), "b_weight": np.full((32, 32), np.nan)}),
    ],
    ids=["garbage", "tokens past the vocabulary", "a part missing", "not numbers"],
)
def test_a_file_that_is_no_head_is_ignored_in_one_line(tmp_path, spoil):
    path = tmp_path / "head.npz"
    spoil(path)
    head, problem = load_head(path, 64)
    assert head is None
    assert problem.startswith(f"draft head {path}: not usable") and "\n" not in problem
    assert load_head(tmp_path / "none.npz", 64) == (None, None)
