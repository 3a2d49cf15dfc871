"""`specchat` as a user runs it: the command line, the real model, stdout/stderr and exit codes
(in the test's process; Ctrl+C, which only a process shows, in a process of its own)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.cli import Ran, run_cli


def run(*args: str) -> Ran:
    return run_cli(*args)


def test_version():
    result = run("--version")
    assert result.returncode == 0 and result.stdout.startswith("specchat ")


def test_help_lists_each_command_with_its_summary_unbroken():
    """At a wide terminal a command's summary runs on one line: it was broken where its
    docstring's source lines end ("Files (-f) and" / "piped text join ...")."""
    result = run_cli("--help", env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert result.returncode == 0, result.stderr
    rows = {line.split()[1]: line for line in result.stdout.splitlines() if line.startswith("│ ")}
    assert {"ask", "compare", "bench", "models", "pull", "chats"} <= rows.keys()
    assert "coloured. Files (-f) and piped text join the prompt" in rows["ask"]
    assert "(progress shown, resumable); then --model" in rows["pull"]


def test_ask_streams_an_answer():
    result = run("ask", "Write a haiku about the sea.", "--max-tokens", "30")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.strip()) > 10


def test_ask_times_no_cost_sweep_after_its_one_answer(monkeypatch: pytest.MonkeyPatch):
    """ask's process ends with its answer: a slice of a pass-cost sweep timed after it made the
    answer end later (0.35 s on the bundled model, 1.6 s at 1.7B) and was lost with the
    process, unfinished. The chat's engine, which answers again, keeps timing them."""
    from specchat.backends.block_cost import MeasuredCosts

    slices: list[bool] = []
    keep_costs = MeasuredCosts.keep_costs

    def spied(self, time_slice: bool = True) -> None:
        slices.append(time_slice)
        keep_costs(self, time_slice)

    monkeypatch.setattr(MeasuredCosts, "keep_costs", spied)
    result = run("ask", "Say hi.", "--max-tokens", "8", "--no-log")
    assert result.returncode == 0, result.stderr
    assert slices == [False]


_LOADED_AT_EXIT = """
import runpy, sys

sys.argv = ["specchat", *sys.argv[1:]]
try:
    runpy.run_module("specchat", run_name="__main__")
except SystemExit as exit:
    assert not exit.code, exit.code
print("torch loaded:", "torch" in sys.modules, file=sys.stderr)
import torch  # as the transformers backend would, later in the same process

if sys.platform == "linux":
    runtimes = {line.split()[-1] for line in open("/proc/self/maps") if "libgomp" in line}
    print("openmp runtimes:", len(runtimes), file=sys.stderr)
"""


def test_an_answer_on_the_int4_runtime_starts_without_torch():
    """Importing torch took a second of every `ask` and chat start (2.5-2.9 s to the end of a
    short answer, 1.5-1.8 s without it) and 180 MB: the int4 runtime computes in its own C. torch,
    imported later in the process, shares the kernels' OpenMP runtime (one pool of threads)."""
    ran = subprocess.run(
        [
            sys.executable,
            "-c",
            _LOADED_AT_EXIT,
            "ask",
            "Say hi.",
            "--max-tokens",
            "8",
            "--backend",
            "int4",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip()
    assert "torch loaded: False" in ran.stderr
    if sys.platform == "linux":
        assert "openmp runtimes: 1" in ran.stderr


def test_ask_json_lines_schema():
    result = run("ask", "The capital of France is", "--raw", "--max-tokens", "12", "--json")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    steps, done = lines[:-1], lines[-1]
    assert steps and all(s["type"] == "step" for s in steps)
    for step in steps:
        assert set(step) >= {"tokens", "text", "drafted", "accepted", "source"}
    assert done["type"] == "done" and done["finish_reason"] == "max_tokens"
    assert done["token_ids"] == [t for s in steps for t in s["tokens"]]
    assert done["text"] == "".join(s["text"] for s in steps)
    assert "Paris" in done["text"]
    assert len(done["prompt_token_ids"]) == 5
    for key in (
        "prompt_tokens",
        "generated_tokens",
        "steps",
        "drafted",
        "accepted",
        "tokens_per_step",
        "prefill_seconds",
        "decode_seconds",
        "tokens_per_second",
    ):
        assert key in done["stats"], key


def test_compare_json_rows():
    result = run(
        "compare",
        "Repeat: one two three. one two three.",
        "-d",
        "pld",
        "-p",
        "pld.fixed_draft=4",  # draft whatever this machine's pass costs say
        "--max-tokens",
        "12",
        "--repeats",
        "1",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rows = {row["decoder"]: row for row in report["decoders"]}
    assert list(rows) == ["greedy", "pld"]  # the baseline is added
    assert rows["greedy"]["speedup"] == 1.0 and rows["greedy"]["identical_to_greedy"] is True
    assert rows["pld"]["identical_to_greedy"] is True and 0 < rows["pld"]["tokens"] <= 12
    assert rows["pld"]["acceptance_rate"] > 0  # exact with drafts accepted, not plain steps
    assert rows["pld"]["speedup"] > 0 and rows["pld"]["tokens_per_step"] > 0
    # The answer repeats the prompt, so pld's own proposals allow an oracle above plain decoding;
    # greedy drafts nothing and has no oracle.
    assert rows["greedy"]["oracle"] is None and rows["greedy"]["efficiency"] is None
    assert rows["pld"]["oracle"] > 1.0 and rows["pld"]["efficiency"] is not None


def test_models_lists_the_bundled_default():
    result = run("models")
    assert result.returncode == 0
    assert "smollm2" in result.stdout and "SmolLM2-135M-Instruct.Q4_1.gguf" in result.stdout


def test_models_json_gives_each_model_its_name_and_facts():
    from specchat.bundled import bundled_gguf

    result = run("models", "--json")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    (default,) = [m for m in listed if m["default"]]
    assert default["path"] == str(bundled_gguf()) and default["store"] == "bundled"
    assert (default["family"], default["quantization"]) == ("llama", "Q4_1")
    assert default["bytes"] == os.path.getsize(bundled_gguf())
    assert default["runs_on"] == ["int4", "llama"] and default["runs_on_note"] is None
    again = run("ask", "Say hi.", "--model", default["model"], "--max-tokens", "4")
    assert again.returncode == 0, again.stderr  # the name it gives is one --model takes


@pytest.mark.parametrize(
    "args,message",
    [
        (("ask", "hi", "--decoder", "nope"), "unknown decoder"),
        (("ask", "hi", "--model", "/no/such/model.gguf"), "not found"),
        (
            ("ask", "hi", "--model", "nobody/not-a-cached-model"),
            "not in the local Hugging Face cache",
        ),
        (("ask", "hi", "--device", "cuda"), "CUDA is not available"),
        (("ask", "hi", "--device", "tpu"), "--device must be one of auto, cpu, cuda"),
        (("ask", "hi", "--backend", "vllm"), "--backend must be one of int4, llama, hf, openai"),
        (("ask", "hi", "--param", "oops"), "name=value"),
        (("ask", "hi", "--decoder", "greedy", "--param", "width=3"), "no parameter"),
        (("ask", "hi", "-d", "greedy", "--temperature", "0.5"), "greedy never samples"),
        (("ask", "word " * 300, "--n-ctx", "128", "--raw"), "context window"),
        (("ask", "word " * 300, "--n-ctx", "128", "--raw", "--backend", "hf"), "context window"),
        (("ask", "hi", "--max-tokens", "0"), "--max-tokens"),
        (("ask", "hi", "--threads", "0"), "--threads"),
        (("ask", "hi", "-d", "suffix:nope=1"), "decoder 'suffix' has no parameter 'nope'"),
        (("ask", "hi", "-d", "sample:temperature=0.7"), "with --temperature"),
        (("-p", "num_beams=0"), "num_beams"),
        (("-p", "no_such_param=1"), "no_such_param"),
        (("ask",), "the prompt is empty"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = run(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_corrupt_gguf_is_a_clear_error(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(2048))
    result = run("ask", "hi", "--model", str(bad))
    assert result.returncode == 2
    assert "not a valid GGUF" in result.stderr and "Traceback" not in result.stderr


def long_story(*args: str, **popen) -> subprocess.Popen:
    """`specchat ask` answering at length (up to 2,000 tokens) as its own process, its output
    piped to the test."""
    return subprocess.Popen(
        [sys.executable, "-m", "specchat", "ask", "Tell me a very long story.", *args,
         "--max-tokens", "2000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **popen,
    )  # fmt: skip


@pytest.mark.slow
def test_ctrl_c_keeps_what_was_generated():
    import signal

    proc = long_story("--json", text=True)
    lines = []
    for line in proc.stdout:
        lines.append(json.loads(line))
        if len(lines) == 8:
            proc.send_signal(signal.SIGINT)
            break
    rest, err = proc.communicate(timeout=60)
    lines += [json.loads(line) for line in rest.splitlines()]
    done = lines[-1]
    assert done["type"] == "done" and done["finish_reason"] == "cancelled"
    assert len(done["token_ids"]) >= 8
    assert proc.returncode == 130
    assert "Traceback" not in err


@pytest.mark.slow
def test_ctrl_c_stops_a_compare_and_reports_the_runs_it_made():
    """Ctrl+C in `specchat compare` (run in a terminal: its progress line says which run
    ended): the race stops at the next step, the report covers the decoders that ran, it says
    so on stderr, and the exit is an interrupted command's (130) with no traceback."""
    import pty
    import signal

    leader, follower = pty.openpty()  # stderr a terminal, as a person's: progress is shown
    proc = subprocess.Popen(
        [sys.executable, "-m", "specchat", "compare", "Tell me a very long story.", "--json",
         "-d", "greedy", "-d", "suffix", "--repeats", "3", "--max-tokens", "2000"],
        stdout=subprocess.PIPE,
        stderr=follower,
        text=True,
    )  # fmt: skip
    os.close(follower)
    seen = b""
    while b"run 1/6 (greedy)" not in seen:  # greedy's first run ended; five runs to go
        chunk = os.read(leader, 4096)
        assert chunk, seen
        seen += chunk
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the process has gone: nothing more to read
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    err = seen.decode(errors="replace")
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    report = json.loads(out)
    assert report["stopped"] is True
    rows = {row["decoder"]: row for row in report["decoders"]}
    assert rows["greedy"]["tokens"] > 0 and not rows["greedy"]["stopped"]
    assert set(rows) <= {"greedy", "suffix"}
    assert re.search(r"\[stopped after [1-5] of 6 runs: the table is theirs\]", err), err


def test_a_reader_that_goes_away_stops_the_answer_and_keeps_what_came(tmp_path):
    """`specchat ask "…" | head -c 40`: once the pipe's reader has gone the answer stops, as
    Ctrl+C stops it, with no traceback and the shell's code for a closed pipe (141); the chat
    store keeps the answer as far as it got."""
    from specchat.history import HistoryStore

    proc = long_story(env={**os.environ, "SPECCHAT_DATA_DIR": str(tmp_path)})
    seen = proc.stdout.read(40)
    proc.stdout.close()  # as `head -c 40` exits
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err.decode()
    assert b"Traceback" not in err and not err.strip(), err.decode()
    store = HistoryStore(tmp_path / "history.sqlite3")
    (chat,) = store.list_chats()
    answer = store.messages(chat.id)[1]
    assert answer.role == "assistant" and answer.finish_reason == "cancelled"
    assert answer.content.startswith(seen.decode("utf-8", "ignore")[:20])
    assert 0 < answer.stats.generated_tokens < 2000


def test_the_line_mode_chat_ends_quietly_when_its_reader_goes_away():
    """`echo "…" | specchat | head -c 80`: the line-mode chat stops at once, no traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "specchat", "--max-tokens", "2000"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdin.write(b"Tell me a very long story.\n")
    proc.stdin.close()
    proc.stdout.read(120)  # the banner, the prompt and the answer's start
    proc.stdout.close()
    proc.wait(timeout=120)
    err = proc.stderr.read()
    assert proc.returncode == 141, err.decode()
    assert not err.strip(), err.decode()


def test_the_line_mode_chat_ends_an_answer_before_the_work_that_follows_it(
    monkeypatch: pytest.MonkeyPatch,
):
    """The line-mode chat's answer line ended only after a slice of a pass-cost sweep (up to
    0.2 s on a fresh install): the answer's newline must be out when that work starts."""
    from specchat.backends.block_cost import MeasuredCosts

    written_then: list[str] = []
    keep_costs = MeasuredCosts.keep_costs

    def spied(self, time_slice: bool = True) -> None:
        written_then.append(sys.stdout.getvalue())
        keep_costs(self, time_slice)

    monkeypatch.setattr(MeasuredCosts, "keep_costs", spied)
    result = run_cli("--max-tokens", "8", "-d", "greedy", stdin="Say hi.\nSay bye.\n")
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()[1:3]  # after the banner
    assert first.strip() and second.strip()
    assert len(written_then) == 2
    assert written_then[0].endswith(first + "\n") and written_then[1].endswith(second + "\n")


def test_a_draft_with_another_vocabulary_is_refused(tmp_path):
    import torch

    from tests.tiny_models import tiny_model, tiny_tokenizer

    folder = tmp_path / "tiny-draft"
    tiny_model(dtype=torch.float32).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    result = run("ask", "hi", "--decoder", "draft", "--draft", str(folder), "--max-tokens", "4")
    assert result.returncode == 2, result.stderr
    assert "vocabulary" in result.stderr and "does not match" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_ask_records_the_exchange_unless_no_log(tmp_path):
    from specchat.history import HistoryStore

    def ask(*extra: str) -> None:
        result = run_cli(
            "ask", "Say hi.", "--max-tokens", "6", *extra, env={"SPECCHAT_DATA_DIR": str(tmp_path)}
        )
        assert result.returncode == 0, result.stderr

    ask("--no-log")
    assert not (tmp_path / "history.sqlite3").exists()
    ask()
    store = HistoryStore(tmp_path / "history.sqlite3")
    (chat,) = store.list_chats()
    messages = store.messages(chat.id)
    assert [(m.role, m.content) for m in messages][:1] == [("user", "Say hi.")]
    assert messages[1].role == "assistant" and messages[1].content and messages[1].stats
    ask("--no-log")
    assert len(store.list_chats()) == 1


COPYING = "Repeat exactly: the quick brown fox jumps over the lazy dog, and the lazy dog sleeps."
DRAFTING = ("--decoder", "pld", "-p", "fixed_draft=4", "--max-tokens", "32")


def test_ask_explain_shows_the_drafts(tmp_path):
    """--explain prints the answer's drafts after it; with --json, the step events carry the
    rejected tokens as text and a drafts event before the done one has the figures, which are
    the engine's stats; the recorded answer keeps its steps for the chat's drafts view."""
    from specchat.history import HistoryStore

    env = {"SPECCHAT_DATA_DIR": str(tmp_path)}
    result = run_cli("ask", COPYING, *DRAFTING, "--json", "--explain", env=env)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    steps, drafts, done = lines[:-2], lines[-2], lines[-1]
    assert [s["type"] for s in steps] == ["step"] * len(steps) and done["type"] == "done"
    assert all(isinstance(s["rejected_text"], str) for s in steps)
    assert any(s["rejected"] for s in steps) == any(s["rejected_text"] for s in steps)
    figures, stats = drafts["figures"], done["stats"]
    assert drafts["type"] == "drafts" and figures["tokens"] == stats["generated_tokens"]
    for key in ("steps", "drafted", "accepted"):
        assert figures[key] == stats[key], key
    assert figures["oracle_speedup"] >= 1.0 and drafts["pass_costs"]

    store = HistoryStore(tmp_path / "history.sqlite3")
    (chat,) = store.list_chats()
    answer = store.messages(chat.id)[1]
    kept = store.answer_steps(answer.id)
    assert kept is not None and len(kept.steps) == stats["steps"]
    # --json lists the steps that added something; the one that only ended the answer (EOS)
    # may have drafted too, and counts in the figures as in the stats
    assert [s.rejected for s in kept.steps if s.tokens] == [s["rejected_text"] for s in steps]
    assert figures["rejected"] == sum(s.rejected_tokens for s in kept.steps)
    assert [s.rejected_tokens for s in kept.steps if s.tokens] == [
        len(s["rejected"]) for s in steps
    ]

    shown = run_cli("ask", COPYING, *DRAFTING, "--explain", "--no-log")
    assert shown.returncode == 0, shown.stderr
    at = shown.stdout.index(f"{stats['generated_tokens']} tokens in {stats['steps']} steps")
    answer_text, explained = shown.stdout[:at], shown.stdout[at:]
    assert answer_text.strip() == done["text"].strip()
    assert "tokens per step" in explained and "oracle" in explained
    assert "rejected" in explained and "landed" in explained


def test_ask_takes_a_decoder_with_parameters_as_compare_spells_it():
    """`-d pld:fixed_draft=5` (compare's and bench's spelling) sets the parameter as `--param`
    would: drafts five tokens long on a line to copy where one token long drafts less."""
    drafted = {}
    for length in (1, 5):
        asked = run_cli(
            "ask", COPYING, "-d", f"pld:fixed_draft={length}", "--max-tokens", "24",
            "--json", "--explain", "--no-log",
        )  # fmt: skip
        assert asked.returncode == 0, asked.stderr
        events = [json.loads(line) for line in asked.stdout.splitlines()]
        assert events[-1]["decoder"] == "pld"
        (figures,) = [e["figures"] for e in events if e["type"] == "drafts"]
        assert figures["drafted"] <= length * figures["steps"]
        drafted[length] = figures["drafted"] / figures["steps"]
    assert drafted[5] > drafted[1]


def test_a_temperature_greedy_cannot_take_is_blamed_on_the_settings_file(tmp_path):
    """Older versions' Ctrl+G saved a temperature for greedy: the error says where it is."""
    (tmp_path / "settings.toml").write_text("[decoders.greedy]\ntemperature = 0.7\n")
    result = run_cli("ask", "Hi", "-d", "greedy", env={"SPECCHAT_CONFIG_DIR": str(tmp_path)})
    assert result.returncode == 2
    assert "settings.toml" in result.stderr and "[decoders.greedy]" in result.stderr
    assert "--temperature" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_chats_param_reaches_every_decoder_that_takes_it():
    from specchat.options import RunConfig
    from specchat.run_config import run_params, with_params

    config = with_params(RunConfig(), {"num_beams": "3", "pld.max_ngram": "2"})
    assert run_params(["beam"], config)["beam"]["num_beams"] == 3
    assert run_params(["pld"], config)["pld"]["max_ngram"] == 2


def test_greedy_reads_one_token_a_step_on_an_answer_that_ended():
    """The step whose pass produced the end-of-sequence token is a step, and so is that token:
    greedy reads 1.00 tokens a step, in the done event and in its drafts' figures (whose modelled
    speedup over one-token passes is then 1.00, not n/(n+1))."""
    result = run(
        "ask", "Say hi.", "-d", "greedy", "--json", "--explain", "--no-log", "--max-tokens", "64"
    )
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.strip().splitlines()]
    done, drafts = events[-1], events[-2]
    assert done["finish_reason"] == "eos", "the prompt must end on EOS within 64 tokens"
    stats = done["stats"]
    assert stats["steps"] == stats["generated_tokens"] + 1 and stats["ending_tokens"] == 1
    assert stats["tokens_per_step"] == 1.0
    assert drafts["type"] == "drafts" and drafts["figures"]["tokens_per_step"] == 1.0
    assert drafts["figures"]["modelled_speedup"] == 1.0
