"""The llama.cpp backend: greedy equals llama-cpp-python's own generate. What every backend
promises (bitwise here: block and tree logits, commit, rollback, token bytes) is checked for all of
them in test_contract.py."""

from __future__ import annotations

import numpy as np
import pytest

from specchat.backends.base import Block, ChatMessage
from specchat.decoding.plain import GreedyDecoder
from specchat.engine.events import DoneEvent
from specchat.engine.local import Engine
from specchat.engine.protocol import GenerationRequest
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
@pytest.mark.slow
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


def test_a_tree_wider_than_a_batch_gives_each_branch_its_logits_alone(fresh_llama):
    """Three branches of 180 tokens (a beam's tree after its beams disagreed that long): 541
    rows, more than one llama_decode batch (512) takes — refused before ("a block of 516 tokens
    exceeds the batch size"), now decoded a batch at a time, each branch's rows as the branch
    evaluated alone gives them."""
    backend = fresh_llama
    ids = chat_prompt_ids(backend, [ChatMessage("user", "Write a poem about the ocean.")])
    backend.prefill(ids[:-1])
    n = backend.n_committed
    text = backend.tokenize(" The waves roll in and the waves roll out, under the moon." * 30)
    branches = [text[b : b + 180] for b in (0, 7, 13)]
    tokens, parents = [ids[-1]], [-1]
    for branch in branches:
        parents += [0, *range(len(tokens), len(tokens) + len(branch) - 1)]
        tokens += branch
    block = Block(tuple(tokens), tuple(parents))
    assert len(block) > 512
    logits = backend.evaluate(block)
    for leaf in block.leaves:
        path = block.path_to(leaf)
        backend.rollback(n)
        alone = backend.evaluate(Block.chain([block.tokens[i] for i in path]))
        np.testing.assert_array_equal(logits[path[-20:]], alone[-20:])
