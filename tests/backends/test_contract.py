"""What every backend promises the decoders (specchat/backends/base.py), checked the same way on
each: llama.cpp, transformers and the int4 runtime with the bundled SmolLM2 (at the CPU's own
instruction-set level and at each one below it), and the small numpy backend.

Where a backend computes the same logits two ways (a block or one token at a time, a tree or its
branches alone, a commit or a fresh prefill), they agree bitwise on llama.cpp (the batch-invariant
build: GGML_LLAMAFILE=OFF, flash attention off), on the int4 runtime and on the numpy backend, and
within float32 rounding on transformers. Checks only one backend can make stay in its own test file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from specchat import cpu
from specchat.backends import block_cost
from specchat.backends.base import Backend, Block, ChatMessage, sync_cache
from specchat.backends.block_cost import BlockCostTable
from specchat.backends.registry import TRANSFORMERS
from specchat.decoding.plain import GreedyDecoder
from specchat.engine.events import DoneEvent, StepEvent
from specchat.engine.local import Engine
from specchat.engine.protocol import GenerationRequest
from specchat.errors import SpecchatError
from specchat.prompting import chat_prompt_ids


@dataclass
class Subject:
    """A backend under test, how closely it reproduces its own logits, and the same model with a
    small context window (the caller closes it)."""

    backend: Backend
    atol: float  # 0: bitwise
    small_context: Callable[[int], Backend]
    trained: bool = True  # False: random weights, which never choose to stop


def _small_llama(bundled_gguf) -> Callable[[int], Backend]:
    def make(n_ctx: int) -> Backend:
        from specchat.backends.llama import LlamaBackend

        return LlamaBackend(bundled_gguf, n_ctx=n_ctx, max_branches=1, threads=1)

    return make


def _small_hf(backend) -> Callable[[int], Backend]:
    def make(n_ctx: int) -> Backend:
        from specchat.backends.hf.backend import HFBackend

        return HFBackend(
            backend.model, backend.tokenizer, model_name="small", device="cpu", n_ctx=n_ctx
        )

    return make


def _small_int4(path, level: str | None = None) -> Callable[[int], Backend]:
    def make(n_ctx: int) -> Backend:
        from specchat.backends.int4.backend import Int4Backend

        return Int4Backend(path, n_ctx=n_ctx, threads=1, level=level)

    return make


def _small_numpy(backend) -> Callable[[int], Backend]:
    def make(n_ctx: int) -> Backend:
        from tests.numpy_backend import NumpyBackend

        return NumpyBackend(backend.model, n_ctx=n_ctx)

    return make


# the int4 runtime also at each instruction-set level below the CPU's own (SPECCHAT_CPU's caps),
# and on a random-weight file of each other family it runs (conftest.FAMILY_SHAPES)
LOWER_LEVELS = cpu.levels_here()[:-1]
FAMILIES = ("smollm3", "qwen2", "qwen3", "phi3", "gemma2", "gemma3")


@pytest.fixture(
    params=[
        "llama", "hf", "int4", *(f"int4@{level}" for level in LOWER_LEVELS),
        *(f"int4:{family}" for family in FAMILIES), "numpy",
    ]
)  # fmt: skip
def subject(request: pytest.FixtureRequest) -> Iterator[Subject]:
    if request.param == "llama":
        backend = request.getfixturevalue("llama_backend")
        made = Subject(backend, 0.0, _small_llama(request.getfixturevalue("bundled_gguf")))
    elif request.param == "hf":
        backend = request.getfixturevalue("hf_bundled")
        made = Subject(backend, 1e-4, _small_hf(backend))
    elif request.param == "int4":
        backend = request.getfixturevalue("int4_backend")
        made = Subject(backend, 0.0, _small_int4(request.getfixturevalue("bundled_gguf")))
    elif request.param.startswith("int4:"):
        path = request.getfixturevalue("family_gguf")(request.param.removeprefix("int4:"))
        backend = _small_int4(path)(2048)
        request.addfinalizer(backend.close)
        made = Subject(backend, 0.0, _small_int4(path), trained=False)
    elif request.param.startswith("int4@"):
        level = request.param.removeprefix("int4@")
        backend = request.getfixturevalue("int4_at_level")(level)
        made = Subject(backend, 0.0, _small_int4(request.getfixturevalue("bundled_gguf"), level))
    else:
        backend = request.getfixturevalue("numpy_backend")
        made = Subject(backend, 0.0, _small_numpy(backend))
    backend.rollback(0)
    yield made
    backend.rollback(0)


def assert_same(actual: np.ndarray, expected: np.ndarray, atol: float, what: object = "") -> None:
    if atol == 0:
        assert np.array_equal(actual, expected), what
    else:
        np.testing.assert_allclose(actual, expected, rtol=0, atol=atol, err_msg=str(what))


def prefix_ids(backend: Backend, text: str = "List three fruits.") -> list[int]:
    """A chat prompt with all but its last token committed, as the engine leaves it."""
    ids = chat_prompt_ids(backend, [ChatMessage("user", text)])
    backend.rollback(0)
    backend.prefill(ids[:-1])
    return ids


def words(backend: Backend, text: str, count: int) -> list[int]:
    ids = backend.tokenize(text)
    assert len(ids) >= count
    return ids[:count]


# Trees: root -> a -> b ; root -> c -> d -> e ; a second root -> f
SIDE_BRANCHES = (-1, 0, 1, 0, 3, 4, -1)
# Root with branches of lengths 3, 2 and 1 (one forking off mid-branch), plus a second root with a
# child: 0-1-2-3, 0-4-5, 0-1-6, 7-8
FORKS = (-1, 0, 1, 2, 0, 4, 1, -1, 7)


def tree(pending: int, tokens: list[int], parents: tuple[int, ...]) -> Block:
    return Block((pending, *tokens[: len(parents) - 1]), parents)


# -- what it declares ------------------------------------------------------------------------------


def test_declares_what_decoders_read(subject: Subject) -> None:
    backend = subject.backend
    assert isinstance(backend, Backend)
    assert backend.name and backend.device and backend.model_name
    assert backend.vocab_size > 0 and backend.n_ctx > 0
    assert isinstance(backend.eos_ids, frozenset) and backend.eos_ids
    assert all(0 <= token < backend.vocab_size for token in backend.eos_ids)
    assert backend.n_committed == 0
    ids = backend.tokenize("Hello there")
    logits = backend.evaluate(Block.chain(ids))
    assert logits.dtype == np.float32 and logits.shape == (len(ids), backend.vocab_size)


# -- tokenizer ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "plain ascii text",
        "café, naïve, Ωmega",
        "東京は日本の首都です",
        "emoji 🎉👩‍👩‍👧 ok",
        "Hello, world! Numbers 12345 and\ttabs\nnew lines.",
        "Café crème brûlée, naïve façade, Ærøskøbing, Straße.",
        "你好，世界。日本語のテキストと한국어.",
        "Emoji: 😀🎉👍🏽 and flags 🇫🇷, zero-width joiner 👩‍💻.",
        "  leading spaces, <|im_start|> as plain text",
    ],
)
def test_token_bytes_round_trip(subject: Subject, text: str) -> None:
    backend = subject.backend
    ids = backend.tokenize(text)
    assert b"".join(backend.token_bytes(t) for t in ids) == text.encode("utf-8")


def test_chat_prompt_has_control_tokens_that_round_trip(subject: Subject) -> None:
    backend = subject.backend
    messages = [ChatMessage("system", "Be brief."), ChatMessage("user", "Name a colour.")]
    prompt = backend.chat_prompt(messages)
    assert "Be brief." in prompt and prompt.rindex("Name a colour.") > prompt.index("Be brief.")
    special = backend.tokenize(prompt, special=True)
    assert len(special) < len(backend.tokenize(prompt))  # control tokens are one token each
    assert b"".join(backend.token_bytes(t) for t in special) == prompt.encode("utf-8")
    assert chat_prompt_ids(backend, messages) == special


# -- blocks -----------------------------------------------------------------------------------


def test_chain_logits_equal_one_token_passes(subject: Subject) -> None:
    """On llama.cpp this needs the batch-invariant build (GGML_LLAMAFILE=OFF, flash attention
    off), or speculative decoding drifts from greedy at near-ties."""
    backend = subject.backend
    ids = prefix_ids(backend)
    n = backend.n_committed
    chain = [
        ids[-1],
        *words(backend, " Apples, pears and plums are three fruits that people like to eat.", 11),
    ]
    block_logits = backend.evaluate(Block.chain(chain))
    assert block_logits.shape == (len(chain), backend.vocab_size)
    assert block_logits.dtype == np.float32
    backend.rollback(n)
    for i, token in enumerate(chain):
        one = backend.evaluate(Block.chain([token]))
        backend.commit([0])
        assert_same(one[0], block_logits[i], subject.atol, f"position {i} differs")


@pytest.mark.parametrize("parents", [SIDE_BRANCHES, FORKS], ids=["side-branches", "forks"])
def test_tree_logits_equal_each_branch_alone(subject: Subject, parents) -> None:
    backend = subject.backend
    ids = prefix_ids(backend, "The quick brown fox jumps over the lazy dog. Then the fox")
    n = backend.n_committed
    block = tree(
        ids[-1], words(backend, " ran away into the dark forest quickly and slept", 8), parents
    )
    tree_logits = backend.evaluate(block)
    assert tree_logits.shape == (len(block), backend.vocab_size)
    checked = set()
    for leaf in block.leaves:
        path = block.path_to(leaf)
        backend.rollback(n)
        alone = backend.evaluate(Block.chain([block.tokens[i] for i in path]))
        for depth, node in enumerate(path):
            assert_same(tree_logits[node], alone[depth], subject.atol, (leaf, node))
        checked.update(path)
    assert checked == set(range(len(block)))
    # A plain causal pass over the flattened block sees other branches: the tokens off its first
    # chain (starting with the root's second child, which would see its sibling) get other logits.
    backend.rollback(n)
    flat = backend.evaluate(Block.chain(list(block.tokens)))
    off_chain = [node for node in range(len(block)) if block.path_to(node) != list(range(node + 1))]
    for node in sorted(set(range(len(block))) - set(off_chain)):
        assert_same(flat[node], tree_logits[node], subject.atol, node)
    differs = max(1e-3, 100 * subject.atol)
    assert not np.allclose(flat[off_chain[0]], tree_logits[off_chain[0]], atol=differs)


@pytest.mark.parametrize(
    "parents,node",
    [(SIDE_BRANCHES, 4), (FORKS, 2), (FORKS, 5), (FORKS, 6), (FORKS, 8)],
    ids=["side-branch", "first-branch-inner", "second-branch", "fork", "second-root"],
)
def test_commit_of_a_branch_then_continue_equals_prefill(subject: Subject, parents, node) -> None:
    backend = subject.backend
    ids = prefix_ids(backend, "Once upon a time, in a small village by the sea,")
    n = backend.n_committed
    block = tree(
        ids[-1], words(backend, " there lived an old fisherman who had three sons", 8), parents
    )
    path = block.path_to(node)
    follow = words(backend, " and a boat", 2)
    backend.evaluate(block)
    backend.commit(path)
    assert backend.n_committed == n + len(path)
    after_commit = backend.evaluate(Block.chain(follow))
    backend.rollback(n)
    backend.prefill([block.tokens[i] for i in path])
    after_prefill = backend.evaluate(Block.chain(follow))
    assert_same(after_commit, after_prefill, subject.atol)
    # and a tree evaluated next sees the same prefix in every branch
    backend.rollback(n + len(path))
    next_tree = backend.evaluate(Block((follow[0], 5, 6, 7), (-1, 0, 0, 2)))
    assert_same(next_tree[0], after_prefill[0], subject.atol)


def test_a_tree_grown_a_pass_at_a_time_is_the_tree_evaluated_whole(subject: Subject) -> None:
    """`evaluate_more` (a beam's tree, a row a beam a step, each new row's parent a row of an
    earlier pass): where the runtime holds the tree, the rows each pass adds get the logits the
    whole tree gives them, a path of the whole grown tree commits as a prefill would, and a tree
    that is not the one held is refused (None); where it holds none, it says so (None)."""
    backend = subject.backend
    ids = prefix_ids(backend, "Once upon a time, in a small village by the sea,")
    n = backend.n_committed
    words_here = words(backend, " there lived an old fisherman who had three sons", 8)
    whole = tree(ids[-1], words_here, FORKS[:7])  # 0-1-2-3, 0-4-5, 0-1-6
    expected = backend.evaluate(whole)
    backend.rollback(n)
    grown = [backend.evaluate(Block(whole.tokens[:3], whole.parents[:3]))]
    for start, end in ((3, 5), (5, 7)):  # rows 3 and 4 (parents 2 and 0), 5 and 6 (4 and 1)
        more = backend.evaluate_more(Block(whole.tokens[:end], whole.parents[:end]), start)
        if more is None:
            assert start == 3 and backend.name in (TRANSFORMERS, "numpy"), backend.name
            return
        assert more.shape == (end - start, backend.vocab_size)
        grown.append(more)
    assert_same(np.concatenate(grown), expected, subject.atol)
    elsewhere = Block((*whole.tokens[:6], 17), (*whole.parents[:6], 0))
    assert backend.evaluate_more(elsewhere, 6) is None  # not the tree it holds: 7 rows held
    path = whole.path_to(6)  # 0-1-6: a fork off the first branch, its last row the last pass's
    follow = words(backend, " and a boat", 2)
    backend.commit(path)
    after_commit = backend.evaluate(Block.chain(follow))
    backend.rollback(n)
    backend.prefill([whole.tokens[i] for i in path])
    assert_same(after_commit, backend.evaluate(Block.chain(follow)), subject.atol)


@pytest.mark.parametrize("accepted", [0, 2, 5])
def test_rejected_drafts_leave_the_cache_as_a_prefill_would(subject: Subject, accepted) -> None:
    """A speculative step: the pending token and five drafts in one chain, of which `accepted`
    are kept; the rest must be gone from the cache."""
    backend = subject.backend
    ids = prefix_ids(backend)
    n = backend.n_committed
    chain = [ids[-1], *words(backend, " Apples, pears and plums.", 5)]
    backend.evaluate(Block.chain(chain))
    backend.commit(list(range(accepted + 1)))
    assert backend.n_committed == n + accepted + 1
    follow = words(backend, " Bananas too", 2)
    after_commit = backend.evaluate(Block.chain(follow))
    backend.rollback(n)
    backend.prefill(chain[: accepted + 1])
    assert_same(after_commit, backend.evaluate(Block.chain(follow)), subject.atol)


def test_rollback_restores_earlier_logits(subject: Subject) -> None:
    backend = subject.backend
    ids = prefix_ids(backend)
    n = backend.n_committed
    before = backend.evaluate(Block.chain([ids[-1]]))
    backend.commit([0])
    backend.prefill(words(backend, " Apples, pears and plums.", 3))
    backend.rollback(n)
    again = backend.evaluate(Block.chain([ids[-1]]))
    assert_same(before, again, subject.atol)


def test_an_uncommitted_block_is_dropped(subject: Subject) -> None:
    backend = subject.backend
    ids = prefix_ids(backend)
    n = backend.n_committed
    follow = [ids[-1], *words(backend, " Apples", 1)]
    reference = backend.evaluate(Block.chain(follow))
    backend.evaluate(tree(ids[-1], words(backend, " Pears, plums and cherries.", 8), FORKS))
    assert_same(backend.evaluate(Block.chain(follow)), reference, subject.atol)
    backend.evaluate(Block.chain(words(backend, " Bananas too", 2)))
    backend.prefill([])  # drops the pending block too
    assert backend.n_committed == n
    assert_same(backend.evaluate(Block.chain(follow)), reference, subject.atol)


def test_commit_rejects_a_path_that_is_no_chain(subject: Subject) -> None:
    backend = subject.backend
    ids = prefix_ids(backend)
    backend.evaluate(tree(ids[-1], words(backend, " Pears, plums and cherries.", 8), FORKS))
    with pytest.raises(ValueError):
        backend.commit([0, 4, 6])
    backend.evaluate(tree(ids[-1], words(backend, " Pears, plums and cherries.", 8), FORKS))
    with pytest.raises(ValueError):
        backend.commit([1, 2])


def test_sync_cache_keeps_the_common_prefix(subject: Subject) -> None:
    backend = subject.backend
    first = chat_prompt_ids(backend, [ChatMessage("user", "Name a colour.")])
    second = chat_prompt_ids(backend, [ChatMessage("user", "Name a fruit.")])
    backend.prefill(first)
    sync_cache(backend, first, second)
    assert backend.n_committed == len(second)
    synced = backend.evaluate(Block.chain(words(backend, " Apples", 1)))
    backend.rollback(0)
    backend.prefill(second)
    assert_same(synced, backend.evaluate(Block.chain(words(backend, " Apples", 1))), subject.atol)


def test_the_context_window_bounds_prefill_and_blocks(subject: Subject) -> None:
    small = subject.small_context(64)
    try:
        assert small.n_ctx == 64
        filler = (small.tokenize(" one two three four five six seven eight") * 64)[:60]
        small.prefill(filler)
        small.evaluate(Block.chain(filler[:4]))  # just fits
        small.evaluate(Block((1, 2, 3, 4, 5, 6), (-1, 0, 1, 2, 0, -1)))  # depth 4: fits too
        with pytest.raises(SpecchatError):
            small.evaluate(Block.chain(filler[:5]))
        small.rollback(60)
        with pytest.raises(SpecchatError):
            small.prefill(filler[:5])
    finally:
        small.close()


# -- decoding on it ---------------------------------------------------------------------------


def pending_token_greedy(backend: Backend, prompt: list[int], max_tokens: int) -> list[int]:
    """Greedy as the decoders run it: the context's last token is not yet cached."""
    backend.rollback(0)
    backend.prefill(prompt[:-1])
    context = list(prompt)
    for _ in range(max_tokens):
        logits = backend.evaluate(Block.chain([context[-1]]))
        token = int(np.argmax(logits[0]))
        backend.commit([0])
        if token in backend.eos_ids:
            break
        context.append(token)
    return context[len(prompt) :]


def test_engine_greedy_is_prefill_then_one_token_passes(subject: Subject) -> None:
    backend = subject.backend
    ids = chat_prompt_ids(backend, [ChatMessage("user", "Write a haiku about the sea.")])
    events = list(Engine(backend, GreedyDecoder()).generate(GenerationRequest(tuple(ids), 24)))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert list(done.token_ids) == pending_token_greedy(backend, ids, 24)


def test_one_block_verifies_greedy_own_answer(subject: Subject) -> None:
    """The ground speculation stands on: after the pending token, greedy's answer evaluated as one
    chain predicts itself at every position (within rounding: a flip needs a near-tie)."""
    backend = subject.backend
    ids = chat_prompt_ids(backend, [ChatMessage("user", "Give me three tips for sleeping well.")])
    answer = pending_token_greedy(backend, ids, 24)
    backend.rollback(0)
    backend.prefill(ids[:-1])
    logits = backend.evaluate(Block.chain([ids[-1], *answer[:-1]]))
    for i, token in enumerate(answer):
        best = int(np.argmax(logits[i]))
        if best != token:
            margin = float(logits[i][best] - logits[i][token])
            assert subject.atol and margin <= 10 * subject.atol, (i, margin)


def test_eos_ends_the_answer(subject: Subject) -> None:
    if not subject.trained:
        pytest.skip("random weights never choose to stop")
    backend = subject.backend
    # the bundled model's answer here leads its runner-up by over half a logit at every token on
    # every runtime ("Say just: yes" began on a near tie, 0.08-0.16, that rounding could tip);
    # the numpy backend's corpus holds its own question and answer
    question, answer = ("What is the capital of France? One word.", "paris")
    if backend.name == "numpy":
        question, answer = ("Say just: yes", "yes")
    ids = chat_prompt_ids(backend, [ChatMessage("user", question)])
    events = list(Engine(backend, GreedyDecoder()).generate(GenerationRequest(tuple(ids), 200)))
    done = events[-1]
    assert done.finish_reason == "eos"
    assert not set(done.token_ids) & backend.eos_ids
    steps = [e for e in events if isinstance(e, StepEvent) and not e.tail]
    assert steps[-1].tokens == ()  # the step that produced only EOS
    assert answer in done.text.lower()


@pytest.mark.measured_costs
def test_block_cost(subject: Subject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pass costs timed on this backend: more tokens never cost less, measured once and kept,
    and the context the measurement filled is given back."""
    if subject.backend.level != cpu.native_level() and subject.backend.name == "int4":
        pytest.skip("timed at the CPU's own level: the measuring is the same code at every level")
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    # kept whatever else runs beside the suite: whether a timing had its cores is judged in
    # tests/backends/test_block_cost.py (a busy table is not kept)
    monkeypatch.setattr(block_cost, "_ALONE_SHARE", 0.0)
    backend = subject.backend
    backend.prefill(backend.tokenize("Measuring the cost of a block"))
    committed = backend.n_committed
    table = BlockCostTable(backend, key="contract")
    costs = [table.cost(k) for k in (1, 2, 4, 8, 16)]
    assert costs[0] > 0 and costs == sorted(costs) and costs[-1] < 5
    assert backend.n_committed == committed
    kept = BlockCostTable.kept("contract", backend.device, backend.threads)
    assert kept is not None and kept.cost(8) == costs[3]
