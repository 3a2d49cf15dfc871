"""How pass costs are timed: as decoding meets them, on a runtime whose clock the test holds.

The runtime here is a stand-in with a known clock (the contract suite times real backends); what
is under test is the bookkeeping, which no real runtime could show deterministically.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.backends import block_cost
from specchat.backends.base import Block
from specchat.backends.block_cost import BlockCostTable


class _Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


class _Runtime:
    """llama.cpp's shape: a plain pass costs 1, a k-token pass 0.5 + 0.5·k, and a one-token
    pass right after a larger one costs `slowed` more."""

    n_ctx, vocab_size, device, threads = 4096, 1000, "cpu", 2

    def __init__(self, clock: _Clock, slowed: float) -> None:
        self.clock, self.slowed = clock, slowed
        self.n_committed, self._last = 0, 1

    def prefill(self, ids: list[int]) -> None:
        self.n_committed += len(ids)

    def evaluate(self, block: Block) -> None:
        k = len(block)
        self.clock.now += 1.0 if k == 1 else 0.5 + 0.5 * k
        if k == 1 and self._last > 1:
            self.clock.now += self.slowed
        self._last = k

    def rollback(self, n: int) -> None:
        self.n_committed = n


@pytest.mark.measured_costs
@pytest.mark.parametrize("slowed", [0.0, 0.25])
def test_a_draft_is_charged_the_plain_pass_it_slows(
    slowed: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    clock = _Clock()
    monkeypatch.setattr(block_cost.time, "perf_counter", clock)
    runtime = _Runtime(clock, slowed)
    table = BlockCostTable(runtime, key="stand-in")
    # a plain step costs what a one-token pass costs after another one, not after a draft
    assert table.cost(1) == 1.0
    for k in (2, 4, 8, 16):
        assert table.cost(k) == 0.5 + 0.5 * k + slowed
    assert runtime.n_committed == 0  # the context filled for timing is given back
