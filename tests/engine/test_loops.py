"""An answer that loops ends there ("repeating"), its text kept: on by default in `ask` and the
chat, off with --no-end-loops or `end_loops = false`; a span repeated a few times is no loop."""

from __future__ import annotations

import json
import re

import pytest

from specchat.engine.loops import MIN_TOKENS, LoopWatch, repeating_span
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


def watch_text(lines: list[str]) -> bool:
    """Whether LoopWatch calls these lines, fed a step of a few tokens at a time, a loop: the
    text split as a byte-level tokenizer splits it (digits, words, punctuation, line breaks
    apart)."""
    pieces = [piece for line in lines for piece in re.findall(r"\d|\w+| \w+|\n|[^\w\s]+| ", line)]
    vocab = {piece: index for index, piece in enumerate(dict.fromkeys(pieces))}
    text_of = {index: piece.encode() for piece, index in vocab.items()}
    watch, tokens = LoopWatch(text_of.__getitem__), []
    for start in range(0, len(pieces), 3):
        tokens.extend(vocab[piece] for piece in pieces[start : start + 3])
        if watch.looping(tokens):
            return True
    return False


def test_a_numbered_list_of_one_line_over_and_over_is_a_loop():
    """ "Name ten animals." on the bundled model: "4. Anaconda... (Anacondas)" and on, where only
    the number that starts the line changes."""
    items = [f"{n}. Anaconda... (Anacondas)\n" for n in range(3, 40)]
    assert watch_text(["1. Aard... (Aardanus volans)\n", "2. Anaconda... (Anaconda)\n", *items])


def test_numbers_inside_lines_and_a_count_are_no_loop():
    table = [f"{n} × 7 = {7 * n}\n" for n in range(1, 40)]  # numbers inside the line change
    assert not watch_text(table)
    assert not watch_text([f"{n}.\n" for n in range(1, 80)])  # a count: only the number
    assert not watch_text([f"{n}. {n}\n" for n in range(1, 80)])
    distinct = [f"{n}. The {word} item\n" for n, word in enumerate("abcdefghijklmnop" * 2)]
    assert not watch_text(distinct[:16])  # sixteen different lines


def ask_poem(*extra: str, env: dict | None = None, decoder: str | None = "greedy") -> dict:
    """The poem asked of `decoder` (None: the default)."""
    chosen = ("-d", decoder) if decoder else ()
    result = run_cli(
        "ask", POEM, *chosen, "--json", "--no-log", "--max-tokens", "400", *extra, env=env
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
    # the default's steps of several tokens end it at the very token greedy's end it
    assert ask_poem(decoder=None)["token_ids"] == ids
    full = ask_poem("--no-end-loops")
    assert full["finish_reason"] == "max_tokens" and full["token_ids"][: len(ids)] == ids
    (tmp_path / "settings.toml").write_text("end_loops = false\n")
    kept_on = ask_poem(env={"SPECCHAT_CONFIG_DIR": str(tmp_path)})
    assert kept_on["finish_reason"] == "max_tokens"


@pytest.mark.slow
def test_the_bundled_models_looping_numbered_list_ends_as_repeating():
    """The bundled model lists "N. Anaconda... (Anacondas)" until the token limit, each line's
    number one more: a loop by any reader's eye, ended with its text kept."""
    args = ("ask", "Name ten animals.", "-d", "greedy", "--json", "--no-log", "--max-tokens", "300")
    ended = json.loads(run_cli(*args).stdout.strip().splitlines()[-1])
    assert ended["finish_reason"] == "repeating" and ended["text"].count("Anaconda") >= 4
    full = json.loads(run_cli(*args, "--no-end-loops").stdout.strip().splitlines()[-1])
    assert full["finish_reason"] == "max_tokens"
    assert full["token_ids"][: len(ended["token_ids"])] == ended["token_ids"]
