"""The llama.cpp backend: exact greedy vs llama-cpp-python's own, tree blocks, commit/rollback."""

from __future__ import annotations

import numpy as np
import pytest

from specchat.backends.base import Block, ChatMessage
from specchat.decoding.engine import Engine, GenerationRequest
from specchat.decoding.events import DoneEvent
from specchat.decoding.plain import GreedyDecoder
from specchat.prompting import chat_prompt_ids, raw_prompt_ids

PROMPTS = [
    ("chat", "Write a haiku about the sea."),
    ("chat", "Explain in two sentences why the sky is blue."),
    ("raw", "The capital of France is"),
    ("raw", "def fibonacci(n):\n    "),
]


def _ids(backend, kind, text):
    if kind == "chat":
        return chat_prompt_ids(backend, [ChatMessage("user", text)])
    return raw_prompt_ids(backend, text)


def _run(engine, ids, max_tokens):
    events = list(engine.generate(GenerationRequest(tuple(ids), max_tokens)))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    return done


@pytest.fixture(scope="module")
def library_llama(bundled_gguf):
    from llama_cpp import Llama

    return Llama(str(bundled_gguf), n_ctx=2048, flash_attn=False, n_threads=2, verbose=False)


@pytest.mark.parametrize("kind,text", PROMPTS)
def test_greedy_equals_llama_cpp_python_generate(fresh_llama, library_llama, kind, text):
    ids = _ids(fresh_llama, kind, text)
    done = _run(Engine(fresh_llama, GreedyDecoder()), ids, 48)
    library_llama.reset()
    expected = []
    for token in library_llama.generate(ids, top_k=1, temp=0.0, reset=True):
        if token in fresh_llama.eos_ids or len(expected) == 48:
            break
        expected.append(token)
    assert list(done.token_ids) == expected
    assert done.finish_reason in ("eos", "max_tokens")


def _prefix(backend):
    ids = chat_prompt_ids(backend, [ChatMessage("user", "List three fruits.")])
    backend.rollback(0)
    backend.prefill(ids[:-1])
    return ids


def test_block_logits_do_not_depend_on_block_size(fresh_llama):
    """The build must be batch-invariant (GGML_LLAMAFILE=OFF, flash attention off), or
    speculative decoding drifts from greedy at near-ties."""
    ids = _prefix(fresh_llama)
    n = fresh_llama.n_committed
    chain = [ids[-1], 1046, 314, 253, 1345, 28, 469, 3086, 30, 198, 506, 2269]
    block_logits = fresh_llama.evaluate(Block.chain(chain))
    fresh_llama.rollback(n)
    for i, token in enumerate(chain):
        one = fresh_llama.evaluate(Block.chain([token]))
        fresh_llama.commit([0])
        assert np.array_equal(one[0], block_logits[i]), f"position {i} differs"


def test_tree_block_logits_equal_each_branch_alone(fresh_llama):
    ids = _prefix(fresh_llama)
    n = fresh_llama.n_committed
    # root -> a -> b ; root -> c -> d -> e ; a second root -> f
    tree = Block((ids[-1], 100, 200, 300, 400, 500, 600), (-1, 0, 1, 0, 3, 4, -1))
    tree_logits = fresh_llama.evaluate(tree)
    differs_from_flat = False
    for leaf in tree.leaves:
        path = tree.path_to(leaf)
        fresh_llama.rollback(n)
        alone = fresh_llama.evaluate(Block.chain([tree.tokens[i] for i in path]))
        for depth, node in enumerate(path):
            assert np.array_equal(alone[depth], tree_logits[node]), (leaf, node)
    # A plain causal pass over the flattened block sees other branches: different logits.
    fresh_llama.rollback(n)
    flat = fresh_llama.evaluate(Block.chain(list(tree.tokens)))
    differs_from_flat = not np.allclose(flat[3], tree_logits[3], atol=1e-3)
    assert differs_from_flat


def test_commit_of_a_side_branch_then_continue_equals_prefill(fresh_llama):
    ids = _prefix(fresh_llama)
    n = fresh_llama.n_committed
    tree = Block((ids[-1], 100, 200, 300, 400), (-1, 0, 1, 0, 3))
    fresh_llama.evaluate(tree)
    fresh_llama.commit([0, 3, 4])
    assert fresh_llama.n_committed == n + 3
    after_commit = fresh_llama.evaluate(Block.chain([777, 778]))
    fresh_llama.rollback(n)
    fresh_llama.prefill([ids[-1], 300, 400])
    after_prefill = fresh_llama.evaluate(Block.chain([777, 778]))
    assert np.array_equal(after_commit, after_prefill)
    # and a chain evaluated next sees the same prefix in every stream
    fresh_llama.rollback(n + 3)
    tree2 = Block((777, 5, 6, 7), (-1, 0, 0, 2))
    logits2 = fresh_llama.evaluate(tree2)
    assert np.array_equal(logits2[0], after_prefill[0])


def test_rollback_restores_earlier_logits(fresh_llama):
    ids = _prefix(fresh_llama)
    n = fresh_llama.n_committed
    before = fresh_llama.evaluate(Block.chain([ids[-1]]))
    fresh_llama.commit([0])
    fresh_llama.prefill([10, 20, 30])
    fresh_llama.rollback(n)
    again = fresh_llama.evaluate(Block.chain([ids[-1]]))
    assert np.array_equal(before, again)


@pytest.mark.parametrize(
    "text", ["plain ascii text", "café, naïve, Ωmega", "東京は日本の首都です", "emoji 🎉👩‍👩‍👧 ok"]
)
def test_token_bytes_round_trip(llama_backend, text):
    ids = llama_backend.tokenize(text)
    assert b"".join(llama_backend.token_bytes(t) for t in ids) == text.encode()
