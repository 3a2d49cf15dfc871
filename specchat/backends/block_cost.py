"""What a k-token forward pass costs on one backend, and whether it is exact, measured once and
kept on disk.

Speculative decoders choose their draft length from the costs: on a compute-bound CPU a block of
8 costs several single-token passes, on an overhead-bound runtime about one, and the best draft
length differs by that much. Whether a block's logits equal one-token passes' (`exactness.py`)
says whether greedy-family decoders are bitwise greedy there, or only to near-ties.
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from specchat import locations
from specchat.backends.base import Backend, Block, Exactness
from specchat.backends.exactness import probe_exactness
from specchat.backends.threads_by_load import held_threads
from specchat.json_tables import put_entry, read_table

_COSTS_FILE = "block_costs.json"
# each kept table's sweeps so far: a size's price over a plain pass, sweep by sweep (`_refine`)
_SWEEPS_FILE = "block_cost_sweeps.json"
_EXACTNESS_FILE = "exactness.json"
_REPEATS = 3
# use refines the table from the median of this many settled plain passes, where it differs
# from the table by more than the tolerance
_WINDOW = 32
_TOLERANCE = 0.03
# a drafted pass in use is priced against the median of this many latest settled plain passes,
# and a size is raised from the median of its latest `_DRAFTED_WINDOW` such ratios
_REFERENCE = 5
_DRAFTED_WINDOW = 16
# plain passes a larger pass is charged for: llama.cpp's one-token pass is slower after a larger
# one, and the next one too
_SETTLE = 3
_SIZES = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48)
# seconds of a sweep timed after an answer (a stand-in's own, or one more of `_SWEEPS`), at most
# and one unit (a size's pass between settled plain passes) at least: so sweeps are timed after
# answers only where a sweep's dearest unit takes no longer than a slice (`_SWEEPS`)
_SLICE_SECONDS = 0.2
_UNIT_SECONDS = _SLICE_SECONDS
# A table's shape is the median of this many sweeps, each timed a slice after an answer (the
# first at load): one sweep's shape is noise. Eight sweeps of the bundled model on int4 in one
# process, five seconds apart (avx2 level, a 2-core AMD EPYC) priced a 2-token pass at 1.13-2.02
# plain ones and 4 tokens at 1.24-2.02; one table was kept, and use raises a size but never
# lowers it, so the unluckiest sweep priced every later answer of that model (docs/bench-log.md,
# session 70). Only where a sweep's dearest unit (a pass of the largest size between settled plain
# passes) fits in a slice: the slice ran before the answer's end, and a random-weight 1.7B model
# on int4 (a 43 ms plain pass) ended every answer 1.6 s after its last token, 8B longer, for the
# hundred-odd answers four sweeps took there (docs/bench-log.md, session 71). Such a model keeps
# its first sweep, as before, its passes long beside the scheduler's noise the sweeps outvote.
_SWEEPS = 5
_FILLER_TOKEN = 198
# Passes are timed behind this many cached tokens, about where a chat answer runs: a pass attends
# to the whole context, and the shape moves with it, if little on llama.cpp (timed as here, the
# ratios stay within about 5% from 64 to 3,000 tokens: benchmarks/measure_context_cost.py).
CONTEXT = 256
# how the passes were timed: a table timed otherwise is measured again ("alone": tables timed
# while the machine was busy are no longer kept, so those kept before are timed again once)
_METHOD = "settled-alone"
# A table is kept only when its passes had the cores: the process's CPU time while timing them at
# least this share of the wall time its threads had. Alone, every runtime's threads run the
# whole time (cpu/wall 1.99-2.00 on two threads; llama.cpp, int4 and transformers alike); beside
# one busy process 1.28-1.30 (`time_passes` on a 2-core Intel Xeon). Kept, a busy moment's table
# priced its runtime at 2-3x its cost for good, and the chooser ran the other runtime ever after.
_ALONE_SHARE = 0.85


class BlockCostTable:
    """Lazy per-k cost of a chain pass for one backend, cached per model, device and threads."""

    def __init__(self, backend, key: str, threads: int | None = None) -> None:
        """The table for passes on `threads` (default: the backend's full count)."""
        self._start(backend, key, backend.device, backend.threads if threads is None else threads)

    def _start(self, backend, key: str, device: str, threads: object) -> None:
        self._backend, self._threads = backend, threads
        self._key = self.full_key(key, device, threads)
        # whether blocks are exact does not depend on the thread count (threads_by_load.py):
        # probed and kept once, under the full count's key
        full = threads if backend is None else backend.threads
        self._exactness_key = self.full_key(key, device, full)
        self._costs: dict[int, float] = {}
        self._memo: dict[int, float] = {}  # every size asked for, read per draft: kept
        self._loaded = False
        self._exactness: Exactness | None = None
        self._plain_run = 0  # one-token passes in a row, in use
        self._unsaved = False  # a refinement not yet written (`keep`)
        self._recent: list[float] = []  # settled plain passes' seconds, not yet refined from
        self._recent_share = [0.0, 0.0]  # those passes' CPU seconds and wall seconds
        self._refined_busy = False  # the last refinement came from passes that lacked the cores
        self._timed_busy = False  # measured while other work took the cores: not kept
        self._latest_plain: deque[float] = deque(maxlen=_REFERENCE)  # settled plain seconds
        self._drafted: dict[int, deque[float]] = {}  # per size: seconds ÷ the plain reference
        self._raised: dict[int, float] = {}  # per size: what use showed beyond the table
        # a stand-in's own sweep, timed a slice after each answer (None: not standing in)
        self._sweep: _Sweep | None = None
        # the shapes of the sweeps the table is the median of (each size's cost over a plain
        # pass's), and the next sweep, timed a slice after each answer until `_SWEEPS` are in
        self._shapes: list[dict[int, float]] = []
        self._refining: _Sweep | None = None

    @property
    def threads(self) -> object:
        """The thread count its passes are timed on."""
        return self._threads

    @staticmethod
    def full_key(key: str, device: str, threads: object) -> str:
        """Where a runtime's costs are kept: its model key, device, threads and context."""
        return f"{key}|{device}|threads={threads}|context={CONTEXT}|{_METHOD}"

    @classmethod
    def kept(cls, key: str, device: str, threads: object) -> BlockCostTable | None:
        """The costs measured before for this model key, device and threads, without loading
        the model (None: never measured)."""
        table = cls.__new__(cls)
        table._start(None, key, device, threads)
        table._load()
        return table if table._costs else None

    @staticmethod
    def _read(name: str) -> dict:
        return read_table(locations.cache_dir() / name)

    def _write(self, name: str, value: object, key: str | None = None) -> None:
        """Put this backend's entry (under `key`, else the table's) into the file `name` (others'
        are kept)."""
        put_entry(locations.cache_dir() / name, key or self._key, value)

    def _load(self) -> None:
        self._loaded = True
        table = self._read(_COSTS_FILE).get(self._key, {})
        try:
            self._costs.update({int(k): float(v) for k, v in table.items()})
        except (ValueError, AttributeError, TypeError):
            self._costs.clear()
        if 1 not in self._costs or self._costs[1] <= 0:  # no plain pass to price by: not a table
            self._costs.clear()
        self._shapes = _read_shapes(self._read(_SWEEPS_FILE).get(self._key))
        if self._costs and not self._shapes:  # kept before sweeps were: it counts as one
            self._shapes = [self._shape()]

    def _save(self) -> None:
        """Keep the costs and the sweeps they are the median of; a cache that cannot be written
        stops nothing (they are written after an answer, or before one, and serve this run
        either way)."""
        with contextlib.suppress(OSError):
            self._write(_COSTS_FILE, {str(k): v for k, v in sorted(self._costs.items())})
            shapes = [{str(k): r for k, r in sorted(shape.items())} for shape in self._shapes]
            self._write(_SWEEPS_FILE, shapes)

    def _shape(self) -> dict[int, float]:
        """Each size's cost over a plain pass's, as the table stands."""
        return _prices(self._costs)

    def _new_sweep(self) -> _Sweep:
        """A sweep of every size that fits behind the cache now, on this table's threads."""
        return _Sweep(self._backend, _sizes(self._backend), _REPEATS, self._threads)

    @contextlib.contextmanager
    def timing(self, block: Block) -> Iterator[None]:
        """Time a pass in use (`_observe`). Only settled plain passes refine the table, as they
        were timed for it: a larger pass's cost includes what it slows after it, which its own
        seconds do not show, and the plain passes it slows are not yet settled."""
        start, cpu = time.perf_counter(), time.process_time()
        yield
        seconds = time.perf_counter() - start
        if len(block) > 1:
            self._plain_run = 0
            self._observe_drafted(len(block), seconds)
            return
        self._plain_run += 1
        if self._plain_run > _SETTLE and self._costs:
            self._latest_plain.append(seconds)
            self._observe(seconds, time.process_time() - cpu)

    def _observe(self, seconds: float, cpu_seconds: float) -> None:
        """The table follows what a plain pass typically costs now — lower than measured where
        the machine was busy then, higher where it is busy now — by the median of a window of
        passes, moving every size by one factor to keep the shape it was measured with (the
        ratios the policy sizes drafts by). Not the fastest pass seen: that would only ever go
        down, to the luckiest of thousands of passes, and the runtime chosen for a model compares
        the tables of two runtimes used unequally. Written by `keep`, which the engine calls after
        each answer: never inside a pass, and a process that never closes its model still keeps
        it — unless the window's passes lacked the cores (`had_the_cores`): a busy moment's
        refinement serves this run only, as a table timed while busy does."""
        self._recent.append(seconds)
        self._recent_share[0] += cpu_seconds
        self._recent_share[1] += seconds
        if len(self._recent) < _WINDOW:
            return
        factor = statistics.median(self._recent) / self.cost(1)
        alone = had_the_cores(*self._recent_share, self._backend, self._threads)
        self._recent.clear()
        self._recent_share = [0.0, 0.0]
        if abs(factor - 1.0) <= _TOLERANCE:
            self._refined_busy &= not alone  # passes alone confirm the table as it stands
            return
        for size in self._costs:
            self._costs[size] *= factor
        self._memo.clear()
        self._unsaved, self._refined_busy = True, not alone

    def _observe_drafted(self, k: int, seconds: float) -> None:
        """Raise a size the table prices below what its passes cost in use. The table's shape is
        timed once, and this machine's shape moves with its neighbours' load while the plain
        pass barely does: a 4-token int4 pass ran 1.52x a plain one for minutes after the table
        timed it at 1.22x, and the policy drafted where decoding lost (docs/bench-log.md). Each
        drafted pass is priced against the plain passes just before it, so a change of scale
        cancels; the raise is the median of a size's latest ratios over the table's. Raised only,
        never lowered below the table: the table also charges what a pass slows after it, which
        the pass's own seconds do not show. For this run only: the state is the machine's now."""
        if len(self._latest_plain) < 3 or not self._costs:
            return
        window = self._drafted.setdefault(k, deque(maxlen=_DRAFTED_WINDOW))
        window.append(seconds / statistics.median(self._latest_plain))
        self._raise_from_use(k)

    def _raise_from_use(self, k: int) -> None:
        """Size k's raise from its latest passes in use, once there are enough of them."""
        window = self._drafted.get(k, ())
        if len(window) < _DRAFTED_WINDOW:
            return
        raised = max(1.0, statistics.median(window) / (self._table_cost(k) / self._table_cost(1)))
        if raised != self._raised.get(k, 1.0):  # (the memo is kept while nothing moved)
            self._raised[k] = raised
            self._memo.clear()

    def _raise(self, k: int) -> float:
        """The raise use showed for a k-token pass: its own, else between the sizes seen (a
        plain pass none), the largest seen's beyond them."""
        if k <= 1 or not self._raised:
            return 1.0
        largest = max(self._raised)
        if k >= largest:
            return self._raised[largest]
        return interpolate({1: 1.0, **self._raised}, k)

    def keep(self, time_slice: bool = True) -> None:
        """After an answer: with `time_slice`, a slice of the next sweep, while the table is a
        stand-in or the median of fewer than `_SWEEPS`; then write the refinements made since
        the last `keep` (none: nothing is written; nor for a table timed while the machine was
        busy, whose shape is the busy moment's, nor for a refinement from passes that lacked the
        cores, nor for a stand-in's: its own sweep is not yet whole)."""
        if self.standing_in:
            if time_slice:
                self._time_slice()
            return
        if time_slice:
            self._refine()
        if self._unsaved and not self._timed_busy and not self._refined_busy:
            self._unsaved = False
            self._save()

    def calibrate(self, progress: Callable[[str], None] | None = None) -> None:
        """Measure now what was never measured for this backend — the pass costs and the
        exactness — saying so through `progress`: a model's first answer then waits for
        neither."""
        if not self._loaded:
            self._load()
        if (not self._costs or self.standing_in) and progress:
            progress("measuring pass costs (once per model)")
        if self.standing_in:  # asked to measure now: the rest of its sweep
            self._measure_all()
            self._keep_timed()
        self._measured()
        unknown = self._exactness is None
        if unknown and self._exactness_key not in self._read(_EXACTNESS_FILE) and progress:
            progress("checking that blocks are exact (once per model)")
        self.exactness()

    def exactness(self) -> Exactness:
        """Whether a block's logits equal one-token passes' here: probed once, then kept."""
        if self._exactness is None:
            kept = self._read(_EXACTNESS_FILE).get(self._exactness_key)
            try:
                self._exactness = Exactness(bool(kept["bitwise"]), float(kept["max_difference"]))
            except (TypeError, KeyError, ValueError):
                self._exactness = probe_exactness(self._backend)
                with contextlib.suppress(OSError):  # unkept, it serves this run (as `_save`)
                    self._write(_EXACTNESS_FILE, self._exactness.as_dict(), self._exactness_key)
        return self._exactness

    def _measured(self) -> None:
        """The costs kept, or measured now and kept (for this run only where the machine was
        busy while they were timed: the next run times them again)."""
        if not self._loaded:
            self._load()
        if not self._costs:
            self._measure_all()
            self._keep_timed()

    def glance(self) -> Callable[[int], float]:
        """Each size's cost from its first timing (one of a sweep's `_REPEATS`), or the kept
        costs: enough to choose a runtime by (`runtimes.choose`). Why: a model a person brings
        was timed whole on every runtime that could run it, the one not chosen too (at 1.7B a
        full sweep of llama.cpp's passes took 24 s of a 79 s first start). The chosen table's
        sweep goes on where it is then priced (`cost`); the other keeps its glance
        (`keep_glance`)."""
        if not self._loaded:
            self._load()
        if not self._costs:
            sweep = self._sweep = self._sweep or self._new_sweep()
            with _behind_context(self._backend, sweep.sizes[-1]):
                sweep.run(units=len(sweep.sizes))
            glanced, _ = self._priced(sweep)
            return functools.partial(interpolate, glanced)
        return self._table_cost

    def keep_glance(self) -> _Sweep | None:
        """Keep a glance as this table (for a runtime not chosen: priced whole where it runs,
        its later sweeps refining it where they fit a slice), and give the sweep it began, for
        the table of another load of the model to go on from (`go_on_from`) where this runtime
        is chosen after all: the chooser closes each runtime before it loads the next."""
        sweep = self._sweep
        if sweep is None or self._costs:
            return None
        self._take(sweep)
        self._keep_timed()
        return sweep

    def go_on_from(self, sweep: _Sweep | None) -> None:
        """Time the rest of `sweep`, a glance another load of this model began (`keep_glance`),
        on this table's backend, and take it whole in place of the glance kept."""
        if sweep is None:
            return
        if not self._loaded:
            self._load()
        sweep.rebind(self._backend)
        self._costs.clear()
        self._sweep = sweep
        self._measured()

    def _keep_timed(self) -> None:
        """Write costs just timed, unless timed while the machine was busy."""
        if not self._timed_busy:
            self._save()

    def cost(self, k: int) -> float:
        known = self._memo.get(k)
        if known is None:
            self._measured()
            known = self._memo[k] = self._table_cost(k) * self._raise(k)
        return known

    def _table_cost(self, k: int) -> float:
        """A k-token pass's cost as timed (and scaled by plain passes since), before use raised it."""
        return interpolate(self._costs, k)

    def _measure_all(self) -> None:
        """Every size timed as decoding meets it (`_Sweep`), behind `CONTEXT` cached tokens: the
        context is filled first and given back after."""
        sweep = self._sweep or self._new_sweep()
        with _behind_context(self._backend, sweep.sizes[-1]):
            sweep.run()
        self._take(sweep)

    def _take(self, sweep: _Sweep) -> None:
        """The costs a finished sweep timed. A stand-in's costs go, and what use raised beyond
        them: raised against another count's shape."""
        costs, self._timed_busy = self._priced(sweep)
        self._costs.clear()
        self._costs.update(costs)
        # its sweeps start again: this one, if it had the cores (a busy moment's shape is none)
        self._shapes, self._refining = [], None
        if not self._timed_busy:
            self._shapes = [self._shape()]
        self._sweep, self._unsaved = None, False
        self._raised.clear()
        self._memo.clear()

    def _priced(self, sweep: _Sweep) -> tuple[dict[int, float], bool]:
        """What a sweep timed (whole or not) prices each size at, and whether it was timed
        while other work took the cores.

        Beside processes that take its cores, a pass waits for the core for as long again as
        it computes, at random: by the wall clock a 2-token pass read 0.4-4.5x a plain one and
        4 tokens 1-14x on a 2-core AMD EPYC beside two busy processes, and the policy drafted
        nothing. Its CPU time leaves the waits out (1.07-1.14x and 1.30-1.42x there; 1.09x and
        1.41x timed alone): there the shape is the CPU time's, on the wall clock's scale, which
        use then follows (`_observe`)."""
        timed, first = sweep.timings(), sweep.sizes[0]
        if had_the_cores(timed.cpu_seconds, timed.wall_seconds, self._backend, self._threads):
            return dict(timed.wall), False
        scale = timed.wall[first] / max(timed.cpu[first], 1e-9)
        return {k: scale * seconds for k, seconds in timed.cpu.items()}, True

    def stand_in(self, other: BlockCostTable) -> None:
        """Price this count's passes from `other`'s table until its own is timed, where none
        was kept: a count met in the middle of an answer (the load changed) is not timed there,
        which stalled the answer for the whole sweep (2.3 s on one thread for the bundled
        model; longer as the model's passes are), but a slice after each answer (`keep`). Use
        refines the stand-in as it does any table: its scale from this count's plain passes,
        its drafted sizes raised where they cost more."""
        self._load()
        if self._costs or not other.priced():
            return
        self._costs.update({k: other._table_cost(k) for k in other._costs})
        self._sweep = self._new_sweep()

    @property
    def standing_in(self) -> bool:
        """Priced from another count's table, its own sweep not yet whole (`stand_in`)."""
        return self._sweep is not None

    def priced(self) -> bool:
        """Whether this table has costs now (kept, timed or standing in), timing nothing."""
        return bool(self._costs)

    def _time_slice(self) -> None:
        """Time the next slice of a stand-in's own sweep, and take it when it is whole (a model
        whose units outlast a slice stands in for this run)."""
        if self._sweep is None or not self._unit_fits_a_slice():
            return
        if _slice(self._backend, self._sweep):
            self._take(self._sweep)
            self._keep_timed()

    def _refine(self) -> None:
        """Time the next slice of another sweep while the table is the median of fewer than
        `_SWEEPS`; a whole one joins them, and the table takes the median shape on its plain
        pass's scale (which use keeps following). A sweep that lacked the cores is dropped:
        its shape is the busy moment's."""
        if self._backend is None or not self._costs or len(self._shapes) >= _SWEEPS:
            return
        if not self._unit_fits_a_slice():
            return
        sweep = self._refining = self._refining or self._new_sweep()
        if not _slice(self._backend, sweep):
            return
        self._refining = None
        timed = sweep.timings()
        if not had_the_cores(timed.cpu_seconds, timed.wall_seconds, self._backend, self._threads):
            return
        self._shapes.append(_prices(timed.wall))
        self._costs.update(_median_costs(self._costs, self._shapes))
        self._timed_busy = False  # its shape is now the sweeps' timed alone
        self._memo.clear()
        for k in self._drafted:  # what use showed, against the table's new shape
            self._raised.pop(k, None)
            self._raise_from_use(k)
        self._unsaved = True

    def _unit_fits_a_slice(self) -> bool:
        """Whether the dearest unit of a sweep, the largest size between settled plain passes
        (`_Sweep.run`), fits in a slice at the table's prices."""
        unit = 2 * _SETTLE * self._table_cost(1) + self._table_cost(max(self._costs))
        return unit <= _UNIT_SECONDS


def _slice(backend, sweep: _Sweep) -> bool:
    """Time the next slice of `sweep` behind the cache as it is (given back after); whether the
    sweep is whole. An answer that left no room for the largest size times nothing: a later
    answer's end does."""
    if backend.n_committed + sweep.sizes[-1] >= backend.n_ctx:
        return False
    with _behind_context(backend, sweep.sizes[-1]):
        return sweep.run(_SLICE_SECONDS)


def _prices(costs: dict[int, float]) -> dict[int, float]:
    """Each size's cost over the plain pass's."""
    return {k: cost / costs[1] for k, cost in costs.items()}


def _median_costs(costs: dict[int, float], shapes: list[dict[int, float]]) -> dict[int, float]:
    """Each size at the median of the sweeps' prices over a plain pass, on `costs`' plain pass,
    never below a smaller size."""
    median, running = {}, 0.0
    for k in sorted(costs):
        prices = [shape[k] for shape in shapes if k in shape]
        ratio = statistics.median(prices) if prices else costs[k] / costs[1]
        running = max(running, costs[1] * ratio)
        median[k] = running
    return median


def _read_shapes(kept: object) -> list[dict[int, float]]:
    """The sweeps kept for a table (none, where the file says something else)."""
    try:
        shapes = [{int(k): float(r) for k, r in shape.items()} for shape in kept or []]
    except (ValueError, AttributeError, TypeError):
        return []
    return [shape for shape in shapes if shape.get(1) == 1.0][-_SWEEPS:]


def _sizes(backend) -> list[int]:
    """The sizes a table times: those that fit behind the cache (two at least, to extrapolate)."""
    n = backend.n_committed
    sizes = [k for k in _SIZES if k < backend.n_ctx - n] or [1]
    return sizes if len(sizes) > 1 else [1, 2]


@contextlib.contextmanager
def _behind_context(backend, largest: int) -> Iterator[None]:
    """Passes timed behind `CONTEXT` cached tokens (filler up to there, given back after)."""
    n = backend.n_committed
    filler = min(_FILLER_TOKEN, backend.vocab_size - 1)
    backend.prefill([filler] * max(0, min(CONTEXT, backend.n_ctx - largest - 1) - n))
    try:
        yield
    finally:
        backend.rollback(n)


def had_the_cores(cpu_seconds: float, wall_seconds: float, backend, threads: object) -> bool:
    """Whether a CPU backend's `threads` ran the whole time they were timed (`_ALONE_SHARE`); a
    GPU's passes leave the CPU waiting, so they are always taken as timed alone."""
    if backend.device != "cpu":
        return True
    threads = max(1, min(int(threads or 1), os.cpu_count() or 1))
    return cpu_seconds >= _ALONE_SHARE * threads * wall_seconds


def interpolate(costs: dict[int, float], k: int) -> float:
    """A k-token pass's cost from the measured sizes: a measured size's own, linear between
    them, the smallest's below them, the last slope past them."""
    if k in costs:
        return costs[k]
    sizes = sorted(costs)
    if k <= sizes[0]:
        return costs[sizes[0]]
    for low, high in zip(sizes, sizes[1:]):
        if low <= k <= high:
            share = (k - low) / (high - low)
            return costs[low] + share * (costs[high] - costs[low])
    top, below = sizes[-1], sizes[-2]
    slope = (costs[top] - costs[below]) / (top - below)
    return costs[top] + slope * (k - top)


def time_passes(
    backend: Backend, sizes: Sequence[int], repeats: int, threads: int | None = None
) -> dict[int, float]:
    """Seconds of a chain pass of each size behind the backend's cache as it is, timed as
    decoding meets it (`_Sweep`), by the wall clock."""
    sweep = _Sweep(backend, sizes, repeats, threads)
    sweep.run()
    return sweep.timings().wall


class _Timings(NamedTuple):
    wall: dict[int, float]  # a pass's seconds by the wall clock
    cpu: dict[int, float]  # the same by the process's CPU time
    cpu_seconds: float  # the whole sweep's CPU time
    wall_seconds: float  # and its wall time


class _Sweep:
    """Every size timed after settled plain one-token passes, and charged what it slows the
    `_SETTLE` plain passes after it (llama.cpp's one-token pass is slower after a larger one, and
    the next one too; priced without that, drafts looked cheaper than they are and the policy
    drafted where it lost). All sizes round-robin, so load changes hit every size alike; the
    minimum of the repeats for the pass itself (noise only ever adds time), the median for what
    it slows, made non-decreasing in k. On `threads` (default: the full count); by the wall
    clock and by CPU time at once (`BlockCostTable._measure_all` reads which held).

    Run whole (`run()`), or a slice at a time behind the cache as it is then (`run(seconds)`):
    a count met in use is timed between answers, never inside one (`BlockCostTable.stand_in`)."""

    def __init__(
        self, backend: Backend, sizes: Sequence[int], repeats: int, threads: int | None = None
    ) -> None:
        self._backend, self._threads = backend, threads
        self.sizes = list(sizes)
        self._units = [k for _ in range(repeats) for k in self.sizes]  # each size, each repeat
        self._next = 0
        clocks = range(2)  # the wall clock, CPU time
        self._best = [{k: float("inf") for k in self.sizes} for _ in clocks]
        self._slowed: list[dict[int, list[float]]] = [{k: [] for k in self.sizes} for _ in clocks]
        self._cpu_seconds = self._wall_seconds = 0.0

    @property
    def done(self) -> bool:
        return self._next >= len(self._units)

    def rebind(self, backend: Backend) -> None:
        """Go on timing on `backend`, another load of the same model (`BlockCostTable.go_on_from`)."""
        self._backend = backend

    def run(self, seconds: float | None = None, units: int | None = None) -> bool:
        """Time the units left (with `seconds`: units until that much time has gone, one at
        least; with `units`: until that many are timed, counted from the sweep's start);
        whether all are timed."""
        backend = self._backend
        filler = min(_FILLER_TOKEN, backend.vocab_size - 1)
        base = backend.n_committed

        def timed(k: int) -> tuple[float, float]:
            start, cpu = time.perf_counter(), time.process_time()
            backend.evaluate(Block.chain([filler] * k))
            seconds = time.perf_counter() - start, time.process_time() - cpu
            backend.rollback(base)
            return seconds

        start, cpu = time.perf_counter(), time.process_time()
        with held_threads(backend, self._threads):
            timed(1)  # a first pass sets up what later ones reuse
            while not self.done and (units is None or self._next < units):
                k = self._units[self._next]
                self._next += 1
                for _ in range(_SETTLE - 1):
                    timed(1)
                plain = timed(1)
                drafted = timed(k)
                after = [timed(1) for _ in range(_SETTLE)]
                for clock in range(2):
                    self._best[clock][k] = min(self._best[clock][k], drafted[clock])
                    self._slowed[clock][k].append(sum(t[clock] - plain[clock] for t in after))
                if seconds is not None and time.perf_counter() - start >= seconds:
                    break
        self._wall_seconds += time.perf_counter() - start
        self._cpu_seconds += time.process_time() - cpu
        return self.done

    def timings(self) -> _Timings:
        costs: list[dict[int, float]] = []
        for clock in range(2):
            costs.append({})
            running = 0.0
            for k in self.sizes:
                slowed = self._slowed[clock][k]
                tail = max(0.0, statistics.median(slowed)) if k > 1 and slowed else 0.0
                running = max(running, self._best[clock][k] + tail)
                costs[clock][k] = running
        return _Timings(costs[0], costs[1], self._cpu_seconds, self._wall_seconds)


class CostsByThreads:
    """A runtime's cost tables, one for each thread count its passes run on.

    Why: beside a busy process a runtime's passes run on fewer threads (threads_by_load.py),
    where a k-token pass costs another share of a plain one than on every thread. A single table
    for the full count, timed while the machine was busy, held the barrier stalls of threads
    sharing a core (a 2-token pass at 3-4.5x a plain one, 4 tokens at 6-14x, on a 2-core AMD EPYC
    beside two busy processes), and a new user's first answers drafted nothing at all; timed
    alone, it priced passes the runtime was not running. Each count's table is timed on that
    count (a count with a core for each thread times cleanly beside a busy process), kept as any
    table is, and prices the passes that run on it: the first count's when the model loads
    (`calibrate`), a count met later a slice after each answer, the nearest count's table
    standing in until then (`BlockCostTable.stand_in`)."""

    def __init__(self, backend, key: str) -> None:
        self._backend, self._key = backend, key
        self._tables: dict[int, BlockCostTable] = {}

    def table(self) -> BlockCostTable:
        """The table of the count the next pass runs on (the one running, inside `timing`): a
        count first met while another's table prices passes stands in on it until timed."""
        by_load = getattr(self._backend, "threads_by_load", None)
        count = by_load.threads if by_load is not None else self._backend.threads
        table = self._tables.get(count)
        if table is None:
            table = self._tables[count] = BlockCostTable(self._backend, self._key, count)
            priced = [other for other in self._tables.values() if other.priced()]
            if priced:  # the nearest count's shape
                table.stand_in(min(priced, key=lambda other: abs(other.threads - count)))
        return table

    def cost(self, k: int) -> float:
        return self.table().cost(k)

    def glance(self) -> Callable[[int], float]:
        return self.table().glance()

    def keep_glance(self) -> _Sweep | None:
        return self.table().keep_glance()

    def go_on_from(self, sweep: _Sweep | None) -> None:
        self.table().go_on_from(sweep)

    def timing(self, block: Block) -> contextlib.AbstractContextManager:
        """`BlockCostTable.timing` by the table of the count this pass runs on (entered after
        the load chose it: `following_load`)."""
        return self.table().timing(block)

    def calibrate(self, progress: Callable[[str], None] | None = None) -> None:
        self.table().calibrate(progress)

    def keep(self, time_slice: bool = True) -> None:
        """After an answer, with `time_slice` one slice at most: a stand-in's own sweep first,
        else another sweep of the table of the count the passes run on now (the count whose
        answers it prices)."""
        standing_in = [table for table in self._tables.values() if table.standing_in]
        for table in standing_in:
            table.keep(time_slice)
        current = self.table()
        for table in self._tables.values():
            if table not in standing_in:
                table.keep(time_slice and table is current and not standing_in)

    def exactness(self) -> Exactness:
        return self.table().exactness()


class MeasuredCosts:
    """What a backend that keeps a `BlockCostTable` or `CostsByThreads` as `_costs` reports of
    its passes."""

    _costs: BlockCostTable | CostsByThreads

    def block_cost(self, k: int) -> float:
        """Seconds of one k-token chain pass, measured once per model, device, threads (and
        dtype or layout) and kept."""
        return self._costs.cost(k)

    def glance_costs(self) -> Callable[[int], float]:
        """Pass costs from one timing a size, to choose a runtime by (`BlockCostTable.glance`)."""
        return self._costs.glance()

    def keep_glanced_costs(self) -> object:
        return self._costs.keep_glance()

    def go_on_from_glance(self, glance: object) -> None:
        self._costs.go_on_from(glance)  # type: ignore[arg-type]

    def calibrate(self, progress: Callable[[str], None] | None = None) -> None:
        self._costs.calibrate(progress)

    def keep_costs(self, time_slice: bool = True) -> None:
        self._costs.keep(time_slice)

    def exactness(self) -> Exactness:
        """Whether a block's rows equal one-token passes' bitwise here: probed once, kept."""
        return self._costs.exactness()
