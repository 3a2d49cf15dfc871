"""`specchat ask` and `specchat compare` on a remote OpenAI-compatible server, run as a user runs
them (in the test's process; Ctrl+C in a process of its own) against a real llama-server, or
against a real HTTP server that misbehaves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.cli import Ran, run_cli
from tests.servers import REPEATING_PROMPT, FaultServer, free_port, server_metrics


def run(*args: str) -> Ran:
    return run_cli(*args)


def one_line_error(result: Ran, *words: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("specchat: error:")]
    assert len(errors) == 1, result.stderr
    assert all(word in errors[0] for word in words), errors[0]
    assert "Traceback" not in result.stderr


def test_a_refused_connection_is_one_line_and_exit_2():
    url = f"http://127.0.0.1:{free_port()}/v1"
    one_line_error(run("ask", "hi", "--backend", "openai", "--base-url", url), "connection refused")


def test_an_error_status_is_one_line_and_exit_2():
    with FaultServer("status") as server:
        result = run("ask", "hi", "--base-url", server.base_url)
    one_line_error(result, "500", "the model crashed")


@pytest.mark.parametrize("behaviour, reason", [("stall", "stalled"), ("drop", "dropped")])
def test_an_answer_broken_off_prints_what_arrived_then_one_line(behaviour, reason):
    with FaultServer(behaviour) as server:
        result = run("ask", "hi", "--base-url", server.base_url, "--timeout", "1")
    one_line_error(result, reason)
    assert result.stdout.strip() == "Hello, world"


def test_ctrl_c_closes_a_silent_stream_and_keeps_the_text():
    with FaultServer("stall") as server:  # silent after the text for two minutes
        proc = subprocess.Popen(
            [sys.executable, "-m", "specchat", "ask", "hi", "--base-url", server.base_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1"},
        )
        seen = ""
        while "world" not in seen:
            seen += proc.stdout.read(1)
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert (seen + rest).strip() == "Hello, world"
    assert "[stopped]" in err and "Traceback" not in err


def test_a_server_without_figures_says_so():
    with FaultServer("plain") as server:
        result = run("ask", "hi", "--base-url", server.base_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Hello, world"
    assert "the server reports no speculation figures" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("-d", "pld"), "needs the model's logits"),
        (("--raw",), "--raw"),
    ],
)
def test_what_a_remote_server_cannot_do_is_one_line(args, message):
    with FaultServer("plain") as server:
        result = run("ask", "hi", "--base-url", server.base_url, *args)
    one_line_error(result, message)


def test_the_server_method_needs_a_server():
    one_line_error(run("ask", "hi", "-d", "server"), "remote server's own method")


@pytest.mark.slow
def test_the_line_mode_chat_answers_on_a_server(llama_server):
    """Piped lines are a chat with the server, which templates the messages itself: specchat
    tokenizes nothing there (this ended in a traceback when the chat asked the server for token
    ids)."""
    result = run_cli(
        "--backend", "openai", "--base-url", llama_server.base_url, "--max-tokens", "12",
        stdin="Name a colour.\nName another one.\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "error" not in result.stderr
    header, *turns = result.stdout.split("> ")
    assert header.startswith("specchat on") and "openai" in header
    answers = [turn.strip() for turn in turns if turn.strip()]
    assert len(answers) == 2 and all(answers), result.stdout


def test_ask_prints_runs_whose_counts_are_the_servers_own(llama_server_ngram):
    before = server_metrics(llama_server_ngram)
    result = run(
        "ask",
        REPEATING_PROMPT,
        "--backend",
        "openai",
        "--base-url",
        llama_server_ngram.base_url,
        "--max-tokens",
        "96",
        "--json",
    )
    after = server_metrics(llama_server_ngram)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    steps, done = lines[:-1], lines[-1]
    key = "spec_decode_num_accepted_tokens_total"
    accepted = after[key] - before[key]
    assert accepted > 0
    assert sum(s["accepted"] for s in steps) == accepted == done["stats"]["accepted"]
    # a coloured run is the accepted drafts plus the server's own token (the answer's last step
    # may be cut short by the end of the answer)
    runs = [s for s in steps if len(s["tokens"]) > 1]
    assert runs and all(len(s["tokens"]) == s["accepted"] + 1 for s in steps[:-1])
    assert all(s["decoder"] == "server" for s in steps)


@pytest.mark.slow
def test_compare_races_local_decoders_and_servers_on_one_prompt(llama_server, llama_server_ngram):
    result = run(
        "compare",
        REPEATING_PROMPT,
        "-d",
        "greedy",
        "-d",
        "pld",
        "--race-server",
        llama_server.base_url,
        "-d",  # a server spelled as a race entry, as the race screen's picker takes it
        f"server@127.0.0.1:{llama_server_ngram.port}",
        "--max-tokens",
        "48",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    rows = {row["decoder"]: row for row in json.loads(result.stdout)["decoders"]}
    plain = f"server@127.0.0.1:{llama_server.port}"
    ngram = f"server@127.0.0.1:{llama_server_ngram.port}"
    assert set(rows) == {"greedy", "pld", plain, ngram}
    # the same model with the same kernels: llama-server's greedy answer is ours, with or
    # without its speculation
    assert rows[plain]["identical_to_greedy"] is True
    assert rows[ngram]["identical_to_greedy"] is True
    assert rows[plain]["tokens"] == rows["greedy"]["tokens"] == rows[ngram]["tokens"]
    assert rows[plain]["tokens_per_step"] == 1.0 and rows[ngram]["tokens_per_step"] > 1.0
