"""The model's own recycled candidates: the one-pass top-k against numpy, the table kept on disk
(atomic under kill -9, a corrupt file ignored in one line), and the `suffix` decoder drafting them
on text that copies nothing — token-identical to greedy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from specchat.backends.base import ChatMessage
from specchat.decoding import recycled
from specchat.decoding.recycled import WIDTH, RecycledCandidates, top_successors
from specchat.decoding.registry import build_decoder
from specchat.decoding.sources import RECYCLED
from specchat.engine.events import StepEvent
from specchat.engine.local import Engine
from specchat.engine.protocol import GenerationRequest
from specchat.prompting import chat_prompt_ids


@pytest.fixture(autouse=True)
def own_tables(tmp_path, monkeypatch):
    """Every test's tables start empty, kept under its own data dir."""
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(recycled, "_tables", {})


def _numpy_top(rows: np.ndarray, k: int) -> np.ndarray:
    order = np.argsort(-rows, axis=1, kind="stable")  # ties: the lower index first
    return order[:, :k]


def test_the_one_pass_top_k_ranks_as_a_full_sort_does():
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((5, 49_153)).astype(np.float32)
    rows[1, ::7] = 4.0  # many ties at the top
    rows[2, 100] = np.nan  # a NaN is never a candidate
    expected = _numpy_top(np.nan_to_num(rows, nan=-np.inf), WIDTH)
    assert (top_successors(rows) == expected).all()
    short = rng.standard_normal((1, 5)).astype(np.float32)  # fewer values than WIDTH
    assert top_successors(short)[0].tolist() == _numpy_top(short, 5)[0].tolist() + [-1] * 3


def test_the_table_keeps_each_tokens_latest_successors_and_chains_them():
    table = RecycledCandidates(vocab_size=10)
    logits = np.zeros((2, 10), dtype=np.float32)
    logits[0, 4], logits[0, 6] = 3.0, 2.0  # after token 1: 4, then 6
    logits[1, 7] = 5.0  # after token 4: 7
    table.learn([1, 4], logits)
    assert table.successors(1)[:2].tolist() == [4, 6]
    assert table.chain(1, 5) == [4, 7]  # nothing is known after 7 yet
    logits[1] = 0.0
    logits[1, 1] = 5.0  # now after 4 comes 1: the chain stops where a token would repeat
    table.learn([4], logits[1:])
    assert table.chain(1, 5) == [4, 1]


def test_a_kept_table_loads_in_the_background_and_a_corrupt_one_is_ignored(tmp_path):
    path = tmp_path / "table.npy"
    first = RecycledCandidates(vocab_size=50, path=path)
    first.loaded.set()
    logits = np.arange(50, dtype=np.float32)[None, :]
    first.learn([3], logits)
    first.save()
    again = RecycledCandidates(vocab_size=50, path=path)
    again.load()
    assert again.problem is None and again.successors(3).tolist() == list(range(49, 41, -1))
    path.write_bytes(os.urandom(300))
    broken = RecycledCandidates(vocab_size=50, path=path)
    broken.load()
    assert broken.problem and "ignored" in broken.problem and "\n" not in broken.problem
    assert (broken.table == -1).all()
    np.save(path, np.zeros((7, WIDTH), dtype=np.int32))  # another model's shape
    other = RecycledCandidates(vocab_size=50, path=path)
    other.load()
    assert other.problem and (other.table == -1).all()


_WRITER = """
import sys, numpy as np
from pathlib import Path
from specchat.decoding.recycled import RecycledCandidates
table = RecycledCandidates(vocab_size=20000, path=Path(sys.argv[1]))
table.loaded.set()
rng = np.random.default_rng(0)
print("ready", flush=True)
while True:
    table.learn(list(range(20000)), rng.standard_normal((20000, 16)).astype(np.float32))
    table.save()
"""


def test_kill_9_while_saving_leaves_the_old_table_or_the_new_one(tmp_path):
    path = tmp_path / "table.npy"
    for attempt in range(4):
        writer = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(0.3 + 0.2 * attempt)
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        if path.exists():
            table = RecycledCandidates(vocab_size=20000, path=path)
            table.load()
            assert table.problem is None
            assert (table.table >= 0).all()  # a whole table, every row written
        leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".recycled-")]
        for leftover in leftovers:  # a temporary file may be left; never read as the table
            leftover.unlink()


STORY = "Tell me a short story about a lighthouse keeper and a storm."


def _answer(backend, name, ids, **params):
    engine = Engine(backend, build_decoder(name, params, backend))
    backend.rollback(0)
    events = list(engine.generate(GenerationRequest(tuple(ids), 96)))
    engine.decoder.finish()
    return events[-1], [e for e in events if isinstance(e, StepEvent) and not e.tail]


def test_suffix_drafts_recycled_candidates_where_nothing_copies_and_stays_greedy(fresh_llama):
    ids = chat_prompt_ids(fresh_llama, [ChatMessage("user", STORY)])
    greedy, _ = _answer(fresh_llama, "greedy", ids)
    # the first answer fills the table; the second drafts from it
    _answer(fresh_llama, "suffix", ids, fixed_draft=3, recycle=True)
    done, steps = _answer(fresh_llama, "suffix", ids, fixed_draft=3, recycle=True)
    assert done.token_ids == greedy.token_ids
    recycled_steps = [s for s in steps if s.accepted and s.source == RECYCLED]
    assert recycled_steps, [s.source for s in steps]
    off, off_steps = _answer(fresh_llama, "suffix", ids, fixed_draft=3)  # off by default
    assert off.token_ids == greedy.token_ids
    assert not any(s.source == RECYCLED for s in off_steps)
    assert done.stats.steps < off.stats.steps  # fewer passes for the same answer


class Priced:
    """The backend, with every pass's size noted; `flat`: priced as a GPU prices it (a pass over
    64 tokens costs what one over one does), else at its own measured costs."""

    def __init__(self, backend, flat: bool) -> None:
        self._backend, self._flat, self.sizes = backend, flat, []

    def __getattr__(self, name: str):
        return getattr(self._backend, name)

    def evaluate(self, block, *args, **kwargs):
        self.sizes.append(len(block))
        return self._backend.evaluate(block, *args, **kwargs)

    def block_cost(self, k: int) -> float:
        if self._flat:
            return self._backend.block_cost(1) * (1.0 + 0.001 * k)
        return self._backend.block_cost(k)


def test_recycled_trees_grow_where_a_pass_costs_the_same_for_many_tokens(fresh_llama):
    """On the CPU's costs a recycled draft offers alternatives at its first two depths at most;
    where a pass over many tokens costs what one does (a GPU), deeper ones join too — and the
    answer stays greedy's."""
    ids = chat_prompt_ids(fresh_llama, [ChatMessage("user", STORY)])
    greedy, _ = _answer(fresh_llama, "greedy", ids)
    widest = {}
    for flat in (False, True):
        backend = Priced(fresh_llama, flat)
        _answer(backend, "suffix", ids, fixed_draft=4, recycle=True)
        backend.sizes.clear()
        done, steps = _answer(backend, "suffix", ids, fixed_draft=4, recycle=True)
        assert done.token_ids == greedy.token_ids
        assert any(s.source == RECYCLED for s in steps)
        widest[flat] = max(backend.sizes[1:])  # the first pass is the prompt's
    chain_and_two_depths = 1 + 4 + (WIDTH - 1) + 3
    assert widest[False] <= chain_and_two_depths, widest
    assert widest[True] > chain_and_two_depths, widest
