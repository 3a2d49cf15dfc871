"""settings.toml means the same in every command: `ask`, `compare`, `bench`, the chat and the
line-mode chat all read it through one resolver (`options.resolve`), with the environment's
SPECCHAT_* variables over it and the command line over both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specchat.app.tui.app import SpecchatApp
from tests.cli import run_cli

from .tui.conftest import wait_until

SETTINGS = """\
decoder = "pld"
max_tokens = 3

[decoders.pld]
num_pred_tokens = 7
"""


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "config"
    folder.mkdir()
    (folder / "settings.toml").write_text(SETTINGS)
    return folder


def ask_json(config_dir: Path, *args: str, env: dict | None = None) -> dict:
    result = run_cli(
        "ask",
        "Count from one to twenty.",
        "--json",
        "--no-log",
        *args,
        env={"SPECCHAT_CONFIG_DIR": str(config_dir), **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_ask_runs_the_settings_decoder_parameters_and_length(config_dir: Path):
    done = ask_json(config_dir)
    assert len(done["token_ids"]) == 3 and done["finish_reason"] == "max_tokens"
    assert done["stats"]["decoders"]["pld"]["num_pred_tokens"] == 7
    # the environment over the file, the command line over both
    assert len(ask_json(config_dir, env={"SPECCHAT_MAX_TOKENS": "2"})["token_ids"]) == 2
    flagged = ask_json(config_dir, "--max-tokens", "4", env={"SPECCHAT_MAX_TOKENS": "2"})
    assert len(flagged["token_ids"]) == 4


@pytest.mark.slow
def test_compare_and_bench_read_the_same_file(config_dir: Path, tmp_path: Path):
    env = {"SPECCHAT_CONFIG_DIR": str(config_dir)}
    compared = run_cli("compare", "Count to ten.", "-d", "pld", "--repeats", "1", "--json", env=env)
    assert compared.returncode == 0, compared.stderr
    report = json.loads(compared.stdout)
    assert report["max_tokens"] == 3
    rows = {row["decoder"]: row for row in report["decoders"]}
    assert rows["pld"]["params"]["num_pred_tokens"] == 7 and rows["pld"]["tokens"] <= 3

    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"question_id": 1, "category": "c", "turns": ["Hi"]}) + "\n")
    out = tmp_path / "r.json"
    benched = run_cli("bench", "--data", str(data), "-d", "pld", "--json", str(out), env=env)
    assert benched.returncode == 0, benched.stderr
    environment = json.loads(out.read_text())["environment"]
    assert environment["max_tokens"] == 3
    assert environment["decoder_params"]["pld"]["num_pred_tokens"] == 7


def test_the_line_mode_chat_reads_the_settings(config_dir: Path):
    env = {"SPECCHAT_CONFIG_DIR": str(config_dir)}
    once = ask_json(config_dir)  # the same model, decoder and length: the same answer
    chatted = run_cli(stdin="Count from one to twenty.\n", env=env)
    assert chatted.returncode == 0, chatted.stderr
    assert f"> {once['text']}" in chatted.stdout


def test_a_decoder_spelt_with_parameters_means_the_same_in_ask_and_the_line_mode_chat(
    tmp_path: Path,
):
    """`decoder = "pld:num_pred_tokens=5"` (compare's spelling) in the file, or `-d` on the
    command line: the decoder and its parameter for this run, in `ask` and the line-mode chat."""
    folder = tmp_path / "config"
    folder.mkdir()
    (folder / "settings.toml").write_text('decoder = "pld:num_pred_tokens=5"\nmax_tokens = 3\n')
    done = ask_json(folder)
    assert done["decoder"] == "pld"
    assert done["stats"]["decoders"]["pld"]["num_pred_tokens"] == 5
    flagged = ask_json(folder, "-d", "pld:num_pred_tokens=9")
    assert flagged["stats"]["decoders"]["pld"]["num_pred_tokens"] == 9
    chatted = run_cli(stdin="Count from one to twenty.\n", env={"SPECCHAT_CONFIG_DIR": str(folder)})
    assert chatted.returncode == 0, chatted.stderr
    assert f"> {done['text']}" in chatted.stdout


@pytest.mark.anyio
async def test_the_chat_reads_the_settings(config_dir: Path, fresh_llama, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(config_dir))
    app = SpecchatApp(backend=fresh_llama)  # reads the settings file, as `specchat` does
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.session.ready)
        assert app.session.decoder_name == "pld"
        assert app.session.decoder_params("pld")["num_pred_tokens"] == 7
        app.screen.query_one("#prompt").insert("Count from one to twenty.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(app.screen.messages) == 2 and not app.session.busy)
        assert app.screen.messages[-1].stats.generated_tokens == 3


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
