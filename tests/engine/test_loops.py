"""An answer that loops ends there ("repeating"), its text kept: on by default in `ask` and the
chat, off with --no-end-loops or `end_loops = false`; a span repeated a few times is no loop."""

from __future__ import annotations

import json

import pytest

from specchat.engine.loops import MIN_TOKENS, repeating_span
from tests.cli import run_cli

POEM = "Write a short poem about the ocean"  # the bundled model loops on it under greedy


def test_a_span_repeated_over_and_over_is_a_loop():
    assert repeating_span([5, 6] * 40) == 2  # "A: A: A: …"
    line = list(range(100, 112))
    assert repeating_span([1, 2, 3] + line * 4) == 12
    cycle = list(range(10, 20)) + list(range(30, 40)) + list(range(50, 60))  # three lines
    assert repeating_span(list(range(200, 260)) + cycle * 3) == 30


def test_text_that_only_repeats_a_little_is_no_loop():
    row = [7, 8, 9, 10]  # a table's "| --- " row, a list of ones
    assert repeating_span(list(range(300, 340)) + row * 3) is None
    assert repeating_span([1] * (MIN_TOKENS - 1)) is None
    assert repeating_span(list(range(1000))) is None
    line = list(range(100, 140))  # a long line twice: a refrain, not yet a loop
    assert repeating_span(list(range(500, 560)) + line * 2) is None


def ask_poem(*extra: str, env: dict | None = None) -> dict:
    result = run_cli(
        "ask", POEM, "-d", "greedy", "--json", "--no-log", "--max-tokens", "400", *extra, env=env
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_bundled_models_looping_poem_ends_as_repeating(tmp_path):
    ended = ask_poem()
    assert ended["finish_reason"] == "repeating"
    ids = ended["token_ids"]
    span = repeating_span(ids)
    assert span is not None and len(ids) < 400
    assert ids[-span:] == ids[-2 * span : -span]  # the loop's text is kept
    full = ask_poem("--no-end-loops")
    assert full["finish_reason"] == "max_tokens" and full["token_ids"][: len(ids)] == ids
    (tmp_path / "settings.toml").write_text("end_loops = false\n")
    kept_on = ask_poem(env={"SPECCHAT_CONFIG_DIR": str(tmp_path)})
    assert kept_on["finish_reason"] == "max_tokens"
