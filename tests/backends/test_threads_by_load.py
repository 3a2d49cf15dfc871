"""The thread count follows the load other processes put on the machine: judged here from given
readings of that load (the suite never depends on how busy its machine is), read from the real
`/proc/stat` beside a real busy process, applied to both CPU runtimes between passes; and a pass's
result does not depend on its thread count."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from specchat.backends.base import Block, ChatMessage
from specchat.backends.threads_by_load import (
    CONFIRM,
    FIRST,
    SAMPLE,
    ProcStatLoad,
    ThreadsByLoad,
    cores_here,
)
from specchat.prompting import chat_prompt_ids

ALONE, ONE_BUSY_PROCESS = 0.05, 1.0  # cores other processes use


class Readings:
    """The load, as a test sets it: what each reading of it says."""

    def __init__(self, others: float = ALONE) -> None:
        self.others = others

    def __call__(self) -> float | None:
        return self.others


def passes(by_load: ThreadsByLoad, n: int) -> list[int]:
    """The thread counts `n` passes ran on, the load read after each."""
    used = []
    for _ in range(n):
        used.append(by_load.threads)
        by_load.tick()
    return used


def test_alone_every_pass_runs_on_every_thread() -> None:
    by_load = ThreadsByLoad(2, Readings(ALONE), cores=2)
    assert set(passes(by_load, 200)) == {2} and not by_load.reduced


def test_beside_a_busy_process_it_runs_on_one_thread_and_comes_back_when_the_load_goes() -> None:
    load = Readings(ALONE)
    by_load = ThreadsByLoad(2, load, cores=2)
    passes(by_load, 5)
    load.others = 0.67  # a busy process beside two spinning threads gets two thirds of a core
    assert passes(by_load, 3) == [2, 1, 1]  # the next pass already runs on one
    load.others = ONE_BUSY_PROCESS  # beside one thread it gets a whole core: it stays busy
    assert set(passes(by_load, 100)) == {1} and by_load.reduced
    load.others = ALONE
    assert passes(by_load, CONFIRM + 2) == [1] * CONFIRM + [2, 2] and not by_load.reduced


def test_an_answers_first_pass_already_runs_on_what_the_load_leaves() -> None:
    """The prompt's pass, the longest of an answer, is not run on every thread beside a busy
    process just because no pass has read the load yet."""
    by_load = ThreadsByLoad(2, Readings(ONE_BUSY_PROCESS), cores=2)
    set_to: list[int] = []
    with by_load.passing(set_to.append):
        assert set_to == [1] and by_load.reduced


def test_a_load_that_pauses_for_a_moment_keeps_the_thread_away() -> None:
    load = Readings(ONE_BUSY_PROCESS)
    by_load = ThreadsByLoad(2, load, cores=2)
    passes(by_load, 3)
    for _ in range(20):  # a build between two jobs: idle one reading in every three
        load.others = ALONE
        passes(by_load, 1)
        load.others = ONE_BUSY_PROCESS
        assert set(passes(by_load, 2)) == {1}


def test_on_more_cores_it_keeps_what_the_others_leave() -> None:
    load = Readings(2.9)  # three busy processes on eight cores
    by_load = ThreadsByLoad(8, load, cores=8)
    passes(by_load, 2)
    assert by_load.threads == 5
    load.others = 9.0  # more than the machine: one thread still runs
    passes(by_load, 2)
    assert by_load.threads == 1


def test_a_measurement_of_pass_costs_runs_on_every_thread() -> None:
    by_load = ThreadsByLoad(2, Readings(ONE_BUSY_PROCESS), cores=2)
    passes(by_load, 3)
    assert by_load.reduced
    with by_load.held():
        assert passes(by_load, 20) == [2] * 20
    assert by_load.reduced
    with by_load.held(1):  # (the table of the count the load leaves)
        assert passes(by_load, 20) == [1] * 20


def test_no_reading_of_the_load_leaves_the_count_as_it_is() -> None:
    by_load = ThreadsByLoad(2, lambda: None, cores=2)
    assert set(passes(by_load, 50)) == {2}


def until(condition, seconds: float = 5.0) -> bool:
    """Whether `condition()` comes true within `seconds` (a thread of the watch's own must
    have had its turn; a slow machine only makes it come later)."""
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


def test_the_watch_leaves_a_running_pass_to_read_the_load_itself() -> None:
    load = Readings(ALONE)
    by_load = ThreadsByLoad(2, load, cores=2)
    by_load.watch_while_idle(every=0.01)
    try:
        with by_load.passing(lambda threads: None):
            load.others = ONE_BUSY_PROCESS
            time.sleep(0.2)  # twenty turns of the watch
            assert by_load.threads == 2
        assert until(lambda: by_load.threads == 1)  # idle again: the watch reads it
    finally:
        by_load.close()


needs_proc_stat = pytest.mark.skipif(
    not Path("/proc/stat").exists() or len(cores_here()) < 2, reason="reads Linux's /proc/stat"
)


def reading(load: ProcStatLoad) -> float:
    """One reading of the load over a little more than `SAMPLE` seconds."""
    time.sleep(SAMPLE * 1.2)
    others = load()
    assert others is not None
    return others


@needs_proc_stat
def test_the_machine_reading_sees_a_busy_process() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # started
        load = ProcStatLoad()
        assert reading(load) >= 0.6
    finally:
        busy.kill()
        busy.wait()


@needs_proc_stat
def test_the_machine_reading_leaves_out_this_process_itself() -> None:
    """Two threads of this process busy on two cores are not load: the reading stays below what
    they use (another worker of the suite may still use a core)."""
    stop = threading.Event()
    data = b"x" * 1_000_000

    def spin() -> None:
        while not stop.is_set():
            hashlib.sha256(data).digest()  # without the GIL: a core each

    spinners = [threading.Thread(target=spin) for _ in range(2)]
    for thread in spinners:
        thread.start()
    try:
        load = ProcStatLoad()
        others = reading(load)
    finally:
        stop.set()
        for thread in spinners:
            thread.join()
    assert others <= len(cores_here()) - 0.5


LONG_PASS_THEN_WAIT = """
import hashlib, time
import specchat.backends.threads_by_load as by_load
by_load.STALE = 2 * by_load.SAMPLE
load = by_load.ProcStatLoad()
end = time.monotonic() + 3 * by_load.SAMPLE
while time.monotonic() < end:  # computing: a long pass
    hashlib.sha256(b"x" * 100_000).digest()
after_pass = load()
time.sleep(3 * by_load.SAMPLE)  # idle: a wait between answers
after_wait = load()
time.sleep(1.2 * by_load.FIRST)
print(after_pass is not None, after_wait is None, load() is not None)
"""


@needs_proc_stat
def test_a_long_pass_is_read_and_a_long_wait_between_answers_is_not() -> None:
    """Beside a busy machine a pass can take seconds: the span it filled is a reading (else the
    count never drops while passes stay that slow); a span as long that the process waited
    through says nothing about now, and the reading starts again after it, due sooner than
    others (the next answer's first passes run on its count). In a process of its own (nothing
    else of the suite's spends its CPU time), STALE shortened to take a second."""
    done = subprocess.run(
        [sys.executable, "-c", LONG_PASS_THEN_WAIT], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["True", "True", "True"]


@needs_proc_stat
def test_the_first_reading_comes_sooner_than_the_rest() -> None:
    """A reader's first reading is due after `FIRST`; the ones after it after `SAMPLE`."""
    assert FIRST < SAMPLE
    load = ProcStatLoad()
    time.sleep(1.2 * FIRST)
    read = time.monotonic()  # (before the reading: what follows is measured from no later)
    assert load() is not None
    time.sleep(1.2 * FIRST)
    second = load()
    if time.monotonic() - read < SAMPLE:  # (a sleep the machine stretched past it says nothing)
        assert second is None


@needs_proc_stat
def test_a_model_loaded_beside_a_busy_process_runs_its_first_prompt_on_one_thread(
    bundled_gguf, monkeypatch
) -> None:
    """The load is read from the moment the model starts loading: a prompt given at once after
    it already runs on the thread the busy process leaves. (Read from the end of the loading,
    no reading was due yet, and the prompt and the first passes ran on both threads: one pass
    took 150 ms, and a 128-token answer ran at 0.44x its idle speed against 0.58x.) On int4,
    whose loading takes ten times `FIRST` here (1.0-1.5 s): llama.cpp's takes 0.13 s at this
    context, too close to `FIRST` for a test that must not depend on the machine's speed."""
    monkeypatch.setenv("SPECCHAT_ADAPT_THREADS", "1")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # started
        backend, runtime_threads = backend_on_two_threads(bundled_gguf, "int4")
        try:
            backend.prefill(chat_prompt_ids(backend, [ChatMessage("user", "Name a river.")]))
            assert backend.threads_by_load.threads == 1
            assert runtime_threads(backend) == 1
        finally:
            backend.close()
    finally:
        busy.kill()
        busy.wait()


def backend_on_two_threads(bundled_gguf, runtime: str):
    """`runtime` on the bundled model on two threads, and how to ask it its thread count now."""
    from specchat.backends.int4.backend import Int4Backend
    from specchat.backends.llama import LlamaBackend

    if runtime == "int4":
        return Int4Backend(bundled_gguf, n_ctx=512, threads=2), lambda b: b.model.threads
    backend = LlamaBackend(bundled_gguf, n_ctx=512, threads=2)
    return backend, lambda b: b._lib.llama_n_threads(b._ctx)


@pytest.mark.parametrize("runtime", ["int4", "llama"])
def test_the_runtime_runs_on_the_count_the_load_leaves_and_answers_the_same(
    runtime, bundled_gguf
) -> None:
    """What lets the count change between passes: the same logits bit for bit, on every runtime
    it changes on; and the runtime is set to the count before its next pass."""
    backend, runtime_threads = backend_on_two_threads(bundled_gguf, runtime)
    load = Readings(ALONE)
    backend.threads_by_load = ThreadsByLoad(2, load, cores=2)
    ids = chat_prompt_ids(backend, [ChatMessage("user", "Name three rivers.")])
    rows = {}
    try:
        for others in (ALONE, ONE_BUSY_PROCESS):
            load.others = others
            backend.rollback(0)
            backend.prefill(ids[:-4])
            for token in ids[-4:-1]:  # the load is read after each pass
                backend.evaluate(Block.chain([token]))
                backend.commit([0])
            rows[backend.threads_by_load.threads] = backend.evaluate(Block.chain(ids[-1:] * 3))
            assert runtime_threads(backend) == backend.threads_by_load.threads
    finally:
        backend.close()
    assert sorted(rows) == [1, 2]
    assert np.array_equal(rows[1], rows[2])


@pytest.mark.measured_costs
def test_passes_are_priced_by_a_table_timed_on_the_count_they_run_on(
    bundled_gguf, tmp_path, monkeypatch
) -> None:
    """Beside a busy process the passes run on one thread, and the policy prices drafts by a
    table timed on that one thread (with a core of its own): timed on both threads, the busy
    moment's barrier stalls priced a 2-token pass at several plain ones and a new user's first
    answer drafted nothing. When the load goes in the middle of an answer, the answer goes on at
    once, priced by the one-thread table (timing the full count there stalled it for the whole
    sweep); the full count's own table is timed on it a slice after each answer, then kept."""
    from specchat.backends import block_cost

    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(block_cost, "_SLICE_SECONDS", 0.0)  # one size's passes a slice
    monkeypatch.setattr(block_cost, "_UNIT_SECONDS", 1e9)  # however slow the test machine
    backend, runtime_threads = backend_on_two_threads(bundled_gguf, "int4")
    load = Readings(ONE_BUSY_PROCESS)
    backend.threads_by_load = ThreadsByLoad(2, load, cores=2)
    ran_on: list[int] = []
    evaluate = backend.evaluate

    def counted(block: Block) -> np.ndarray:
        rows = evaluate(block)
        ran_on.append(runtime_threads(backend))
        return rows

    backend.evaluate = counted
    try:
        backend.prefill(chat_prompt_ids(backend, [ChatMessage("user", "Name a river.")]))
        # (at least a plain pass: which is dearer is the timing's, on a machine running tests)
        assert backend.block_cost(4) >= backend.block_cost(1) > 0
        assert set(ran_on) == {1} and len(ran_on) > 20  # timed now, all on one thread
        one_thread = [backend.block_cost(k) for k in (1, 2, 4, 8)]
        load.others = ALONE
        for _ in range(CONFIRM):
            backend.evaluate(Block.chain([1]))
        ran_on.clear()
        two_threads = backend._costs.table()
        assert [backend.block_cost(k) for k in (1, 2, 4, 8)] == one_thread
        assert two_threads.standing_in and ran_on == []  # nothing timed inside the answer
        # a slice: the first pass, one size's settled passes, its pass and the passes after it
        slice_passes = 2 * block_cost._SETTLE + 2
        after_answers = 0
        while two_threads.standing_in and after_answers < 100:
            backend.keep_costs()  # what the engine does after each answer
            after_answers += 1
            assert 0 < len(ran_on) <= slice_passes and set(ran_on) == {2}
            ran_on.clear()
        assert not two_threads.standing_in and after_answers > 1
        assert backend.block_cost(4) >= backend.block_cost(1) > 0
        assert [backend.block_cost(k) for k in (1, 2, 4, 8)] != one_thread  # its own now
    finally:
        backend.close()


@pytest.mark.parametrize("runtime", ["int4", "llama"])
def test_a_prompt_runs_on_the_count_the_load_leaves(runtime, bundled_gguf) -> None:
    """A prompt's passes are an answer's longest: beside a busy process they run on the threads
    it leaves, not on every thread (each barrier waiting for the thread that shares a core)."""
    backend, runtime_threads = backend_on_two_threads(bundled_gguf, runtime)
    backend.threads_by_load = ThreadsByLoad(2, Readings(ONE_BUSY_PROCESS), cores=2)
    ids = chat_prompt_ids(backend, [ChatMessage("user", "Name three rivers.")])
    try:
        backend.prefill(ids)
        assert backend.threads_by_load.threads == 1
        assert runtime_threads(backend) == 1
    finally:
        backend.close()


def test_the_status_line_says_when_the_chat_runs_on_fewer_threads(int4_backend, tmp_path) -> None:
    from specchat.app.session import ChatSession
    from specchat.history import HistoryStore
    from specchat.options import RunConfig

    config = RunConfig(backend="int4")
    session = ChatSession(
        config, config, HistoryStore(tmp_path / "chat.sqlite3"), backend=int4_backend,
        save_settings_file=False,
    )  # fmt: skip
    load = Readings(ALONE)
    int4_backend.threads_by_load = by_load = ThreadsByLoad(2, load, cores=2)
    try:
        passes(by_load, 3)
        assert "threads" not in session.model_label
        load.others = ONE_BUSY_PROCESS
        passes(by_load, 1)
        assert "1 of 2 threads: the machine is busy" in session.model_label
    finally:
        int4_backend.threads_by_load = None
        session.history.close()


@needs_proc_stat
def test_the_load_is_read_while_no_pass_runs(monkeypatch) -> None:
    """Between answers nothing passes, yet a busy process that starts meanwhile is seen; the
    watch ends with its runtime."""
    monkeypatch.setenv("SPECCHAT_ADAPT_THREADS", "1")
    before = set(threading.enumerate())
    by_load = ThreadsByLoad.here(2)
    watches = [t for t in set(threading.enumerate()) - before if t.name == "specchat-load-watch"]
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert until(lambda: by_load.threads == 1)
    finally:
        busy.kill()
        busy.wait()
        by_load.close()
    assert watches and all(until(lambda t=t: not t.is_alive()) for t in watches)


@pytest.mark.parametrize("runtime", ["int4", "llama"])
def test_an_answer_after_a_wait_runs_on_the_load_that_wait_left(runtime, bundled_gguf) -> None:
    """A person types; meanwhile a busy process ends, or begins. The next answer's first pass
    runs on what the load leaves then. (Before the watch, after a load ended, an answer's first
    ~50 passes stayed on one thread; after one began during a wait longer than `STALE`, its
    prompt ran on both: docs/bench-log.md, session 51.)"""
    backend, runtime_threads = backend_on_two_threads(bundled_gguf, runtime)
    load = Readings(ONE_BUSY_PROCESS)
    backend.threads_by_load = by_load = ThreadsByLoad(2, load, cores=2)
    by_load.watch_while_idle(every=0.01)
    prompt = chat_prompt_ids(backend, [ChatMessage("user", "Name a river.")])
    try:
        for others, threads in ((ONE_BUSY_PROCESS, 1), (ALONE, 2), (ONE_BUSY_PROCESS, 1)):
            load.others = others  # while the person types
            assert until(lambda n=threads: by_load.threads == n)  # the watch's: no pass ran
            backend.rollback(0)
            backend.prefill(prompt)
            assert runtime_threads(backend) == threads
    finally:
        by_load.close()
        backend.close()
