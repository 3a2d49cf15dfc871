"""The llama.cpp backend: greedy equals llama-cpp-python's own generate. What every backend
promises (bitwise here: block and tree logits, commit, rollback, token bytes) is checked for all of
them in test_contract.py."""

from __future__ import annotations

import pytest

from specchat.backends.base import ChatMessage
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
