"""The thread count a runtime's passes run with, following the load other processes put on the
machine.

Why: a pass's threads meet at a barrier after every matmul. Beside a busy process, one of two
threads on two cores shares its core and every barrier waits for it, so each pass takes several
times what it takes alone (measured: greedy at a quarter to a third of its idle speed with one
busy shell loop beside it) — while one thread alone keeps a whole core (0.7x the idle speed on an
AMD EPYC, docs/bench-log.md). So the count is the cores other processes leave free.

What other processes use is read, not guessed from pass times: the machine's CPU time
(`/proc/stat`, the cores this process may run on) less this process's own. An earlier version
judged the load from pass times; it had no idle time to compare with when the load was there
from the start, and its tries of the full count stalled a pass by 100+ ms each time. Where
`/proc/stat` cannot be read (macOS, Windows) the count stays the full one.

A pass's result does not depend on its thread count (each output row is one thread's fixed sum,
on int4 and llama.cpp alike: tests/backends/test_threads_by_load.py), so this changes speed only,
never an answer.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator

SAMPLE = 0.25  # seconds of wall time a reading of the load spans at least
FIRST = 0.1  # the same for the first reading after a start or a wait between answers
STALE = 2.0  # a reading spanning more than this while this process idled is restarted
IDLE = 0.1  # cores this process used, below which a long span was a wait between answers
BUSY = 0.5  # more than this share of a core used by others takes a thread away
CONFIRM = 2  # readings in a row that must agree before a thread is given back
SWITCH = "SPECCHAT_ADAPT_THREADS"  # "0": always the full count


def adapting() -> bool:
    """On unless turned off (`SPECCHAT_ADAPT_THREADS=0`: the test suite, and measurements of a
    fixed count)."""
    return os.environ.get(SWITCH, "1") != "0"


def held_threads(backend, threads: int | None = None) -> contextlib.AbstractContextManager:
    """`backend`'s passes on `threads` (default: its full count) while the context lasts, where
    its count follows the load (a measurement of its pass costs must time the count it is kept
    for)."""
    by_load = getattr(backend, "threads_by_load", None)
    return by_load.held(threads) if by_load is not None else contextlib.nullcontext()


def following_load(backend, set_threads: Callable[[int], None]):
    """A pass of `backend` on the thread count the load leaves, where its count follows the load:
    `set_threads` is called before the pass where the count changed, and the load read after."""
    by_load = getattr(backend, "threads_by_load", None)
    return by_load.passing(set_threads) if by_load is not None else contextlib.nullcontext()


class ProcStatLoad:
    """Cores used by other processes since the last reading, from `/proc/stat` (Linux)."""

    def __init__(self) -> None:
        self._cpus = {f"cpu{n}" for n in cores_here()}
        self._hz = os.sysconf("SC_CLK_TCK")
        self._last = self._now()
        self._due = FIRST  # seconds the next reading spans at least

    @classmethod
    def here(cls) -> ProcStatLoad | None:
        """A reader where this system has `/proc/stat`, else None."""
        try:
            reader = cls()
        except (OSError, ValueError, AttributeError):
            return None
        return reader if reader._last is not None else None

    def _busy_seconds(self) -> float | None:
        """CPU seconds spent on this process's cores by anything, since boot."""
        total, seen = 0, False
        with open("/proc/stat", encoding="ascii") as stat:
            for line in stat:
                name, _, rest = line.partition(" ")
                if name not in self._cpus:
                    continue
                # user nice system idle iowait irq softirq steal: all but idle and iowait
                fields = [int(v) for v in rest.split()[:8]]
                total += sum(fields) - fields[3] - fields[4]
                seen = True
        return total / self._hz if seen else None

    def _now(self) -> tuple[float, float, float] | None:
        busy = self._busy_seconds()
        return None if busy is None else (time.monotonic(), busy, time.process_time())

    def __call__(self) -> float | None:
        """Cores other processes used since the last call; None while the reading spans less
        than `SAMPLE` seconds, or spanned more than `STALE` in which this process idled (a wait
        between answers that no watch read, `ThreadsByLoad.watch_while_idle`: it starts again
        from now).

        The first reading after a start spans `FIRST`: an answer's first passes (its prompt,
        the longest) are where a wrong count costs most. Beside a busy process, waiting 0.25 s
        for it left a prompt and up to 20 passes on both threads (one pass 150 ms): a 128-token
        answer ran at 0.44x its idle speed, against 0.58x read sooner and from the start of the
        model's loading (docs/bench-log.md, session 50). A tenth of a second already tells one
        busy core from none here (readings 0.90-1.12 against 0.00-0.14).

        A long span in which this process computed is a reading like any other: it is one long
        pass, and the slowest passes are the ones beside a busy machine. Discarding every span
        over `STALE` kept a llama.cpp answer on both threads beside two busy processes, each
        pass of a long draft taking 3 s and so never read (2.2 tok/s, docs/bench-log.md
        session 49)."""
        if self._last is None or time.monotonic() - self._last[0] < self._due:
            return None  # (the clock first: `/proc/stat` is read four times a second, not a pass)
        now = self._now()
        if now is None:
            return None
        wall, own = now[0] - self._last[0], now[2] - self._last[2]
        others = ((now[1] - self._last[1]) - own) / wall
        self._last = now
        if wall > STALE and own < IDLE * wall:
            self._due = FIRST
            return None
        self._due = SAMPLE
        return max(0.0, others)


class ThreadsByLoad:
    """Says the thread count for the next pass (`threads`), told before every pass (`tick`)
    and, between answers, by a watch of its own (`watch_while_idle`).

    Each reading of the load gives the cores other processes left free; a count above that
    drops at once (a thread sharing its core stalls every barrier), one below it rises once
    `CONFIRM` readings in a row agree (a load that pauses for a moment is still there)."""

    def __init__(
        self, full: int, load: Callable[[], float | None] | None, cores: int | None = None
    ) -> None:
        self.full = max(1, full)
        self.threads = self.full
        self._load = load
        self._cores = cores or len(cores_here())
        self._rising = 0
        self._held = 0
        self._applied = self.full  # the count the runtime was last set to
        self._lock = threading.Lock()  # one reading at a time: a pass's, or the watch's
        self._passing = False
        self._passed = float("-inf")  # when the last pass ended (time.monotonic)
        self._closed = threading.Event()

    @classmethod
    def here(cls, full: int) -> ThreadsByLoad | None:
        """One that follows this machine's load where it can be read and more than one thread
        runs (else None: the count stays)."""
        if full <= 1 or not adapting():
            return None
        load = ProcStatLoad.here()
        if load is None:
            return None
        by_load = cls(full, load)
        by_load.watch_while_idle()
        return by_load

    def watch_while_idle(self, every: float = SAMPLE) -> None:
        """Read the load every `every` seconds in which no pass ran, on a thread of its own,
        until `close` (or until nothing else holds this object).

        Why: between answers no pass reads the load, so an answer began on the count the last
        one ended with. A load that ended while the person typed left the next answer's first
        ~50 passes on one thread; one that began left its prompt on both (after a wait longer
        than `STALE` the reading started again with the answer). Read while idle, the count
        is the load's when the answer starts, and the idle readings are the cleanest there
        are: this process adds nothing to them (docs/bench-log.md, session 51)."""
        threading.Thread(
            target=_watch, args=(weakref.ref(self), self._closed, every),
            name="specchat-load-watch", daemon=True,
        ).start()  # fmt: skip

    def close(self) -> None:
        """Ends the watch."""
        self._closed.set()

    def idle_tick(self, every: float) -> None:
        """The watch's turn: a reading where no pass ran for `every` seconds."""
        with self._lock:
            if not self._passing and time.monotonic() - self._passed >= every:
                self.tick()

    @property
    def reduced(self) -> bool:
        """Whether passes now run on fewer threads than the full count."""
        return self.threads < self.full

    @contextlib.contextmanager
    def held(self, threads: int | None = None) -> Iterator[None]:
        """Passes on `threads` (default: the full count) while it lasts (a measurement of the
        pass costs)."""
        with self._lock:  # (not between the watch's reading and its count)
            self._held += 1
            kept, self.threads = self.threads, min(self.full, threads or self.full)
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1
                self.threads = kept

    @contextlib.contextmanager
    def passing(self, set_threads: Callable[[int], None]) -> Iterator[None]:
        """One pass: the load read first where a reading is due, then on `threads`
        (`set_threads` called where it changed). Read before the pass, not after: an answer's
        first pass (its prompt, the longest of all) already runs on what the load leaves; read
        after, it ran on every thread (beside two busy processes, 1.33 s of one answer's
        prefill)."""
        with self._lock:
            self._passing = True
            self.tick()
        try:
            if self.threads != self._applied:
                set_threads(self.threads)
                self._applied = self.threads
            yield
        finally:
            self._passed, self._passing = time.monotonic(), False

    def tick(self) -> None:
        """Before a pass: read the load when a reading is due, and move the count by it."""
        if self._held or self._load is None:
            return
        others = self._load()
        if others is None:
            return
        free = self._cores - others
        wanted = max(1, min(self.full, int(free + 1.0 - BUSY)))
        if wanted < self.threads:
            self.threads, self._rising = wanted, 0
        elif wanted > self.threads:
            self._rising += 1
            if self._rising >= CONFIRM:
                self.threads, self._rising = wanted, 0
        else:
            self._rising = 0


def _watch(by_load: weakref.ref, closed: threading.Event, every: float) -> None:
    """`ThreadsByLoad.watch_while_idle`'s thread: holds its object only while reading."""
    while not closed.wait(every):
        watched = by_load()
        if watched is None:
            return
        watched.idle_tick(every)
        del watched


def cores_here() -> set[int]:
    """The cores this process may run on."""
    try:
        return os.sched_getaffinity(0)
    except AttributeError:
        return set(range(os.cpu_count() or 1))
