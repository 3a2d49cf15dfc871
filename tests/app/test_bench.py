"""`specchat bench`: the arithmetic on known numbers, the data checks, the JSON it writes."""

from __future__ import annotations

import json

import pytest

from specchat.bench.data import load_questions
from specchat.bench.summary import OVERALL, QuestionRow, summarize
from specchat.bundled import bundled_gguf
from specchat.errors import SpecchatError
from tests.cli import run_cli

BUNDLED_MB = bundled_gguf().stat().st_size / 1024 / 1024


def _row(qid, cat, dec, tokens, seconds, steps=None, drafted=0, accepted=0, same=True):
    return QuestionRow(qid, cat, dec, tokens, seconds, steps or tokens, drafted, accepted, same)


def test_speedup_is_the_ratio_of_mean_question_speeds():
    rows = [
        _row(1, "qa", "greedy", 100, 2.0),  # 50 tok/s
        _row(2, "qa", "greedy", 100, 1.0),  # 100 tok/s -> mean 75
        _row(1, "qa", "pld", 100, 1.0, steps=40, drafted=80, accepted=60),  # 100
        _row(2, "qa", "pld", 100, 0.5, steps=50, drafted=70, accepted=50),  # 200 -> mean 150
        _row(3, "math", "greedy", 60, 1.0),  # 60
        _row(3, "math", "pld", 60, 2.0, steps=60, same=False),  # 30
    ]
    summary = summarize(rows, "greedy")
    qa = summary["pld"]["qa"]
    assert qa["tokens_per_second"] == pytest.approx(150.0)
    assert qa["speedup"] == pytest.approx(2.0)
    assert qa["mean_accepted_tokens"] == pytest.approx(200 / 90, abs=1e-4)
    assert qa["acceptance_rate"] == pytest.approx(110 / 150, abs=1e-4)
    assert qa["exact_rate"] == 1.0 and qa["questions"] == 2
    assert summary["pld"]["math"]["speedup"] == pytest.approx(0.5)
    assert summary["pld"]["math"]["exact_rate"] == 0.0
    overall = summary["pld"][OVERALL]
    assert overall["tokens_per_second"] == pytest.approx((100 + 200 + 30) / 3)
    assert overall["speedup"] == pytest.approx(110 / ((50 + 100 + 60) / 3), abs=1e-4)
    assert overall["exact_rate"] == pytest.approx(2 / 3, abs=1e-4)
    assert summary["greedy"][OVERALL]["speedup"] == pytest.approx(1.0)


def test_data_filters_and_limits(tmp_path):
    path = tmp_path / "q.jsonl"
    lines = [
        {"question_id": i, "category": "a" if i < 3 else "b", "turns": [f"q{i}"]} for i in range(6)
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert [q.question_id for q in load_questions(path, ["b"], 2)] == [3, 4]
    assert len(load_questions(path, None, 1)) == 2
    with pytest.raises(SpecchatError, match="no category 'c'"):
        load_questions(path, ["c"])


@pytest.mark.parametrize(
    "content,message",
    [
        ("", "holds no questions"),
        ("not json\n", "not a Spec-Bench question"),
        ('{"question_id": 1, "turns": ["x"]}\n', "missing field 'category'"),
        ('{"question_id": 1, "category": "a", "turns": []}\n', "turns must be"),
    ],
)
def test_broken_data_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(SpecchatError, match=message):
        load_questions(path)


def test_missing_data_file_exits_2_without_traceback(tmp_path):
    result = run_cli("bench", "--data", str(tmp_path / "none.jsonl"))
    assert result.returncode == 2
    assert "benchmark data not found" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_bench_end_to_end_json_schema_and_multi_turn(tmp_path):
    data = tmp_path / "q.jsonl"
    data.write_text(
        json.dumps(
            {"question_id": 7, "category": "chat", "turns": ["Name a fruit.", "And a colour?"]}
        )
        + "\n"
        + json.dumps(
            {"question_id": 8, "category": "sum", "turns": ["Summarize: cats sleep a lot."]}
        )
        + "\n"
    )
    out = tmp_path / "r.json"
    md = tmp_path / "r.md"
    result = run_cli(
        "bench",
        "--data",
        str(data),
        "-d",
        "pld",
        "-p",
        "pld.fixed_draft=4",  # draft whatever this machine's pass costs say
        "--max-tokens",
        "16",
        "--json",
        str(out),
        "--markdown",
        str(md),
        "--peers",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert set(report) == {"summary", "questions", "environment"}
    for method in ("greedy", "pld", "peer:llama-cpp-python:greedy", "peer:llama-cpp-python:pld"):
        assert set(report["summary"][method]) == {"chat", "sum", "overall"}
        fig = report["summary"][method]["overall"]
        assert set(fig) == {
            "tokens_per_second",
            "speedup",
            "mean_accepted_tokens",
            "acceptance_rate",
            "exact_rate",
            "oracle",
            "efficiency",
            "total_variation_per_token",
            "questions",
        }
        assert fig["total_variation_per_token"] is None  # greedy and exact verification
    assert report["summary"]["pld"]["overall"]["exact_rate"] == 1.0
    assert report["summary"]["pld"]["overall"]["acceptance_rate"] > 0  # exact with drafts taken
    # the oracle replays pld's own proposals on greedy's answers; greedy has none to replay
    assert report["summary"]["pld"]["overall"]["oracle"] >= 1.0
    assert report["summary"]["greedy"]["overall"]["oracle"] is None
    rows = report["questions"]
    assert len(rows) == 2 * len(report["summary"])  # per question, every method
    row = next(r for r in rows if r["decoder"] == "pld" and r["question_id"] == 7)
    assert set(row) == {
        "question_id",
        "category",
        "decoder",
        "tokens",
        "seconds",
        "steps",
        "drafted",
        "accepted",
        "identical_to_greedy",
        "first_divergence",
        "oracle_seconds",
        "plain_seconds",
        "inexact_steps",
        "total_variation",
    }
    assert row["inexact_steps"] == 0 and row["total_variation"] == 0
    # two turns answered: more tokens than one turn's limit
    assert row["tokens"] > 16
    env = report["environment"]
    assert env["backend"] in ("llama", "int4") and "versions" in env and "decoder_params" in env
    # where the weights streamed from, read before the runs and after, beside every figure
    for when in ("before", "after"):
        reading = env["memory"][when]
        assert abs(reading["weights_mb"] - BUNDLED_MB) < 1 and reading["memory_gbps"] > 0
        assert isinstance(reading["cached"], bool)
    assert "before the runs weights " in result.stdout
    # what decided how much the drafts drafted: each size's price over a plain pass (never
    # below one), in the report and beside the figures
    prices = [env["pass_prices"][str(k)] for k in (2, 3, 4, 6, 8)]
    assert min(prices) >= 1.0 and prices[-1] > prices[0]
    assert f"drafts priced at the end (plain pass = 1): 2 tokens {prices[0]:.2f}" in result.stdout
    # the same GGUF on specchat's other runtime: its greedy and the first drafting decoder
    other = "int4" if env["backend"] == "llama" else "llama"
    assert {f"greedy@{other}", f"pld@{other}"} <= set(report["summary"])
    assert report["summary"][f"pld@{other}"]["overall"]["exact_rate"] is None  # its own answers
    assert "speedup" in md.read_text() or "×" in md.read_text()
    assert "pld ÷ peer:llama-cpp-python:pld" in result.stdout
    assert "peer:llama-cpp-python:greedy" in result.stdout


@pytest.mark.slow
def test_ctrl_c_reports_the_questions_that_finished(tmp_path, monkeypatch):
    """Ctrl+C as the second question's race begins (the real model answered the first): the
    report and --json cover the first question and say the run stopped; exit 130."""
    import specchat.bench.runner as runner

    real, races = runner.race, []

    def race(*args, **kwargs):
        races.append(args)
        if len(races) == 2:
            raise KeyboardInterrupt  # as Python raises it where Ctrl+C finds the bench
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "race", race)
    data = tmp_path / "q.jsonl"
    data.write_text(
        json.dumps({"question_id": 7, "category": "chat", "turns": ["Name a fruit."]})
        + "\n"
        + json.dumps({"question_id": 8, "category": "sum", "turns": ["Summarize: cats sleep."]})
        + "\n"
    )
    out = tmp_path / "r.json"
    result = run_cli(
        "bench", "--data", str(data), "-d", "pld", "--max-tokens", "8", "--json", str(out)
    )
    assert result.returncode == 130, result.stderr
    assert "[stopped after 1 of 2 questions: the report is theirs]" in result.stderr
    assert "Traceback" not in result.stderr
    assert "chat" in result.stdout and "overall" in result.stdout
    report = json.loads(out.read_text())
    assert [q["question_id"] for q in report["questions"]] == [7, 7]  # greedy and pld
    assert set(report["summary"]["pld"]) == {"chat", "overall"}
    assert report["environment"]["stopped_after"] == 1


def test_bench_races_variants_at_a_temperature(tmp_path, bundled_gguf):
    """Variants of one decoder race side by side (`NAME:param=value`); with --temperature every
    method samples, nothing is judged token for token, and the soft-matching variant is labelled
    as not sampled from the target's distribution, with its distance and its gain over the same
    decoder verified exactly."""
    data = tmp_path / "q.jsonl"
    data.write_text(
        json.dumps({"question_id": 1, "category": "chat", "turns": ["Tell me about the sea."]})
        + "\n"
    )
    out = tmp_path / "r.json"
    result = run_cli(
        *["bench", "--data", str(data), "--backend", "llama", "--draft", str(bundled_gguf)],
        *["-d", "draft", "-d", "draft:soft_match=0.5", "-d", "pld:fixed_draft=4"],
        *["-p", "draft.fixed_draft=3", "--temperature", "1", "--seed", "3"],
        *["--max-tokens", "24", "--json", str(out)],
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    summary = report["summary"]
    assert set(summary) == {"greedy", "draft", "draft:soft_match=0.5", "pld:fixed_draft=4"}
    assert report["environment"]["sampling"]["temperature"] == 1.0
    for method, per in summary.items():
        assert per["overall"]["exact_rate"] is None, method  # samples: nothing to compare
    soft = summary["draft:soft_match=0.5"]["overall"]
    assert summary["draft"]["overall"]["total_variation_per_token"] is None
    assert summary["draft"]["overall"]["acceptance_rate"] > 0
    rows = {r["decoder"]: r for r in report["questions"]}
    assert rows["draft:soft_match=0.5"]["inexact_steps"] > 0
    # the distance a user reads is the soft steps' own, per generated token, and a distance
    soft_row = rows["draft:soft_match=0.5"]
    per_token = soft_row["total_variation"] / soft_row["tokens"]
    assert soft["total_variation_per_token"] == pytest.approx(per_token, abs=1e-6)
    assert 0 < soft["total_variation_per_token"] <= 1
    assert rows["draft"]["inexact_steps"] == 0 and rows["draft"]["identical_to_greedy"] is None
    assert rows["pld:fixed_draft=4"]["tokens"] > 0
    assert "draft:soft_match=0.5: soft matching: NOT sampled" in result.stdout
    assert "over draft: acceptance" in result.stdout


@pytest.mark.slow
def test_bench_history_drafts_from_earlier_questions_in_a_temporary_store(tmp_path):
    """With --history the second, identical question finds the first's answer in the saved
    chats: suffix copies it exactly; the user's own chat store is never written."""
    data = tmp_path / "q.jsonl"
    question = "List the days of the week."
    data.write_text(
        "".join(
            json.dumps({"question_id": i, "category": "chat", "turns": [question]}) + "\n"
            for i in (1, 2)
        )
    )
    out = tmp_path / "r.json"
    data_dir = tmp_path / "user-data"
    result = run_cli(
        *["bench", "--data", str(data), "-d", "suffix"],
        *["--max-tokens", "40", "--json", str(out), "--history"],
        env={"SPECCHAT_DATA_DIR": str(data_dir)},
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["environment"]["history"] is True
    rows = {(q["question_id"], q["decoder"]): q for q in report["questions"]}
    first, second = rows[(1, "suffix")], rows[(2, "suffix")]
    assert first["identical_to_greedy"] and second["identical_to_greedy"]
    assert second["tokens"] / second["steps"] >= 4 and second["steps"] < first["steps"]
    assert not (data_dir / "history.sqlite3").exists()


def test_the_report_is_whole_at_80_columns_and_when_piped():
    """A report with every peer, printed where `specchat bench | cat` prints it (80 columns, no
    terminal): tables split instead of cutting figures to ellipses, bars shorten to fit."""
    import io

    from rich.console import Console

    from specchat.bench.report import print_report

    methods = ["greedy", "pld", "suffix", "lookahead", "peer:llama-cpp-python:greedy"]
    methods += [f"peer:llama-server:{spec}" for spec in ("none", "ngram-mod", "ngram-mod-3")]
    rows = [
        _row(q, cat, method, 100, 1.0 + 0.1 * i, steps=50, drafted=80, accepted=50)
        for i, method in enumerate(methods)
        for q, cat in ((1, "summarization"), (2, "retrieval"))
    ]
    summary = summarize(rows, "greedy")
    out = io.StringIO()
    print_report(Console(file=out, width=80), summary, ["summarization", "retrieval"], rows)
    text = out.getvalue()
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    for method in methods:
        assert method in text
    speed = summary["peer:llama-server:ngram-mod-3"][OVERALL]["speedup"]
    assert f"{speed:.2f}×" in text


def test_the_chart_says_per_category_how_much_of_what_the_drafts_allow_was_taken() -> None:
    """Each category's bar names its oracle and the policy's efficiency, and stays within an
    80-column terminal with a long method name."""
    from specchat.bench.report import chart_text

    def fig(speedup, oracle=None, share=None):
        return {"speedup": speedup, "oracle": oracle, "efficiency": share}

    method = "lookahead:window=5,ngram=4"
    summary = {
        "greedy": {"qa": fig(1.0), "coding": fig(1.0), "overall": fig(1.0)},
        method: {
            "qa": fig(1.04, 1.51, 0.08),
            "coding": fig(1.39, 1.62, 0.63),
            "overall": fig(1.26, 1.56, 0.46),
        },
    }
    lines = chart_text(summary, ["qa", "coding"], colour=False, width=80).plain.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    qa = lines[lines.index("qa") + 2]
    assert qa.startswith(f"  {method}") and qa.endswith("1.04× (oracle 1.51×, efficiency 0.08)")
    assert lines[-1].endswith("1.26× (oracle 1.56×, efficiency 0.46)")
    assert lines[lines.index("qa") + 1].endswith("1.00×")  # greedy: nothing drafted
