"""The one speculative step on the small numpy backend: chain and tree verification, the draft-length
policy. Fast, and independent of machine speed: the numpy backend's pass costs are a model."""

from __future__ import annotations

import numpy as np
import pytest

from specchat.backends.base import Backend
from specchat.decoding.draft_model import DraftModelDecoder
from specchat.decoding.draft_policy import Plan
from specchat.decoding.plain import GreedyDecoder
from specchat.decoding.registry import DECODERS
from specchat.decoding.sampling import Sampler, SamplingParams
from specchat.decoding.sources import DRAFT
from specchat.decoding.speculative import SPECULATIVE_PARAMS, Draft, SpeculativeDecoder
from specchat.engine.events import DoneEvent, StepEvent
from specchat.engine.local import Engine
from specchat.engine.protocol import GenerationRequest
from specchat.errors import SpecchatError
from specchat.prompting import raw_prompt_ids
from tests.numpy_backend import CharNgramModel, NumpyBackend

PROMPTS = ["The cat", "Once upon a time", "Row, row", "def add(a, b):\n"]


@pytest.fixture(autouse=True)
def private_policy(tmp_path, monkeypatch):
    """The draft-length policy is kept per model on disk: each test starts from the priors."""
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path))


def generate(backend: Backend, decoder, ids: list[int], max_tokens: int = 120):
    backend.rollback(0)
    events = list(Engine(backend, decoder).generate(GenerationRequest(tuple(ids), max_tokens)))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    return done, [e for e in events if isinstance(e, StepEvent) and not e.tail]


def greedy_answer(backend: Backend, ids: list[int], max_tokens: int = 120) -> list[int]:
    return list(generate(backend, GreedyDecoder(), ids, max_tokens)[0].token_ids)


# -- drafts with known mistakes ---------------------------------------------------------------


def wrong(token: int) -> int:
    """A token that is not `token` (and no control token)."""
    return (token + 1) % 256


class KnownAnswerDrafter:
    """Drafts greedy's own answer with mistakes planted where told: the verification must accept
    exactly the drafted tokens before the first mistake on the branch the target follows.

    `branches(answer_ahead)` returns the drafts (token lists) for one step, from greedy's answer
    from here on; several drafts form a trie under the pending token. `window` adds that many
    chain nodes under the root that carry greedy's tokens but are not drafts (as lookahead's
    window is): evaluated, never accepted.
    """

    undrafted_is_plain = False  # the window is evaluated also when nothing is drafted

    def __init__(self, prompt: list[int], answer: list[int], branches, window: int = 0) -> None:
        self.prompt, self.answer, self.branches, self.window = prompt, answer, branches, window

    def prepare(self, target):
        pass

    def reset(self, context, sources=None):
        pass

    def plan(self, context, room):
        ahead = self.answer[len(context) - len(self.prompt) :]
        self._drafts = [d for d in self.branches(ahead) if d]
        return Plan(available=max((len(d) for d in self._drafts), default=0))

    def draft(self, target, context, sampler, plan, depth):
        tokens, parents = [context[-1]], [-1]
        ahead = self.answer[len(context) - len(self.prompt) :]
        for i, token in enumerate(ahead[: self.window]):
            tokens.append(token)
            parents.append(0 if i == 0 else len(tokens) - 2)
        children: dict[int, dict[int, int]] = {0: {}}
        longest = 0
        for draft in self._drafts:
            node = 0
            longest = max(longest, len(draft[:depth]))
            for token in draft[:depth]:
                if token not in children[node]:
                    tokens.append(token)
                    parents.append(node)
                    children[node][token] = len(tokens) - 1
                    children[len(tokens) - 1] = {}
                node = children[node][token]
        return Draft(tokens, parents, children, drafted=longest)

    def observe(self, draft, logits, accepted):
        pass


class KnownAnswerDecoder(SpeculativeDecoder):
    name = "known-answer"
    key = "f12"
    description = "drafts greedy's answer with planted mistakes (a test drafter)"
    params = SPECULATIVE_PARAMS

    def __init__(self, drafter: KnownAnswerDrafter, **values) -> None:
        super().__init__(**self.validate(values))
        self.drafter = drafter


def one_step(backend, prompt, answer, branches, window=0, fixed_draft=16):
    """One speculative step from the prompt, as the engine runs it: all but the last prompt
    token committed, the last one pending."""
    backend.rollback(0)
    backend.prefill(prompt[:-1])
    decoder = KnownAnswerDecoder(
        KnownAnswerDrafter(prompt, answer, branches, window), fixed_draft=fixed_draft
    )
    return decoder.step(backend, list(prompt), Sampler(SamplingParams()), room=100)


@pytest.mark.parametrize("mistake", [0, 1, 3, 5, None])
def test_a_chain_is_accepted_up_to_its_first_mistake(numpy_backend, mistake):
    prompt = raw_prompt_ids(numpy_backend, "Once upon a time")
    answer = greedy_answer(numpy_backend, prompt)

    def branches(ahead):
        draft = list(ahead[:6])
        if mistake is not None:
            draft[mistake] = wrong(draft[mistake])
        return [draft]

    step = one_step(numpy_backend, prompt, answer, branches)
    kept = 6 if mistake is None else mistake
    assert (step.drafted, step.accepted) == (6, kept)
    assert list(step.tokens) == answer[: kept + 1]  # the accepted drafts and the target's own
    # the cache holds the context and the accepted drafts; the target's new token is pending
    assert numpy_backend.committed == prompt + answer[:kept]
    assert numpy_backend.passes[-1] == 7  # one pass: the pending token and the draft


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 0, 2)])
def test_a_tree_is_accepted_along_the_branch_the_target_follows(numpy_backend, order):
    prompt = raw_prompt_ids(numpy_backend, "The dog sat")
    answer = greedy_answer(numpy_backend, prompt)

    def branches(ahead):
        drafts = [
            [wrong(ahead[0]), *ahead[1:5]],  # wrong at once
            [*ahead[:2], wrong(ahead[2]), ahead[3]],  # right for two tokens
            [*ahead[:4], wrong(ahead[4]), *ahead[5:7]],  # right for four: the one to follow
        ]
        return [drafts[i] for i in order]

    step = one_step(numpy_backend, prompt, answer, branches, window=6)
    assert (step.drafted, step.accepted) == (7, 4)
    assert list(step.tokens) == answer[:5]
    assert numpy_backend.committed == prompt + answer[:4]
    # one pass: pending + window (6) + the trie (5 + 2 shared by the other two + 2 + 5)
    assert numpy_backend.passes[-1] == 1 + 6 + 5 + 2 + 2 + 5


def test_window_nodes_are_evaluated_but_never_accepted(numpy_backend):
    """Lookahead's window carries guesses, not drafts: even when they are greedy's own tokens."""
    prompt = raw_prompt_ids(numpy_backend, "The cat")
    answer = greedy_answer(numpy_backend, prompt)
    step = one_step(numpy_backend, prompt, answer, lambda ahead: [], window=5)
    assert (step.drafted, step.accepted) == (0, 0)
    assert list(step.tokens) == answer[:1]
    assert numpy_backend.committed == prompt
    assert numpy_backend.passes[-1] == 6


@pytest.mark.parametrize("trees", [False, True])
def test_planted_mistakes_never_change_the_answer(numpy_backend, trees):
    """A whole answer of chain (or tree) steps with mistakes at pseudo-random depths."""
    rng = np.random.default_rng(5)
    prompt = raw_prompt_ids(numpy_backend, "Once upon a time")
    answer = greedy_answer(numpy_backend, prompt, 150)

    def branches(ahead):
        drafts = []
        for _ in range(3 if trees else 1):
            draft = list(ahead[: rng.integers(1, 9)])
            at = rng.integers(0, len(draft) + 2)  # sometimes no mistake at all
            if at < len(draft):
                draft[at] = wrong(draft[at])
            drafts.append(draft)
        return drafts

    decoder = KnownAnswerDecoder(KnownAnswerDrafter(prompt, answer, branches), fixed_draft=8)
    done, steps = generate(numpy_backend, decoder, prompt, 150)
    assert list(done.token_ids) == answer
    assert 0 < done.stats.accepted < done.stats.drafted  # drafts were accepted, and rejected
    assert done.stats.steps < len(answer)


# -- the registry's speculative decoders: exact, with drafts accepted --------------------------


def decoder_for(name: str):
    if name.startswith("draft"):
        # a weaker model of the same vocabulary: the same corpus read with 4-grams only
        draft = NumpyBackend(CharNgramModel(order=4), model_name="char-4gram")
        values = {"k": 3, "copies": name == "draft-copies"}
        if name == "draft-tree":
            values["tree_width"] = 4
        return DraftModelDecoder(draft_model=draft, **DraftModelDecoder.validate(values))
    return DECODERS[name].create()


@pytest.mark.parametrize("name", ["pld", "lookahead", "draft", "draft-tree", "draft-copies"])
def test_greedy_family_equals_greedy_on_the_numpy_backend(numpy_backend, name):
    accepted = 0
    for text in PROMPTS:
        ids = raw_prompt_ids(numpy_backend, text)
        reference = greedy_answer(numpy_backend, ids)
        done, _ = generate(numpy_backend, decoder_for(name), ids)
        assert list(done.token_ids) == reference, text
        accepted += done.stats.accepted
    assert accepted > 0, "the test must exercise accepted drafts"


# -- the draft-length policy ---------------------------------------------------------------------


def test_the_policy_drafts_where_a_pass_has_overhead_to_share(char_ngram_model):
    """An overhead-bound backend (a GPU, say): a block of 8 costs little more than one token, so
    drafting pays even at modest acceptance. A backend whose pass costs the same per token has
    nothing to share: no draft can pay for itself, and the policy drafts nothing."""
    overhead_bound = NumpyBackend(char_ngram_model, overhead=0.01, per_token=0.0005)
    per_token = NumpyBackend(char_ngram_model, overhead=0.0, per_token=0.01)
    for text in PROMPTS[:3]:
        ids = raw_prompt_ids(overhead_bound, text)
        reference = greedy_answer(overhead_bound, ids)
        drafting, _ = generate(overhead_bound, DECODERS["pld"].create(), ids)
        assert list(drafting.token_ids) == reference
        assert drafting.stats.accepted > 0 and drafting.stats.tokens_per_step > 2
        plain, _ = generate(per_token, DECODERS["pld"].create(), ids)
        assert list(plain.token_ids) == reference
        assert plain.stats.drafted == 0 and plain.stats.steps == len(reference) + (
            plain.finish_reason == "eos"
        )


def test_token_trees_grow_where_a_wider_pass_is_cheap(char_ngram_model):
    """The draft's alternatives join the pass as far as the target's pass costs pay: on a backend
    whose passes are nearly flat the tree is wider than the chain, and on one whose every token
    costs as much as a pass there is none; either way the answer is greedy's."""

    def passes(backend: NumpyBackend, name: str, ids: list[int]) -> tuple[list[int], float]:
        backend.passes.clear()
        done, steps = generate(backend, decoder_for(name), ids)
        drafted = [s.drafted for s in steps]
        extra = sum(size - 1 - d for size, d in zip(backend.passes, drafted) if d)
        return list(done.token_ids), extra / max(1, sum(1 for d in drafted if d))

    flat = NumpyBackend(char_ngram_model, overhead=0.01, per_token=0.00001)
    dear = NumpyBackend(char_ngram_model, overhead=0.0, per_token=0.01)
    for text in PROMPTS:
        ids = raw_prompt_ids(flat, text)
        reference = greedy_answer(flat, ids)
        tree, wide = passes(flat, "draft-tree", ids)
        assert tree == reference
        chain, none = passes(flat, "draft", ids)
        assert chain == reference and none == 0
        assert wide > 0, text  # alternatives joined the drafted chain
        dear_tree, narrow = passes(dear, "draft-tree", ids)
        assert dear_tree == reference and narrow == 0


@pytest.mark.parametrize("order", [8, 3])
def test_a_tree_learns_which_alternatives_the_target_takes(char_ngram_model, order):
    """A draft that is the target's own model (order 8) is right wherever it is unsure, so its
    second choices are never taken: priced at its own probabilities they kept filling the pass,
    learned from verification they stop joining. A weaker draft (order 3) is often wrong where
    it is unsure, and its alternatives keep their place. The answer is greedy's either way."""
    backend = NumpyBackend(char_ngram_model, overhead=0.01, per_token=0.0005)
    draft_model = char_ngram_model if order == 8 else CharNgramModel(order=order)
    values = DraftModelDecoder.validate({"k": 3, "tree_width": 4, "copies": False})
    decoder = DraftModelDecoder(draft_model=NumpyBackend(draft_model), **values)
    hung = []  # alternatives hung, a round of the prompts at a time
    for _ in range(3):
        hung.append(0)
        for text in PROMPTS:
            ids = raw_prompt_ids(backend, text)
            backend.passes.clear()
            done, steps = generate(backend, decoder, ids)
            assert list(done.token_ids) == greedy_answer(backend, ids), text
            hung[-1] += sum(size - 1 - s.drafted for size, s in zip(backend.passes, steps))
    assert hung[0] > 0  # at first the draft's word is all there is
    if order == 8:
        assert hung[-1] == 0
    else:
        assert hung[-1] > 0


def test_a_tree_teaches_the_policy_only_the_chain_it_sized():
    """Alternatives hung where the draft model stopped for want of confidence make the tree one
    node deeper than the chain the policy asked for; the policy must learn from the chain alone,
    or every miss there reads as a failed deeper draft and later drafts shrink."""
    from specchat.decoding.token_tree import chain_positions, widen

    peaked = np.full(8, 0.02)
    peaked[[1, 2]] = 0.86
    unsure = np.full(8, 1 / 8)
    draft = Draft.chain(0, [1, 2])
    positions = chain_positions([1, 2], [peaked, peaked], stopped=(3, unsure), width=4)
    assert widen(draft, positions, 4, lambda n: 1.0, None) > 0  # a flat pass: every node pays
    assert draft.drafted == 3 and draft.sized == 2
    plain = Draft.chain(0, [1, 2])
    assert plain.sized is None


def test_lookahead_sizes_its_window_from_the_pass_costs(char_ngram_model):
    """Where a wide pass is nearly free the Jacobi window runs; where every token costs as much
    as a pass, lookahead drafts little and never widens its pass for the window; exact both
    ways."""
    flat = NumpyBackend(char_ngram_model, overhead=0.01, per_token=0.00001)
    dear = NumpyBackend(char_ngram_model, overhead=0.001, per_token=0.01)
    for text in PROMPTS:
        ids = raw_prompt_ids(flat, text)
        reference = greedy_answer(flat, ids)
        flat.passes.clear()
        wide, _ = generate(flat, DECODERS["lookahead"].create(), ids)
        assert list(wide.token_ids) == reference
        assert max(flat.passes) > 1 + 8  # the window ran beside the drafts
        dear.passes.clear()
        narrow, steps = generate(dear, DECODERS["lookahead"].create(), ids)
        assert list(narrow.token_ids) == reference
        # no window (its 3 levels would make a pass of 4 tokens at least), and drafts only where
        # they hold (copies of the corpus's refrains)
        assert all(size <= 1 + s.drafted * 5 for size, s in zip(dear.passes, steps))
        assert narrow.stats.drafted <= 1.2 * narrow.stats.accepted + 2
        assert sum(dear.passes) / len(dear.passes) < sum(flat.passes) / len(flat.passes) / 3


def test_fixed_draft_drafts_whatever_the_costs_say(char_ngram_model):
    per_token = NumpyBackend(char_ngram_model, overhead=0.0, per_token=0.01)
    ids = raw_prompt_ids(per_token, "The cat")
    reference = greedy_answer(per_token, ids)
    per_token.passes.clear()
    done, steps = generate(per_token, DECODERS["pld"].create(fixed_draft=3), ids)
    assert list(done.token_ids) == reference
    assert done.stats.accepted > 0
    assert max(step.drafted for step in steps) == 3
    assert max(per_token.passes) == 4  # the pending token and at most three drafts


def test_settings_naming_a_retired_parameter_still_build_the_decoder():
    """`guard` (the payoff guard) and the draft model's `k` are gone; a settings file the
    decoder settings dialog wrote with them keeps working, and a parameter never taken is still
    refused in one line."""
    assert "guard" not in DECODERS["pld"].validate({"guard": True})
    assert "k" not in DraftModelDecoder.validate({"k": 3, "guard": False})
    with pytest.raises(SpecchatError):
        DECODERS["pld"].validate({"gaurd": True})


@pytest.mark.parametrize("copies", [False, True], ids=["model", "copies"])
def test_the_first_token_waits_for_no_draft_model_pass(char_ngram_model, copies):
    """The draft's cache catches up with the prompt after the first token, not before it: read
    beside the target's prefill it made the first token wait about three times as long. Each
    answer starts so, and its drafts still come from the model and stay greedy's."""
    target = NumpyBackend(char_ngram_model)
    draft = NumpyBackend(CharNgramModel(order=4), model_name="char-4gram")
    values = DraftModelDecoder.validate({"k_max": 3, "copies": copies})
    decoder = DraftModelDecoder(draft_model=draft, **values)
    for text in PROMPTS:
        ids = raw_prompt_ids(target, text)
        reference = greedy_answer(target, ids)
        target.rollback(0)
        events = Engine(target, decoder).generate(GenerationRequest(tuple(ids), 120))
        draft.passes.clear()
        first = next(e for e in events if isinstance(e, StepEvent))
        assert first.tokens and draft.passes == [], text
        assert first.drafted == 0 or first.source != DRAFT, text  # a copy may start at once
        rest = list(events)
        assert isinstance(rest[-1], DoneEvent)
        assert [*first.tokens, *(t for e in rest[:-1] for t in e.tokens)] == reference, text
        assert draft.passes or copies, "the draft model drafted after the first token"
