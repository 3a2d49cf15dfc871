"""`draft` finds its draft among the user's models: the largest GGUF that `specchat models` lists
with the target's vocabulary (its tokens, in id order) and at most a third of its size. Random-
weight files of two sizes with the bundled tokenizer, in a folder the settings name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.random_gguf import RandomShape, write_random_gguf
from specchat.app.session import ChatSession
from specchat.backends.gguf.header import GGUFHeader
from specchat.decoding.registry import default_decoder
from specchat.history import HistoryStore
from specchat.models import LoadOptions, load_model, smaller_sibling
from specchat.options import RunConfig
from tests.cli import run_cli


@pytest.fixture(scope="module")
def sizes(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("models")
    big = write_random_gguf(folder / "big.gguf", RandomShape(layers=4, dim=512, ffn=1024), "Q4_0")
    small = write_random_gguf(folder / "small.gguf", RandomShape(), "Q4_0", seed=1)
    return {"folder": folder, "big": big, "small": small}


def _renamed_token(source: Path, target: Path) -> Path:
    """`source` with one token spelled otherwise (same length): another vocabulary."""
    data = source.read_bytes()
    at = data.index("Ġthe".encode())
    target.write_bytes(data[:at] + "Ġthq".encode() + data[at + len("Ġthe".encode()) :])
    return target


def test_the_smaller_model_with_the_same_tokens_is_the_draft(sizes, tmp_path):
    assert smaller_sibling(sizes["big"], [str(sizes["folder"])]) == sizes["small"]
    assert smaller_sibling(sizes["small"], [str(sizes["folder"])]) is None  # none smaller
    other = tmp_path / "other"
    other.mkdir()
    (other / "big.gguf").symlink_to(sizes["big"])
    renamed = _renamed_token(sizes["small"], other / "small-other-vocab.gguf")
    assert GGUFHeader(renamed).vocabulary_key() != GGUFHeader(sizes["small"]).vocabulary_key()
    assert smaller_sibling(other / "big.gguf", [str(other)]) is None


@pytest.mark.slow
def test_ask_with_draft_drafts_with_the_found_model(sizes, tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    (config / "settings.toml").write_text(f"model_folders = [{json.dumps(str(sizes['folder']))}]\n")
    env = {"SPECCHAT_CONFIG_DIR": str(config), "SPECCHAT_DATA_DIR": str(tmp_path)}
    args = ("--max-tokens", "12", "--json", "--no-log", "-d", "draft")
    ran = run_cli("ask", "Say hi.", "--model", str(sizes["big"]), *args, env=env)
    assert ran.returncode == 0, ran.stderr
    done = json.loads(ran.stdout.strip().splitlines()[-1])
    assert done["decoder"] == "draft" and done["token_ids"]
    # the greedy family stays greedy's: the same tokens as greedy on the same file
    greedy = run_cli(
        "ask", "Say hi.", "--model", str(sizes["big"]), "--max-tokens", "12", "--json",
        "--no-log", "-d", "greedy", env=env,
    )  # fmt: skip
    assert json.loads(greedy.stdout.strip().splitlines()[-1])["token_ids"] == done["token_ids"]
    # the smaller one has no draft of its own: one line
    alone = run_cli("ask", "Say hi.", "--model", str(sizes["small"]), *args, env=env)
    assert alone.returncode == 2
    assert "no smaller model with this one's vocabulary" in alone.stderr
    # with no decoder named, the found draft is the default where the target's pass costs say
    # a same-family draft would pay (int4's, in the suite's fixed costs: a drafted token costs
    # a twelfth of a pass), and the answer is still greedy's
    default = run_cli("ask", "Say hi.", "--model", str(sizes["big"]), "--backend", "int4",
                      "--max-tokens", "12", "--json", "--no-log", env=env)  # fmt: skip
    done = json.loads(default.stdout.strip().splitlines()[-1])
    assert done["decoder"] == "draft" and done["runtime"] == "int4"
    # and says which model drafted
    assert done["stats"]["decoders"]["draft"]["draft"] == str(sizes["small"])
    on_int4 = run_cli("ask", "Say hi.", "--model", str(sizes["big"]), "--backend", "int4",
                      "--max-tokens", "12", "--json", "--no-log", "-d", "greedy", env=env)  # fmt: skip
    assert done["token_ids"] == json.loads(on_int4.stdout.strip().splitlines()[-1])["token_ids"]
    # on llama.cpp, where each drafted token costs three quarters of a pass, it is only offered
    llama = run_cli("ask", "Hi", "--model", str(sizes["big"]), "--backend", "llama",
                    "--max-tokens", "2", "--json", "--no-log", env=env)  # fmt: skip
    assert json.loads(llama.stdout.strip().splitlines()[-1])["decoder"] == "suffix"


@pytest.mark.slow
def test_a_chat_given_another_model_runs_that_ones_own_default(sizes, tmp_path):
    """Nothing chosen: the chat drafts with the found model where that is the default, and
    when it is handed a model whose default is another (the same file on llama.cpp, where the
    draft is only offered) it runs that one, not the draft decoder it happened to run before."""
    config = RunConfig(
        backend="int4", model=str(sizes["big"]), model_folders=[str(sizes["folder"])], max_tokens=4
    )
    store = HistoryStore(tmp_path / "chat.sqlite3")
    session = ChatSession(config, config, store, save_settings_file=False)
    on_llama = load_model(
        str(sizes["big"]), LoadOptions(backend="llama", model_folders=tuple(config.model_folders))
    )
    try:
        session.load(lambda text: None)
        assert session.decoder_name == "draft"
        assert "draft=small.gguf" in session.params_label("draft")  # the status line names it
        assert session.unavailable_reason("draft") is None
        session.use_model(on_llama)
        assert session.unavailable_reason("draft") is None  # offered there
        assert session.decoder_name == default_decoder(on_llama) == "suffix"
    finally:
        session.close()
        on_llama.close()
        store.close()
