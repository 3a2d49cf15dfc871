"""Speculative decoders are exact: greedy-family output equals plain greedy token for token, and
sampled output follows the target's distribution (tested statistically)."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest
import torch

from specchat.backends.base import Block, ChatMessage
from specchat.decoding.draft_model import DraftModelDecoder
from specchat.decoding.registry import DECODERS
from specchat.decoding.sampling import SamplingParams
from specchat.decoding.sources import NO_SOURCES
from specchat.engine.events import DoneEvent
from specchat.engine.local import Engine
from specchat.engine.protocol import GenerationRequest
from specchat.prompting import chat_prompt_ids
from tests.tiny_models import tiny_backend

# "draft-tree": the draft decoder drafting token trees (tree_width 3; flat costs: every
# alternative joins)
SPECULATIVE = ["pld", "lookahead", "draft", "draft-tree", "suffix"]


def _done(engine: Engine, ids, max_tokens: int, sampling=None) -> DoneEvent:
    request = GenerationRequest(tuple(ids), max_tokens, (), sampling or SamplingParams())
    return list(engine.generate(request))[-1]


@pytest.fixture(scope="module")
def tiny_pair():
    """A confident tiny target, and a draft that is the target with its weights perturbed."""
    target = tiny_backend("tiny-target", peaked=25.0)
    draft = tiny_backend("tiny-draft", peaked=25.0, noise=0.02)
    return target, draft


def _decoder(name, draft_backend=None, **values_in):
    if name.startswith("draft"):
        # a model built in the test, not loaded from a spec
        # the draft model alone, drafting from the answer's first token (answers here are short)
        values = {"k": 3, "copies": False, **({"tree_width": 3} if name == "draft-tree" else {})}
        decoder = DraftModelDecoder(
            draft_model=draft_backend, **DraftModelDecoder.validate({**values, **values_in})
        )
        decoder.drafter.first_step_alone = False
        return decoder
    return DECODERS[name].create(**values_in)


TINY_PROMPTS = [
    [5, 6, 7, 8, 5, 6, 7, 8, 5, 6],
    list(range(20, 60)),
    [3, 9, 3, 9, 3, 9, 40, 41, 42, 3, 9],
]


@pytest.mark.parametrize("name", SPECULATIVE)
def test_greedy_family_equals_greedy_on_a_float64_model(tiny_pair, name):
    target, draft = tiny_pair
    drafted = accepted = 0
    for prompt in TINY_PROMPTS:
        target.rollback(0)
        reference = _done(Engine(target, DECODERS["greedy"].create()), prompt, 60)
        target.rollback(0)
        done = _done(Engine(target, _ForceDraft(_decoder(name, draft))), prompt, 60)
        assert done.token_ids == reference.token_ids
        drafted += done.stats.drafted
        accepted += done.stats.accepted
    assert accepted > 0, "the test must exercise accepted drafts"


def test_random_switch_schedules_equal_greedy(tiny_pair):
    target, draft = tiny_pair
    names = ["greedy", "pld", "lookahead", "draft", "suffix", "beam"]
    rng = random.Random(1)
    accepted = 0
    for prompt in TINY_PROMPTS:
        target.rollback(0)
        reference = _done(Engine(target, DECODERS["greedy"].create()), prompt, 50).token_ids
        for _ in range(3):
            target.rollback(0)
            engine = Engine(target, _ForceDraft(_decoder("pld", draft)))
            events = engine.generate(GenerationRequest(tuple(prompt), 50))
            for event in events:
                if isinstance(event, DoneEvent):
                    assert event.token_ids == reference
                    accepted += event.stats.accepted
                elif rng.random() < 0.4:
                    # beam search is not greedy: it only runs for one step here and is replaced
                    name = rng.choice(names[:5])
                    engine.switch(_ForceDraft(_decoder(name, draft)))
    assert accepted > 0, "the test must exercise accepted drafts"


# -- the bundled model on llama.cpp (bitwise-invariant build) and on the int4 runtime: blocks equal
# one-token passes bit for bit, so identical ids ----------------------------------------------------

LLAMA_PROMPTS = [
    "Summarize: The quick brown fox jumps over the lazy dog. The dog was not amused by the fox, "
    "and the fox ran away into the forest where it met another fox.",
    "Repeat this list exactly: apples, pears, plums, cherries, apples, pears, plums, cherries.",
    "Write a Python function that returns the sum of a list of numbers.",
]


@pytest.fixture(params=["llama", "int4"])
def exact_backend(request):
    backend = request.getfixturevalue(
        "llama_backend" if request.param == "llama" else "int4_backend"
    )
    backend.rollback(0)
    yield backend
    backend.rollback(0)


@pytest.mark.parametrize("name", ["pld", "lookahead", "suffix"])
@pytest.mark.slow
def test_greedy_family_equals_greedy_on_exact_runtimes(exact_backend, name):
    accepted = _accepted_equal_to_greedy(exact_backend, DECODERS[name].create)
    assert accepted > 0, "the test must exercise accepted drafts"


@pytest.mark.slow
def test_greedy_tree_drafting_equals_greedy_on_exact_runtimes(exact_backend, request):
    """Token trees from a draft model (the bundled model on the other runtime), every
    alternative joining the pass: bitwise greedy."""
    other = "int4_backend" if exact_backend.name == "llama" else "llama_backend"
    draft = request.getfixturevalue(other)
    accepted = _accepted_equal_to_greedy(
        exact_backend, lambda: _decoder("draft-tree", draft, tree_width=4, fixed_draft=6)
    )
    draft.rollback(0)
    assert accepted > 0, "the test must exercise accepted drafts"


def _accepted_equal_to_greedy(backend, make_decoder) -> int:
    """Each of LLAMA_PROMPTS answered by a fresh decoder (forced to draft whatever the measured
    costs say, so verification is exercised) and by greedy: the answers are asserted equal; the
    drafted tokens accepted in all."""
    accepted = 0
    for text in LLAMA_PROMPTS:
        ids = chat_prompt_ids(backend, [ChatMessage("user", text)])
        backend.rollback(0)
        reference = _done(Engine(backend, DECODERS["greedy"].create()), ids, 96)
        backend.rollback(0)
        done = _done(Engine(backend, _ForceDraft(make_decoder())), ids, 96)
        assert done.token_ids == reference.token_ids, text
        accepted += done.stats.accepted
    return accepted


class _ForceDraft:
    """Wraps a decoder so its target reports flat block costs: it then always drafts."""

    def __init__(self, inner):
        self.inner, self.name, self.values = inner, inner.name, inner.values

    def reset(self, context, sources=NO_SOURCES):
        self.inner.reset(context, sources)

    def finish(self):
        self.inner.finish()

    def prepare(self, target):
        self.inner.prepare(_FlatCost(target))

    def step(self, target, context, sampler, room):
        return self.inner.step(_FlatCost(target), context, sampler, room)


class _FlatCost:
    def __init__(self, backend):
        self._backend = backend

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def block_cost(self, k):
        return 1.0


# -- sampling keeps the target's distribution ---------------------------------------------------

VOCAB = 8


@pytest.fixture(scope="module")
def small_vocab_pair():
    target = tiny_backend("tiny8-target", vocab_size=VOCAB, peaked=2.0, seed=3)
    draft = tiny_backend("tiny8-draft", vocab_size=VOCAB, peaked=2.0, seed=3, noise=0.3)
    return target, draft


def _exact_distribution(backend, prompt, length, params):
    """P(generated sequence) by enumeration; an EOS ends a sequence early."""
    from specchat.decoding.sampling import logits_to_probs

    result = {}

    def walk(prefix, prob):
        if len(prefix) == length or (prefix and prefix[-1] in backend.eos_ids):
            result[tuple(prefix)] = prob
            return
        backend.rollback(0)
        ids = prompt + prefix
        backend.prefill(ids[:-1])
        row = backend.evaluate(Block.chain([ids[-1]]))[0]
        probs = logits_to_probs(row, params)
        for token in range(VOCAB):
            if probs[token] > 0:
                walk(prefix + [token], prob * probs[token])

    walk([], 1.0)
    backend.rollback(0)
    return result


def _chi_square_passes(samples: Counter, expected: dict, n: int) -> tuple[bool, float, float]:
    """Pearson's test, bins with < 5 expected merged; threshold at p = 0.001 (Wilson–Hilferty)."""
    stat, df = 0.0, -1
    small_obs = small_exp = 0.0
    for outcome, p in expected.items():
        e = p * n
        if e < 5:
            small_obs += samples.get(outcome, 0)
            small_exp += e
            continue
        stat += (samples.get(outcome, 0) - e) ** 2 / e
        df += 1
    if small_exp > 0:
        stat += (small_obs - small_exp) ** 2 / max(small_exp, 1e-9)
        df += 1
    z = 3.09
    threshold = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    return stat < threshold, stat, threshold


SAMPLE_PROMPT = [2, 3, 4, 2, 3, 4, 2, 3]
N_SAMPLES = 1500
LENGTH = 2


def _draw(target, decoder_factory, params, n):
    counts = Counter()
    drafted = 0
    engine = Engine(target, decoder_factory())
    for seed in range(n):
        done = _done(
            engine,
            SAMPLE_PROMPT,
            LENGTH,
            SamplingParams(params.temperature, params.top_k, params.top_p, seed),
        )
        outcome = list(done.token_ids)
        if done.finish_reason == "eos":
            outcome.append(next(iter(target.eos_ids)))
        counts[tuple(outcome)] += 1
        drafted += done.stats.drafted
    return counts, drafted


@pytest.mark.parametrize("name", ["sample", "pld", "lookahead", "draft", "draft-tree", "suffix"])
@pytest.mark.parametrize("params", [SamplingParams(1.0), SamplingParams(0.8, top_k=5, top_p=0.9)])
@pytest.mark.slow
def test_sampling_keeps_the_target_distribution(small_vocab_pair, name, params):
    target, draft = small_vocab_pair
    expected = _exact_distribution(target, SAMPLE_PROMPT, LENGTH, params)
    assert abs(sum(expected.values()) - 1) < 1e-9

    def factory():
        if name == "sample":
            return DECODERS["sample"].create()
        return _ForceDraft(_decoder(name, draft))

    counts, drafted = _draw(target, factory, params, N_SAMPLES)
    if name != "sample":
        assert drafted > 0, "drafts must be verified for the test to mean anything"
    ok, stat, threshold = _chi_square_passes(counts, expected, N_SAMPLES)
    assert ok, f"chi-square {stat:.1f} over the p=0.001 threshold {threshold:.1f}"


def test_the_distribution_test_detects_a_wrong_sampler(small_vocab_pair):
    """Power check: samples at another temperature must fail the same test."""
    target, _ = small_vocab_pair
    expected = _exact_distribution(target, SAMPLE_PROMPT, LENGTH, SamplingParams(1.0))
    counts, _ = _draw(target, lambda: DECODERS["sample"].create(), SamplingParams(0.6), N_SAMPLES)
    ok, _, _ = _chi_square_passes(counts, expected, N_SAMPLES)
    assert not ok


@pytest.mark.slow
def test_the_distribution_test_detects_a_wrong_tree_rule(small_vocab_pair, monkeypatch):
    """Power check for trees: a multi-branch rule that keeps a rejected child in q (so the next
    child, drawn without it, is judged against the wrong q) must fail the same test."""
    from specchat.decoding import sampling

    target, draft = small_vocab_pair
    monkeypatch.setattr(sampling, "without", lambda q, token: q)
    params = SamplingParams(1.0)
    expected = _exact_distribution(target, SAMPLE_PROMPT, LENGTH, params)
    counts, drafted = _draw(
        target, lambda: _ForceDraft(_decoder("draft-tree", draft)), params, N_SAMPLES
    )
    assert drafted > 0
    ok, _, _ = _chi_square_passes(counts, expected, N_SAMPLES)
    assert not ok


del np, torch


def test_divergence_reports_index_and_greedy_margin(tiny_pair):
    from specchat.evaluation.race import find_divergence

    target, _ = tiny_pair
    prompt = TINY_PROMPTS[0]
    target.rollback(0)
    reference = _done(Engine(target, DECODERS["greedy"].create()), prompt, 20).token_ids
    assert find_divergence(target, prompt, reference, reference) is None
    changed = reference[:3] + ((reference[3] + 1) % 128,) + reference[4:]
    found = find_divergence(target, prompt, reference, changed)
    assert found.index == 3 and found.margin > 0
    # greedy stopped where the other went on: no greedy choice there to judge
    longer = find_divergence(target, prompt, reference[:5], reference)
    assert longer.index == 5 and longer.margin is None


CODE_REWRITE = (
    "Here is a Python function: def area(r): return 3.14159 * r * r — Rewrite it with a docstring "
    "and type hints."
)


def test_pld_drafts_on_a_code_rewrite_with_its_own_policy(fresh_llama, tmp_path, monkeypatch):
    """No forcing: the learning policy, from its priors, must try the copy the answer makes of
    the function, and stay exactly greedy."""
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path))  # no policy learned elsewhere
    ids = chat_prompt_ids(fresh_llama, [ChatMessage("user", CODE_REWRITE)])
    reference = _done(Engine(fresh_llama, DECODERS["greedy"].create()), ids, 96)
    fresh_llama.rollback(0)
    done = _done(Engine(fresh_llama, DECODERS["pld"].create()), ids, 96)
    assert done.token_ids == reference.token_ids
    assert done.stats.accepted >= 10, done.stats
