"""A decoder is one class and one registry line: a toy decoder defined here shows up in `ask`,
`bench`, the TUI's keys and the settings dialog, with its typed parameter checked everywhere."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specchat.app.cli import app as cli_app
from specchat.decoding.base import Decoder
from specchat.decoding.params import Param
from specchat.decoding.plain import plain_step
from specchat.decoding.registry import DECODERS, build_decoder, scoped_params
from specchat.errors import SpecchatError


class ToyDecoder(Decoder):
    """Greedy in disguise, with one bounded parameter."""

    name = "toy"
    key = "f9"
    description = "a toy decoder defined in a test"
    params = (Param("width", int, 2, "how wide the toy is", minimum=1, maximum=8),)

    def step(self, target, context, sampler, room):
        return plain_step(target, context, sampler)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(DECODERS, ToyDecoder.name, ToyDecoder)  # the one registry line


def test_params_are_typed_and_bounded(fresh_llama):
    pld = DECODERS["pld"]
    assert (
        build_decoder("pld", {"num_pred_tokens": "5"}, fresh_llama).values["num_pred_tokens"] == 5
    )
    cases = [
        ("pld", {"num_pred_tokens": -3}, "pld.num_pred_tokens must be ≥ 1"),
        ("lookahead", {"window": 0}, "lookahead.window must be ≥ 1"),
        ("pld", {"max_ngram": "x"}, "pld.max_ngram must be an integer, not 'x'"),
        ("pld", {"min_ngram": 4, "max_ngram": 2}, "pld.min_ngram must be ≤ pld.max_ngram"),
        ("lookahead", {"seed_from_prompt": "maybe"}, "lookahead.seed_from_prompt must be a"),
        ("pld", {"nope": 1}, "decoder 'pld' has no parameter 'nope'"),
    ]
    for name, values, message in cases:
        with pytest.raises(SpecchatError, match=message):
            build_decoder(name, values, fresh_llama)
    assert pld.param("max_ngram").parse("4", "pld") == 4


def test_bare_params_go_to_every_decoder_that_takes_them():
    per = scoped_params(["greedy", "pld", "lookahead"], {"pld.max_ngram": 2, "window": 3})
    assert per == {"greedy": {}, "pld": {"max_ngram": 2}, "lookahead": {"window": 3}}
    with pytest.raises(SpecchatError, match="no chosen decoder takes 'window'"):
        scoped_params(["greedy", "pld"], {"window": 3})


def test_toy_decoder_runs_in_ask_with_checked_params(toy):
    runner = CliRunner()
    ok = runner.invoke(
        cli_app,
        ["ask", "Hi", "-d", "toy", "-p", "width=3", "--max-tokens", "4", "--json"],
    )
    assert ok.exit_code == 0, ok.output
    done = json.loads(ok.stdout.strip().splitlines()[-1])
    assert done["stats"]["decoders"] == {"toy": {"width": 3}}
    bad = runner.invoke(cli_app, ["ask", "Hi", "-d", "toy", "-p", "toy.width=9"])
    assert isinstance(bad.exception, SpecchatError)
    assert "toy.width must be ≤ 8" in str(bad.exception)


def test_toy_decoder_is_benchmarked(toy, tmp_path):
    from specchat.app.bench_cli import run_bench
    from specchat.options import RunConfig

    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"question_id": 1, "category": "chat", "turns": ["Hi"]}) + "\n")
    out = tmp_path / "r.json"
    run_bench(
        RunConfig(race=["toy"], n_ctx=2048, max_tokens=4, repeats=1),
        data=str(data),
        params={"width": 4},
        categories=None,
        limit_per_category=None,
        json_out=str(out),
        markdown_out=None,
        peers=False,
        command="test",
    )
    report = json.loads(out.read_text())
    assert {"greedy", "toy"} <= set(report["summary"])


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_toy_decoder_has_a_key_and_a_settings_form(toy, fresh_llama):
    from specchat.app.tui.app import SpecchatApp
    from specchat.app.tui.screens.decoder_settings import DecoderSettingsScreen
    from specchat.options import RunConfig

    app = SpecchatApp(settings=RunConfig(), backend=fresh_llama)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("f9")
        await pilot.pause()
        assert app.session.decoder_name == "toy"
        app.push_screen(DecoderSettingsScreen("toy"))
        await pilot.pause()
        app.screen.query_one("#p-width").value = "0"
        await pilot.click("#ds-save")
        await pilot.pause()
        assert any("toy.width must be ≥ 1" in n.message for n in app._notifications)
        field = app.screen.query_one("#p-width")
        field.value = "5"
        field.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert app.session.decoder_params("toy")["width"] == 5
