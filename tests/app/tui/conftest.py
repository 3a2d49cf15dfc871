"""TUI fixtures: private config/data dirs per test, the real bundled model shared by the session,
a pilot helper that waits on conditions instead of sleeping, a gate that parks the answer's worker
at a step boundary, and a fixed chat for snapshots."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from specchat.engine.events import StepEvent
from specchat.engine.stats import GenerationStats
from specchat.history import HistoryStore, StoredMessage


@pytest.fixture(autouse=True)
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    return tmp_path


@pytest.fixture(scope="session")
def tui_backend():
    """The bundled SmolLM2 on llama.cpp, one thread: other processes share the two cores while
    the suite runs, and llama.cpp's threads spin badly when the cores are oversubscribed."""
    from specchat.models import LoadOptions, load_model

    loaded = load_model(None, LoadOptions(backend="llama", threads=1, n_ctx=2048))
    yield loaded
    loaded.close()


@pytest.fixture
def backend(tui_backend):
    """The session's model with an empty cache."""
    tui_backend.rollback(0)
    return tui_backend


def app_on_chat(backend, stored_chat: tuple[HistoryStore, int], **settings):
    """The app opened on a stored chat (a fixture's store and chat id) with these settings."""
    from specchat.app.tui.app import SpecchatApp
    from specchat.options import RunConfig

    store, chat = stored_chat
    return SpecchatApp(
        settings=RunConfig(**settings),
        backend=backend,
        history=store,
        chat_id=chat,
        save_settings_file=False,
    )


async def wait_until(pilot, condition, limit: float = 120.0) -> None:
    """Pause the pilot until `condition()` holds; `limit` only guards against a hang."""
    waited = 0.0
    while not condition():
        await pilot.pause(0.02)
        waited += 0.02
        if waited > limit:
            raise AssertionError("condition not reached")


class StepGate:
    """Parks the worker that consumes `engine.generate` at one moment of the next answer, so a
    test can press a key there however fast or slow the machine is.

    `after=0` parks it once the prompt is built, before the engine is called; `after=n` parks it
    once the engine has yielded its n-th step, where the engine's generator is suspended: it
    resumes with its step-boundary checks (cancel, decoder switch) before the next step. The model
    and the engine run for real; the gate only holds the thread that asks for the next event.
    Use it as a context manager: leaving releases the worker and restores the engine.
    """

    def __init__(self, engine, after: int, limit: float = 120.0) -> None:
        self.engine = engine
        self.after = after
        self.limit = limit  # only guards against a hang
        self.held = threading.Event()
        self._released = threading.Event()
        self.decoders: list[str] = []  # the decoder of every step event, in order

    def __enter__(self) -> StepGate:
        original = self.engine.generate

        def generate(request, cancel=None):
            if self.after == 0:
                self._hold()
            for event in original(request, cancel):
                if isinstance(event, StepEvent):
                    self.decoders.append(event.decoder)
                yield event
                if len(self.decoders) == self.after and not self.held.is_set():
                    self._hold()

        self.engine.generate = generate  # on this engine object only
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()
        del self.engine.generate

    def _hold(self) -> None:
        self.held.set()
        if not self._released.wait(self.limit):
            raise RuntimeError("the test never released the step gate")

    def release(self) -> None:
        self._released.set()


@pytest.fixture
def fixed_chat(private_dirs: Path) -> tuple[HistoryStore, int]:
    """A stored chat with coloured runs and frozen figures: what the snapshots show."""
    store = HistoryStore(private_dirs / "data" / "snap.sqlite3")
    chat = store.new_chat("Repeating a sentence")
    store.add_message(chat, StoredMessage("user", "Repeat: the cat sat on the mat. The cat sat."))
    text = "The cat sat on the mat. The cat sat on the mat, and then it slept in the sun."
    runs = [(7, 23, 5, "prompt"), (23, 50, 9, "saved"), (55, 62, 2, "previous")]
    stats = GenerationStats(
        generated_tokens=21, steps=7, drafted=30, accepted=16, decode_seconds=0.125
    )
    assert stats.tokens_per_second == 168.0
    store.add_message(
        chat,
        StoredMessage(
            "assistant",
            text,
            "pld",
            "eos",
            stats=stats,
            runs=runs,
            elapsed_seconds=0.21,
            params="max_ngram=3",
        ),
    )
    store.add_message(chat, StoredMessage("user", "And in **Markdown**, with a list?"))
    answer = "Sure:\n\n- the cat\n- the mat\n\n`code` and **bold**"
    store.add_message(
        chat,
        StoredMessage(
            "assistant",
            answer,
            "greedy",
            "cancelled",
            stats=replace(stats, generated_tokens=12, steps=12, drafted=0, accepted=0),
            runs=[(0, 5, 3)],
            elapsed_seconds=0.21,
            params="",
        ),
    )
    return store, chat


@pytest.fixture
def anyio_backend() -> str:
    """The async tests run on asyncio through anyio's pytest plugin (installed with httpx)."""
    return "asyncio"


# An answer holding a heading, a list, a highlighted code fence and a table, as the steps that
# made it: (text, tokens, source, rejected text, rejected tokens). Runs of every length bucket
# (2–3, 4–7, 8+ tokens) and from every draft source, some of them inside the code block.
MARKDOWN_STEPS = (
    ("## Fibonacci", 3, "chat", "", 0),
    (", three ways\n\n", 1, "", "", 0),
    ("The *iterative* one", 4, "prompt", " is slow", 2),
    (" is **fastest**:\n\n", 1, "", " is", 1),
    ("- recursive: `fib(n - 1) + fib(n - 2)`\n", 9, "prompt", "", 0),
    ("- memoised", 2, "saved", "\n- iter", 3),
    (" with `lru_cache`\n", 1, "", "", 0),
    ("- iterative, below\n\n", 5, "chat", "", 0),
    ("```python\ndef fib(n: int) -> int:\n", 6, "previous", "", 0),
    ("    a, b = 0, 1\n", 1, "", "", 0),
    ("    for _ in range(n):\n", 3, "lookahead", "    ", 1),
    ("        a, b = b, a + b\n    return a\n", 10, "prompt", "\n\nprint", 3),
    ("```\n\n", 1, "", "", 0),
    ("| n | fib(n) |\n|---|-------:|\n", 4, "draft", "| 1", 2),
    ("| 10 | 55 |\n", 1, "", "", 0),
    ("| 20 | 6765 |", 3, "saved", "", 0),
)


def modelled_pass_seconds(drafted: int) -> float:
    """A pass's cost in the scripted answer: 11 ms, and 1.5 ms a drafted token."""
    return 0.011 + 0.0015 * drafted


def markdown_step_events() -> list[StepEvent]:
    """MARKDOWN_STEPS as the engine would have sent them (token ids are stand-ins)."""
    events = []
    for text, tokens, source, _rejected, rejected_tokens in MARKDOWN_STEPS:
        accepted = tokens - 1 if source else 0
        drafted = accepted + rejected_tokens
        events.append(
            StepEvent(
                tokens=tuple(range(100, 100 + tokens)),
                text=text,
                drafted=drafted,
                accepted=accepted,
                decoder="suffix",
                seconds=modelled_pass_seconds(drafted) + 0.0005,
                source=source,
                rejected=tuple(range(200, 200 + rejected_tokens)),
                depth=drafted,
                pass_seconds=modelled_pass_seconds(drafted),
            )
        )
    return events


def markdown_answer() -> StoredMessage:
    """The answer of MARKDOWN_STEPS as the chat stores it: text, runs, stats and steps."""
    from specchat.answer_steps import AnswerSteps, DraftStep
    from specchat.run_spans import RunText

    events = markdown_step_events()
    runs, stats = RunText(), GenerationStats(prompt_tokens=31, prefill_seconds=0.02)
    for event in events:
        runs.add_step(event.text, len(event.tokens), event.source)
        stats = stats.with_step(event)
    rejected = [step[3] for step in MARKDOWN_STEPS]
    largest = max(event.drafted for event in events)
    steps = AnswerSteps(
        tuple(DraftStep.of(event, text) for event, text in zip(events, rejected)),
        tuple(modelled_pass_seconds(k - 1) for k in range(1, largest + 2)),
    )
    return StoredMessage(
        "assistant",
        runs.text,
        "suffix",
        "eos",
        stats=stats,
        runs=list(runs.runs),
        elapsed_seconds=round(stats.decode_seconds + 0.03, 3),
        params="",
        steps=steps,
    )


@pytest.fixture
def markdown_chat(private_dirs: Path) -> tuple[HistoryStore, int]:
    """A stored chat whose answer is Markdown of every kind with runs of every length and
    source, and its steps (the drafts view)."""
    store = HistoryStore(private_dirs / "data" / "markdown.sqlite3")
    chat = store.new_chat("Fibonacci")
    store.add_message(chat, StoredMessage("user", "Fibonacci in Python, three ways?"))
    store.add_message(chat, markdown_answer())
    return store, chat
