"""The pass costs the suite's backends report: fixed, never timed on the machine running it.

What a speculative decoder drafts, and which runtime a GGUF loads on, follow the pass costs; timed
on two cores that run two tests at once, they swing from one run to the next (a 2-token llama.cpp
pass measured 1.8x-2.3x a 1-token one), and the decisions with them. The suite sizes drafts by the
costs measured for the design on an idle two-core machine instead (docs/bench-log.md). A
transformers model's one-token pass is priced by its size (a fixed overhead and a cost per
weight, measured for the bundled model on one thread), so a tiny draft model stays cheap beside
its target; a timing kept in the suite's cache would carry one busy run's load into every later
run. A test marked `measured_costs` times passes for real.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from specchat.backends import block_cost
from specchat.backends.block_cost import BlockCostTable
from specchat.hardware import physical_cores

# seconds of a k-token chain pass behind 256 cached tokens, two threads, the bundled model
_LLAMA_ONE, _INT4_ONE = 0.0095, 0.0052
FIXED = {
    "llama": {k: _LLAMA_ONE * r for k, r in {1: 1, 2: 1.76, 4: 2.62, 8: 4.25, 16: 8.04}.items()},
    "int4": {k: _INT4_ONE * r for k, r in {1: 1, 2: 1.08, 4: 1.33, 8: 2.28, 16: 3.92}.items()},
}
# a one-token pass on transformers (fp32, prepacked linears, one thread): overhead + per weight
_HF_OVERHEAD, _HF_PER_WEIGHT = 0.002, 1.7e-10
# a k-token pass over one on transformers
HF_SHAPE = {1: 1.0, 2: 1.08, 4: 1.14, 8: 1.41, 16: 1.75, 32: 2.7, 48: 3.55}

_ORIGINAL: dict[str, Callable] = {
    "_measure_all": BlockCostTable._measure_all,
    "glance": BlockCostTable.glance,
    "_time_slice": BlockCostTable._time_slice,
    "_refine": BlockCostTable._refine,
    "_observe": BlockCostTable._observe,
    "_observe_drafted": BlockCostTable._observe_drafted,
}


def _fixed_measure_all(table: BlockCostTable) -> None:
    runtime = table._key.split("|", 1)[0]
    if runtime in FIXED:
        table._costs.update(FIXED[runtime])
        return
    if runtime != "hf":
        _ORIGINAL["_measure_all"](table)
        return
    weights = sum(p.numel() for p in table._backend.model.parameters())
    one = _HF_OVERHEAD + _HF_PER_WEIGHT * weights
    table._costs.clear()
    table._costs.update({k: one * ratio for k, ratio in HF_SHAPE.items()})


def _fixed_slice(table: BlockCostTable) -> None:
    """A stand-in's own table, after an answer: the fixed costs at once (`_fixed_measure_all`)."""
    table._sweep = None
    table._costs.clear()
    _fixed_measure_all(table)
    table._memo.clear()


def _fixed_glance(table: BlockCostTable):
    """The fixed costs, as a table measured whole holds and keeps them: the runtime a test's
    GGUF loads on is chosen by them, never by a timing."""
    table._measured()
    return table._table_cost


def _not_refined(table: BlockCostTable, *_: float) -> None:
    """Passes in use, and sweeps after answers, never move the fixed costs."""


def fix(monkeypatch: pytest.MonkeyPatch, gguf: Path | None = None) -> None:
    """Every cost table measured from now on holds the fixed costs, and keeps them. With `gguf`,
    its llama.cpp and int4 tables are written to the cache too (as if measured), so the
    `specchat` processes that tests start read them instead of timing passes of their own."""
    monkeypatch.setattr(BlockCostTable, "_measure_all", _fixed_measure_all)
    monkeypatch.setattr(BlockCostTable, "glance", _fixed_glance)
    monkeypatch.setattr(BlockCostTable, "_time_slice", _fixed_slice)
    monkeypatch.setattr(BlockCostTable, "_refine", _not_refined)
    monkeypatch.setattr(BlockCostTable, "_observe", _not_refined)
    monkeypatch.setattr(BlockCostTable, "_observe_drafted", _not_refined)
    if gguf is not None:
        from specchat.backends.registry import runtime as registered

        for runtime, costs in FIXED.items():
            for threads in {1, 2, physical_cores()}:
                table = BlockCostTable.__new__(BlockCostTable)
                table._key = BlockCostTable.full_key(
                    registered(runtime).cost_key(gguf), "cpu", threads
                )
                table._costs = dict(costs)
                # as many sweeps as a table is the median of: no process times more of them
                table._shapes = [table._shape()] * block_cost._SWEEPS
                table._save()


def unfix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cost tables time passes again (until `monkeypatch` is undone)."""
    for name, method in _ORIGINAL.items():
        monkeypatch.setattr(BlockCostTable, name, method)
