"""A race runs every entrant from what decoders learn across answers as the race found it — the
recycled candidates and the draft policy's rates — so a repeat, or a lane after another, is not
helped by what the run before it learned from the same prompt; the last run's lesson is kept."""

from __future__ import annotations

import pytest

from specchat.backends.base import ChatMessage
from specchat.decoding import recycled
from specchat.decoding.registry import build_decoder
from specchat.engine.events import StepEvent
from specchat.engine.local import Engine
from specchat.engine.protocol import GenerationRequest
from specchat.evaluation.race import RaceTurn, line_up_entrants, race
from specchat.evaluation.variants import parse_variant
from specchat.prompting import chat_prompt_ids

STORY = "Tell me a short story about a lighthouse keeper and a storm."
COPY = (
    "Repeat this text exactly: The lighthouse keeper climbed the stairs every evening, lit the "
    "lamp, and watched the ships pass safely through the narrow channel below the cliffs."
)


@pytest.fixture(autouse=True)
def own_learning(tmp_path, monkeypatch):
    """Every test learns from nothing, kept under its own data dir."""
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(recycled, "_tables", {})


def _race(backend, prompt: str, spelling: str, lanes: int = 2, repeats: int = 2):
    messages = (ChatMessage("user", prompt),)
    turn = RaceTurn(messages, tuple(chat_prompt_ids(backend, list(messages))), 64)
    variants = [parse_variant(spelling)] * lanes
    entrants = line_up_entrants(variants, lambda v: backend, lambda v: dict(v.params))
    done = race(backend, turn, entrants, baseline="greedy", repeats=repeats)
    return turn, [run for lane in done for run in lane.runs]


def _steps(backend, ids, name: str, **params) -> int:
    engine = Engine(backend, build_decoder(name, params, backend))
    backend.rollback(0)
    events = list(engine.generate(GenerationRequest(tuple(ids), 64)))
    engine.decoder.finish()
    return len([e for e in events if isinstance(e, StepEvent) and not e.tail])


def test_no_run_of_a_race_drafts_from_what_the_run_before_taught_the_table(fresh_llama):
    turn, runs = _race(fresh_llama, STORY, "suffix:recycle=true,fixed_draft=3")
    steps = [run.stats.steps for run in runs]
    assert len(steps) == 4 and len(set(steps)) == 1, steps
    # afterwards the table knows the answer: the next answer drafts from it
    after = _steps(fresh_llama, turn.prompt_ids, "suffix", fixed_draft=3, recycle=True)
    assert after < steps[0], (after, steps)


def test_no_run_of_a_race_starts_from_the_rates_the_run_before_learned(fresh_llama):
    """The policy sizes drafts from learned rates: run alike, every run drafts alike."""
    turn, runs = _race(fresh_llama, COPY, "suffix")
    drafted = [(run.stats.steps, run.stats.drafted) for run in runs]
    assert len(drafted) == 4 and len(set(drafted)) == 1, drafted
