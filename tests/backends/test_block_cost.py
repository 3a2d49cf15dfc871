"""How pass costs are timed: as decoding meets them, on a runtime whose clock the test holds.

The runtime is the numpy backend with a modelled pass time (its `clock`); what is under test is
the bookkeeping, which no real runtime could show deterministically (the contract suite times
real backends).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.backends import block_cost
from specchat.backends.base import Block
from specchat.backends.block_cost import BlockCostTable
from tests.numpy_backend import NumpyBackend


def modelled_runtime(
    char_ngram_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slowed: float
) -> NumpyBackend:
    """llama.cpp's shape: a plain pass costs 1, a k-token pass 0.5 + 0.5·k, and the two
    one-token passes after a larger one `slowed` and half that more (seconds each: a slice
    after an answer times every sweep's units, unless a test says not)."""
    monkeypatch.setattr(block_cost, "_UNIT_SECONDS", 1e9)
    since = [9]

    def pass_seconds(k: int) -> float:
        seconds = 1.0 if k == 1 else 0.5 + 0.5 * k
        if k == 1:
            since[0] += 1
            seconds += {1: slowed, 2: slowed / 2}.get(since[0], 0.0)
        else:
            since[0] = 0
        return seconds

    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    runtime = NumpyBackend(char_ngram_model, pass_seconds=pass_seconds)
    monkeypatch.setattr(block_cost.time, "perf_counter", lambda: runtime.clock)
    # its thread had its core the whole time (cpu time = wall time), unless a test says not
    runtime.cpu_share = 1.0
    monkeypatch.setattr(block_cost.time, "process_time", lambda: runtime.clock * runtime.cpu_share)
    return runtime


@pytest.mark.measured_costs
@pytest.mark.parametrize("slowed", [0.0, 0.25])
def test_a_draft_is_charged_the_plain_passes_it_slows(
    slowed: float, char_ngram_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed)
    table = BlockCostTable(runtime, key="stand-in")
    # a plain step costs what a settled one-token pass costs, not one just after a draft
    assert table.cost(1) == 1.0
    for k in (2, 4, 8, 16):
        assert table.cost(k) == pytest.approx(0.5 + 0.5 * k + 1.5 * slowed)
    assert runtime.n_committed == 0  # the context filled for timing is given back


def decode(runtime: NumpyBackend, table: BlockCostTable, pattern: list[int], times: int) -> None:
    """Passes as a speculative answer makes them (sizes in `pattern`, again and again), each
    timed by the table as a backend times its passes."""
    for _ in range(times):
        for k in pattern:
            block = Block.chain([1] * k)
            with table.timing(block):
                runtime.evaluate(block)
            runtime.commit([0])


@pytest.mark.measured_costs
def test_a_faster_plain_pass_lowers_every_size_alike(
    char_ngram_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table measured on a busy machine comes down as plain passes run faster, keeping the
    ratios drafts are sized by; larger passes in use (cheaper than charged: what they slow
    comes after them) leave it."""
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.0)
    table = BlockCostTable(runtime, key="stand-in")
    before = {k: table.cost(k) for k in (1, 2, 8)}
    runtime.pass_seconds = lambda k: 0.8 * (1.0 if k == 1 else 0.5 + 0.5 * k)
    decode(runtime, table, [2, 1, 1, 1, 1, 1, 1], times=50)
    assert table.cost(1) == pytest.approx(0.8)
    for k in (2, 8):
        assert table.cost(k) / table.cost(1) == pytest.approx(before[k] / before[1])


@pytest.mark.measured_costs
def test_drafts_that_cost_more_in_use_than_timed_are_priced_as_they_cost(
    char_ngram_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table's shape is timed once; when a 2-token pass later costs 2.4 plain passes where
    the table says 1.5 (the machine's neighbours took its compute, seen on a 2-core AMD EPYC),
    the policy prices drafts at what they cost now, and a larger size, not drafted yet, at least
    as much more. For this run only: the kept table keeps its timing."""
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.0)
    table = BlockCostTable(runtime, key="stand-in")
    before = {k: table.cost(k) for k in (1, 2, 4)}
    runtime.pass_seconds = lambda k: 1.0 if k == 1 else 1.2 * k
    decode(runtime, table, [2, 1, 1, 1, 1, 1], times=20)
    assert table.cost(1) == pytest.approx(1.0)
    assert table.cost(2) == pytest.approx(2.4)
    assert table.cost(4) == pytest.approx(before[4] * 2.4 / before[2])
    table.keep()
    kept = BlockCostTable.kept("stand-in", runtime.device, getattr(runtime, "threads", ""))
    assert kept is not None and kept.cost(2) == pytest.approx(before[2])


@pytest.mark.measured_costs
def test_drafts_cheaper_in_use_than_timed_leave_the_table(
    char_ngram_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A draft's own seconds leave out what it slows after it (llama.cpp's next plain passes),
    which the table charges: a pass that looks cheaper than the table in use does not lower it."""
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.5)
    table = BlockCostTable(runtime, key="stand-in")
    before = table.cost(2)
    decode(runtime, table, [2, 1, 1, 1, 1, 1], times=20)
    assert table.cost(2) == pytest.approx(before) and before > 1.5


@pytest.mark.measured_costs
def test_the_table_follows_the_typical_plain_pass_not_the_luckiest(
    char_ngram_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which runtime a model loads on compares two runtimes' tables: a table that only ever
    went down, to the fastest pass it saw, would make the runtime used most look cheapest. One
    settled plain pass in five running at half the cost and the rest at 1.2 (the machine got
    busier) leave the table at 1.2; the plain passes a draft slows (here three at 3.0) are not
    taken for the typical one."""
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.0)
    table = BlockCostTable(runtime, key="stand-in")
    assert table.cost(1) == 1.0
    since_draft, settled = [0], iter(range(10_000))

    def pass_seconds(k: int) -> float:
        if k > 1:
            since_draft[0] = 0
            return 0.5 + 0.5 * k
        since_draft[0] += 1
        if since_draft[0] <= 3:
            return 3.0
        return 0.5 if next(settled) % 5 == 0 else 1.2

    runtime.pass_seconds = pass_seconds
    decode(runtime, table, [4, 1, 1, 1, 1, 1, 1], times=40)
    assert table.cost(1) == pytest.approx(1.2)
    # written after the answer, never during a pass: the next process chooses its runtime by it,
    # though this one never closed
    on_disk = BlockCostTable.kept("stand-in", runtime.device, getattr(runtime, "threads", ""))
    assert on_disk is not None and on_disk.cost(1) == pytest.approx(1.0)
    table.keep()
    kept = BlockCostTable.kept("stand-in", runtime.device, getattr(runtime, "threads", ""))
    assert kept is not None and kept.cost(1) == pytest.approx(1.2)
    runtime.pass_seconds = lambda k: 1.0 if k == 1 else 0.5 + 0.5 * k
    decode(runtime, table, [1], times=64)
    assert table.cost(1) == pytest.approx(1.0)  # and back down when the machine is quieter


@pytest.mark.measured_costs
def test_a_table_refined_while_the_machine_is_busy_is_used_but_not_kept(
    char_ngram_model, tmp_path, monkeypatch
):
    """Passes in use that lacked the cores (another process took half of them) move the table
    for this run only: kept, the busy moment's costs priced the runtime at three times its cost
    for good (seen on a 2-core AMD EPYC after a benchmark beside busy processes), and the
    chooser compares runtimes by them. Alone again, the table comes down and is kept."""
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.0)
    table = BlockCostTable(runtime, "stand-in")
    assert table.cost(1) == pytest.approx(1.0)
    runtime.cpu_share = 0.5
    runtime.pass_seconds = lambda k: 3.0 * (1.0 if k == 1 else 0.5 + 0.5 * k)
    decode(runtime, table, [1], times=80)
    assert table.cost(1) == pytest.approx(3.0)
    table.keep()
    kept = BlockCostTable.kept("stand-in", runtime.device, getattr(runtime, "threads", ""))
    assert kept is not None and kept.cost(1) == pytest.approx(1.0)
    runtime.cpu_share = 1.0
    runtime.pass_seconds = lambda k: 0.9 if k == 1 else 0.5 + 0.5 * k
    decode(runtime, table, [1], times=80)
    table.keep()
    kept = BlockCostTable.kept("stand-in", runtime.device, getattr(runtime, "threads", ""))
    assert kept is not None and kept.cost(1) == pytest.approx(0.9)


@pytest.mark.measured_costs
def test_a_table_timed_while_the_machine_was_busy_is_used_but_not_kept(
    char_ngram_model, tmp_path, monkeypatch
):
    """Timed while another process took half the core, the costs serve this run, but are not
    written: kept, they would price the runtime at the busy moment's costs for good (the chooser
    then ran the other runtime ever after). The next run times them again, alone."""
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.0)
    runtime.cpu_share = 0.5
    table = BlockCostTable(runtime, "stand-in")
    assert table.cost(1) == pytest.approx(1.0)
    runtime.pass_seconds = lambda k: 2.0  # busier still: the table follows, in this run only
    decode(runtime, table, [1], times=80)
    assert table.cost(1) == pytest.approx(2.0)
    table.keep()
    assert BlockCostTable.kept("stand-in", runtime.device, getattr(runtime, "threads", "")) is None
    runtime.cpu_share = 1.0
    again = BlockCostTable(runtime, "stand-in")
    assert again.cost(4) == pytest.approx(2.0)  # timed anew
    assert BlockCostTable.kept("stand-in", runtime.device, getattr(runtime, "threads", ""))


@pytest.mark.measured_costs
def test_a_table_timed_beside_processes_that_take_its_cores_has_its_passes_shape(
    char_ngram_model, tmp_path, monkeypatch
):
    """Beside processes that take its cores a pass waits for a core, at random, for as long as
    it computes or more: by the wall clock the table's shape is noise (a 2-token pass at 0.4-4.5
    plain ones on a 2-core AMD EPYC beside two busy processes, and a new user's first answer
    drafted nothing). The passes' CPU time leaves the waits out; the table has its shape."""
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.0)
    waits, computed = random.Random(5), [0.0]

    def pass_seconds(k: int) -> float:
        seconds = 1.0 if k == 1 else 0.5 + 0.5 * k
        computed[0] += seconds
        return seconds + waits.choice([0.0, 0.0, 1.0, 4.0]) * seconds * 3

    runtime.pass_seconds = pass_seconds
    monkeypatch.setattr(block_cost.time, "process_time", lambda: computed[0])
    table = BlockCostTable(runtime, "stand-in")
    for k in (2, 4, 8, 16):
        assert table.cost(k) / table.cost(1) == pytest.approx(0.5 + 0.5 * k)
    table.keep()
    assert BlockCostTable.kept("stand-in", runtime.device, getattr(runtime, "threads", "")) is None


@pytest.mark.measured_costs
def test_a_count_met_in_an_answer_is_priced_at_once_and_timed_a_slice_after_each_answer(
    char_ngram_model, tmp_path, monkeypatch
):
    """A thread count first met in the middle of an answer (the load changed) is priced by the
    table at hand, with no pass timed there (its whole sweep stalled the answer: 2.3 s on one
    thread for the bundled model); after each answer a slice of its own sweep is timed, behind
    the cache as it is and given back; whole, its own costs price its passes and are kept."""
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.0)
    at_hand = BlockCostTable(runtime, "stand-in", threads=2)
    assert at_hand.cost(4) == pytest.approx(2.5)
    runtime.pass_seconds = lambda k: 3.0 + k  # this count's passes: another shape
    runtime.prefill([1, 2, 3])
    met = BlockCostTable(runtime, "stand-in", threads=1)
    met.stand_in(at_hand)
    clock = runtime.clock
    assert [met.cost(k) for k in (1, 4, 8)] == [at_hand.cost(k) for k in (1, 4, 8)]
    assert runtime.clock == clock and met.standing_in  # nothing timed
    monkeypatch.setattr(block_cost, "_SLICE_SECONDS", 100.0)  # modelled seconds a slice
    slices = 0
    while met.standing_in:
        met.keep()  # the engine, after an answer
        slices += 1
        assert runtime.n_committed == 3  # the cache as the answer left it
        assert slices < 100
    assert slices > 1
    for k in (1, 4, 8):
        assert met.cost(k) == pytest.approx(3.0 + k)
    kept = BlockCostTable.kept("stand-in", runtime.device, 1)
    assert kept is not None and kept.cost(4) == pytest.approx(7.0)
    # a count whose table was kept needs no stand-in
    again = BlockCostTable(runtime, "stand-in", threads=1)
    again.stand_in(at_hand)
    assert not again.standing_in and again.cost(4) == pytest.approx(7.0)


@pytest.mark.measured_costs
def test_a_slice_waits_for_an_answer_that_leaves_room_for_the_largest_pass(
    char_ngram_model, tmp_path, monkeypatch
):
    """After an answer that filled the context, no slice is timed (the largest size would not
    fit behind it): the stand-in prices on, and the next answer's end times it."""
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.0)
    at_hand = BlockCostTable(runtime, "stand-in", threads=2)
    assert at_hand.cost(1) == pytest.approx(1.0)
    met = BlockCostTable(runtime, "stand-in", threads=1)
    met.stand_in(at_hand)
    runtime.prefill([1] * (runtime.n_ctx - 8))
    clock = runtime.clock
    met.keep()
    assert runtime.clock == clock and met.standing_in
    runtime.rollback(0)
    met.keep()
    assert runtime.clock > clock and runtime.n_committed == 0


@pytest.mark.measured_costs
def test_a_table_timed_after_an_answer_that_cannot_be_written_stops_nothing(
    char_ngram_model, tmp_path, monkeypatch
):
    """The slice that completes a stand-in's table runs after an answer, inside the engine's
    generation: a cache that cannot be written leaves the costs to this run, never an error
    after an answer that was whole."""
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.0)
    at_hand = BlockCostTable(runtime, "stand-in", threads=2)
    assert at_hand.cost(1) == pytest.approx(1.0)
    met = BlockCostTable(runtime, "stand-in", threads=1)
    met.stand_in(at_hand)
    blocked = tmp_path / "a file"
    blocked.write_text("")
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(blocked / "cache"))  # under a file: unwritable
    monkeypatch.setattr(block_cost, "_SLICE_SECONDS", 1e9)  # the whole sweep in one slice
    met.keep()
    assert not met.standing_in and met.cost(4) == pytest.approx(2.5)


def sweep_after_answer(table: BlockCostTable, runtime: NumpyBackend, shape) -> None:
    """One answer's end (`keep`) on a machine whose passes cost `shape(k)` plain ones then."""
    runtime.pass_seconds = lambda k: shape(k)
    table.keep()


@pytest.mark.measured_costs
def test_an_unlucky_first_sweep_prices_answers_only_until_later_sweeps_outvote_it(
    char_ngram_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table's first sweep, timed at load in a noisy minute, priced a 2-token pass at 2.02
    plain ones where the machine's sweeps read 1.1-1.3 (a 2-core AMD EPYC): kept, it priced
    every later answer of the model, and the policy drafted nothing. After each answer a slice
    of another sweep is timed; the table takes the median of its sweeps (on the plain pass's
    scale), keeps them with it, and once it has `_SWEEPS` times no more, in this run or the
    next."""
    monkeypatch.setattr(block_cost, "_SLICE_SECONDS", 1e9)  # a whole sweep after each answer
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.0)
    usual = lambda k: 1.0 if k == 1 else 0.5 + 0.5 * k  # noqa: E731
    unlucky = lambda k: 1.0 if k == 1 else 2.0 * k  # noqa: E731
    runtime.pass_seconds = unlucky
    table = BlockCostTable(runtime, key="stand-in")
    assert table.cost(2) == pytest.approx(4.0)  # the first sweep's shape
    sweep_after_answer(table, runtime, usual)
    assert table.cost(2) == pytest.approx(2.75)  # the median of two: their mean
    sweep_after_answer(table, runtime, unlucky)
    assert table.cost(2) == pytest.approx(4.0)
    for _ in range(block_cost._SWEEPS - 3):
        sweep_after_answer(table, runtime, usual)
    assert table.cost(2) == pytest.approx(1.5) and table.cost(8) == pytest.approx(4.5)
    clock = runtime.clock
    sweep_after_answer(table, runtime, unlucky)  # a table of `_SWEEPS` times nothing more
    assert runtime.clock == clock and table.cost(2) == pytest.approx(1.5)
    assert runtime.n_committed == 0  # each sweep's filler given back
    again = BlockCostTable(runtime, key="stand-in")  # the next run: the median, kept
    assert again.cost(2) == pytest.approx(1.5) and again.cost(8) == pytest.approx(4.5)
    again.keep()
    assert runtime.clock == clock


@pytest.mark.measured_costs
def test_a_model_whose_passes_outlast_a_slice_keeps_its_first_sweep(
    char_ngram_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slice runs before the answer ends: a random-weight 1.7B model on int4 ended every
    answer 1.6 s after its last token while later sweeps were timed. Where a sweep's dearest
    unit (the largest pass between settled plain ones) outlasts a slice, no answer's end times
    one, nor one of a thread count's own sweep where it stands in; a model whose unit fits
    does."""
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.0)
    table = BlockCostTable(runtime, key="stand-in", threads=2)
    first = table.cost(8)
    unit = 2 * block_cost._SETTLE * table.cost(1) + table.cost(max(block_cost._SIZES))
    monkeypatch.setattr(block_cost, "_UNIT_SECONDS", unit * 0.99)  # modelled seconds
    met = BlockCostTable(runtime, "stand-in", threads=1)
    met.stand_in(table)
    clock = runtime.clock
    for _ in range(3):
        sweep_after_answer(table, runtime, lambda k: 1.0 if k == 1 else 2.0 * k)
        met.keep()
    assert runtime.clock == clock and table.cost(8) == pytest.approx(first)
    assert met.standing_in and met.cost(8) == pytest.approx(first)
    monkeypatch.setattr(block_cost, "_UNIT_SECONDS", unit)
    sweep_after_answer(table, runtime, lambda k: 1.0 if k == 1 else 2.0 * k)
    assert runtime.clock > clock


@pytest.mark.measured_costs
def test_a_sweep_that_lacked_the_cores_is_not_counted(
    char_ngram_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep timed while other work took the cores has the busy moment's shape: dropped, and
    the next answer's end times another."""
    monkeypatch.setattr(block_cost, "_SLICE_SECONDS", 1e9)
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.0)
    table = BlockCostTable(runtime, key="stand-in")
    usual = table.cost(2)
    busy = lambda k: 1.0 if k == 1 else 3.0 * k  # noqa: E731
    runtime.cpu_share = 0.5
    for _ in range(block_cost._SWEEPS):
        sweep_after_answer(table, runtime, busy)
    assert table.cost(2) == pytest.approx(usual)
    runtime.cpu_share = 1.0
    clock = runtime.clock
    sweep_after_answer(table, runtime, busy)  # alone again: counted
    assert runtime.clock > clock and table.cost(2) == pytest.approx((usual + 6.0) / 2)
    sweep_after_answer(table, runtime, busy)
    assert table.cost(2) == pytest.approx(6.0)  # two of three


@pytest.mark.measured_costs
@pytest.mark.parametrize("sweeps", ["missing", "corrupt"])
def test_a_table_kept_without_its_sweeps_counts_as_one(
    sweeps: str, char_ngram_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table kept before its sweeps were (or beside a sweeps file that is not one) is one
    sweep's: answers time more until the median stands."""
    monkeypatch.setattr(block_cost, "_SLICE_SECONDS", 1e9)
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.0)
    runtime.pass_seconds = lambda k: 1.0 if k == 1 else 2.0 * k
    BlockCostTable(runtime, key="stand-in").cost(1)  # timed and kept
    path = tmp_path / block_cost._SWEEPS_FILE
    if sweeps == "missing":
        path.unlink()
    else:
        path.write_text('{"stand-in": [{"1": "one"}], "other": 3')
    table = BlockCostTable(runtime, key="stand-in")
    assert table.cost(2) == pytest.approx(4.0)
    for _ in range(2):
        sweep_after_answer(table, runtime, lambda k: 1.0 if k == 1 else 0.5 + 0.5 * k)
    assert table.cost(2) == pytest.approx(1.5)


def test_a_probe_whose_cache_cannot_be_written_still_serves_the_run(
    char_ngram_model, tmp_path, monkeypatch
):
    """Exactness is probed before a model's first answer: a cache that cannot keep the result
    leaves it to this run (probed again next time), never an error in place of the answer."""
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.0)
    (tmp_path / block_cost._EXACTNESS_FILE).mkdir()  # a folder where the file goes: unwritable
    assert BlockCostTable(runtime, "probed", threads=2).exactness().bitwise


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
    reason="pins a process's two threads to one of two or more cores",
)
def test_two_threads_on_one_core_are_a_busy_machine_to_the_real_runtime(tmp_path):
    """llama.cpp's two threads pinned to one core (as when another process holds the other):
    the real timing sees it, and the cache keeps no table."""
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "from specchat.models import LoadOptions, load_model\n"
        "b = load_model(None, LoadOptions(backend='llama', threads=2, n_ctx=64))\n"
        "print(b.block_cost(4) > b.block_cost(1) > 0)\n"
    )
    env = {**os.environ, "SPECCHAT_CACHE_DIR": str(tmp_path)}
    ran = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.strip() == "True", ran.stderr[-2000:]
    assert not (tmp_path / "block_costs.json").exists()


@pytest.mark.measured_costs
def test_a_glance_times_each_size_once_and_the_sweep_goes_on_from_it(
    char_ngram_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Choosing a runtime times each size once on each (a glance: a third of a sweep's
    drafted passes); the chosen runtime's table then times the rest of its sweep, not a sweep
    more, and prices as one timed whole; the other keeps its glance, which a later start reads
    without timing."""
    runtime = modelled_runtime(char_ngram_model, tmp_path, monkeypatch, slowed=0.25)
    sizes: list[int] = []
    evaluate = runtime.evaluate
    monkeypatch.setattr(
        runtime, "evaluate", lambda block: sizes.append(len(block)) or evaluate(block)
    )

    def drafted() -> list[int]:
        timed = sorted(k for k in sizes if k > 1)
        sizes.clear()
        return timed

    whole = BlockCostTable(runtime, key="timed whole")
    costs = {k: whole.cost(k) for k in (1, 2, 4, 8, 16)}
    sweep = drafted()
    assert sweep == sorted([k for k in block_cost._SIZES if k > 1] * block_cost._REPEATS)

    chosen = BlockCostTable(runtime, key="chosen")
    glanced = chosen.glance()
    assert drafted() == sorted(set(sweep))  # each size once
    assert {k: glanced(k) for k in costs} == pytest.approx(costs)  # its passes never vary
    assert {k: chosen.cost(k) for k in costs} == pytest.approx(costs)
    assert len(drafted()) == len(sweep) - len(set(sweep))  # the rest of one sweep
    assert BlockCostTable.kept("chosen", runtime.device, runtime.threads) is not None

    # each runtime closed after its glance (one in memory at a time): the chosen one, loaded
    # again, goes on from the sweep its glance began — the rest of it, not a sweep more
    first_load = BlockCostTable(runtime, key="chosen after all")
    first_load.glance()
    began = first_load.keep_glance()
    assert drafted() == sorted(set(sweep))
    assert BlockCostTable.kept("chosen after all", runtime.device, runtime.threads) is not None
    loaded_again = BlockCostTable(runtime, key="chosen after all")
    loaded_again.go_on_from(began)
    assert len(drafted()) == len(sweep) - len(set(sweep))
    assert {k: loaded_again.cost(k) for k in costs} == pytest.approx(costs) and not drafted()
    read_back = BlockCostTable(runtime, key="chosen after all")
    assert {k: read_back.cost(k) for k in costs} == pytest.approx(costs) and not drafted()

    other = BlockCostTable(runtime, key="not chosen")
    other.glance()
    assert BlockCostTable.kept("not chosen", runtime.device, runtime.threads) is None
    other.keep_glance()
    kept = BlockCostTable.kept("not chosen", runtime.device, runtime.threads)
    assert kept is not None and kept.cost(4) == pytest.approx(costs[4])
    assert drafted() == sorted(set(sweep)) and runtime.n_committed == 0
