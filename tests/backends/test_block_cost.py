"""How pass costs are timed: as decoding meets them, on a runtime whose clock the test holds.

The runtime is the numpy backend with a modelled pass time (its `clock`); what is under test is
the bookkeeping, which no real runtime could show deterministically (the contract suite times
real backends).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.backends import block_cost
from specchat.backends.block_cost import BlockCostTable
from tests.numpy_backend import NumpyBackend


@pytest.mark.measured_costs
@pytest.mark.parametrize("slowed", [0.0, 0.25])
def test_a_draft_is_charged_the_plain_pass_it_slows(
    slowed: float, char_ngram_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp's shape: a plain pass costs 1, a k-token pass 0.5 + 0.5·k, and a one-token pass
    right after a larger one `slowed` more."""
    last = [1]

    def pass_seconds(k: int) -> float:
        seconds = 1.0 if k == 1 else 0.5 + 0.5 * k
        if k == 1 and last[0] > 1:
            seconds += slowed
        last[0] = k
        return seconds

    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    runtime = NumpyBackend(char_ngram_model, pass_seconds=pass_seconds)
    monkeypatch.setattr(block_cost.time, "perf_counter", lambda: runtime.clock)
    table = BlockCostTable(runtime, key="stand-in")
    # a plain step costs what a one-token pass costs after another one, not after a draft
    assert table.cost(1) == 1.0
    for k in (2, 4, 8, 16):
        assert table.cost(k) == 0.5 + 0.5 * k + slowed
    assert runtime.n_committed == 0  # the context filled for timing is given back
