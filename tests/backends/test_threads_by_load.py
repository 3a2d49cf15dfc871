"""The thread count follows the machine's load, judged from pass times given here (the suite never
depends on how fast its machine is); and a pass's result does not depend on its thread count."""

from __future__ import annotations

import numpy as np

from specchat.backends.base import Block, ChatMessage
from specchat.backends.threads_by_load import (
    PROBE_EVERY,
    RETRY_AFTER,
    SETTLE,
    WINDOW,
    ThreadsByLoad,
)
from specchat.prompting import chat_prompt_ids

ALONE = 0.005  # a one-token pass on two threads, the machine alone


def run(by_load: ThreadsByLoad, passes: int, seconds_on) -> list[int]:
    """`passes` one-token passes, each taking `seconds_on(threads)`; the counts they ran on."""
    used = []
    for _ in range(passes):
        used.append(by_load.threads)
        by_load.observe(1, seconds_on(by_load.threads))
    return used


def test_alone_every_pass_runs_on_every_thread() -> None:
    by_load = ThreadsByLoad(2)
    assert set(run(by_load, 500, lambda t: ALONE * (1.3 if t == 1 else 1.0))) == {2}


def test_beside_a_busy_process_it_runs_on_fewer_threads_and_comes_back_when_the_load_goes() -> None:
    """Busy: two threads wait at every barrier (4x slower), one thread keeps a core (1.8x)."""
    by_load = ThreadsByLoad(2)
    run(by_load, 20, lambda t: ALONE)  # learns what a pass costs alone
    busy = run(by_load, 300, lambda t: ALONE * (4.0 if t == 2 else 1.8))
    assert busy.count(1) / len(busy) > 0.8 and by_load.reduced
    # the full count is still tried now and then, a window at a time
    assert busy[-PROBE_EVERY * 2 :].count(2) <= 2 * (SETTLE + WINDOW)
    idle = run(by_load, 200, lambda t: ALONE * (1.0 if t == 2 else 1.8))
    assert idle[-100:] == [2] * 100 and not by_load.reduced


def test_where_fewer_threads_do_not_help_it_keeps_every_thread_for_a_while() -> None:
    by_load = ThreadsByLoad(2)
    run(by_load, 20, lambda t: ALONE)
    used = run(by_load, RETRY_AFTER, lambda t: ALONE * (3.0 if t == 2 else 5.0))
    assert used.count(1) <= SETTLE + WINDOW  # one try, then the full count


def test_a_measurement_of_pass_costs_runs_on_every_thread() -> None:
    by_load = ThreadsByLoad(2)
    run(by_load, 20, lambda t: ALONE)
    run(by_load, 30, lambda t: ALONE * (4.0 if t == 2 else 1.8))
    assert by_load.reduced
    with by_load.held():
        assert run(by_load, 50, lambda t: ALONE * 4.0) == [2] * 50


def test_the_answer_is_the_same_on_one_thread_and_two(int4_backend) -> None:
    """What lets the count change between passes: the same logits bit for bit."""
    backend = int4_backend
    ids = chat_prompt_ids(backend, [ChatMessage("user", "Name three rivers.")])
    rows = {}
    try:
        for threads in (1, 2):
            backend.model.threads = threads
            backend.rollback(0)
            backend.prefill(ids[:-1])
            rows[threads] = backend.evaluate(Block.chain([ids[-1], *ids[-4:-1]]))
    finally:
        backend.model.threads = 1
        backend.rollback(0)
    assert np.array_equal(rows[1], rows[2])


def test_the_status_line_says_when_the_chat_runs_on_fewer_threads(int4_backend, tmp_path) -> None:
    from specchat.app.session import ChatSession
    from specchat.history import HistoryStore
    from specchat.options import RunConfig

    config = RunConfig(backend="int4")
    session = ChatSession(
        config, config, HistoryStore(tmp_path / "chat.sqlite3"), backend=int4_backend,
        save_settings_file=False,
    )  # fmt: skip
    int4_backend.threads_by_load = by_load = ThreadsByLoad(2)
    try:
        run(by_load, 20, lambda t: ALONE)
        assert "threads" not in session.model_label
        run(by_load, 20, lambda t: ALONE * (4.0 if t == 2 else 1.8))
        assert "1 of 2 threads: the machine is busy" in session.model_label
    finally:
        int4_backend.threads_by_load = None
        session.history.close()
