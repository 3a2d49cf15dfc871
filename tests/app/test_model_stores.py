"""Models kept by ollama and LM Studio, found where they are: real store layouts in a temporary
folder (ollama's manifests and content-addressed blobs, LM Studio's PUBLISHER/REPO/FILE.gguf)
holding the bundled GGUF, listed by `specchat models` and answered through `--model NAME`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from specchat.bundled import bundled_gguf
from specchat.model_stores import ollama_models, ollama_name
from specchat.models import list_models, listing_facts
from tests.cli import run_cli

pytestmark = pytest.mark.skipif(bundled_gguf() is None, reason="the bundled model is missing")


def _ollama_store(root: Path, names: list[tuple[str, str, str, str]]) -> None:
    """An ollama store as ollama writes it: the GGUF as blobs/sha256-HEX, one manifest per
    model and tag naming it (and a template layer, as real manifests have)."""
    gguf = bundled_gguf()
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    (root / "blobs").mkdir(parents=True)
    (root / "blobs" / f"sha256-{digest}").symlink_to(gguf)
    (root / "blobs" / "sha256-template").write_text("{{ .Prompt }}")
    for host, namespace, model, tag in names:
        folder = root / "manifests" / host / namespace / model
        folder.mkdir(parents=True, exist_ok=True)
        manifest = {
            "schemaVersion": 2,
            "layers": [
                {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"},
                {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:template"},
            ],
        }
        (folder / tag).write_text(json.dumps(manifest))


@pytest.fixture
def stores(tmp_path: Path) -> dict[str, str]:
    ollama, lmstudio = tmp_path / "ollama", tmp_path / "lmstudio"
    _ollama_store(
        ollama,
        [
            ("registry.ollama.ai", "library", "smol", "135m"),
            ("registry.ollama.ai", "someone", "tuned", "latest"),
        ],
    )
    broken = ollama / "manifests" / "registry.ollama.ai" / "library" / "broken"
    broken.mkdir(parents=True)
    (broken / "latest").write_text("{not json")
    missing = ollama / "manifests" / "registry.ollama.ai" / "library" / "gone"
    missing.mkdir(parents=True)
    (missing / "latest").write_text(json.dumps({"layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "0" * 64}
    ]}))  # fmt: skip
    repo = lmstudio / "HuggingFaceTB" / "SmolLM2-135M-Instruct-GGUF"
    repo.mkdir(parents=True)
    (repo / "smollm2-135m-instruct-q4_1.gguf").symlink_to(bundled_gguf())
    (repo / "mmproj-f16.gguf").write_bytes(b"GGUF")  # a vision projector, not a model
    return {"OLLAMA_MODELS": str(ollama), "LMSTUDIO_MODELS": str(lmstudio)}


def test_ollama_names_models_as_ollama_list_does():
    assert ollama_name("registry.ollama.ai", "library", "qwen2.5", "1.5b") == "qwen2.5:1.5b"
    assert ollama_name("registry.ollama.ai", "me", "m", "latest") == "me/m:latest"
    assert ollama_name("hf.co", "bartowski", "x-GGUF", "Q4_K_M") == "hf.co/bartowski/x-GGUF:Q4_K_M"


def test_a_manifest_that_is_broken_or_names_a_missing_blob_is_skipped(stores):
    names = [m.name for m in ollama_models(Path(stores["OLLAMA_MODELS"]))]
    assert names == ["smol:135m", "someone/tuned:latest"]


def test_models_lists_what_ollama_and_lm_studio_keep(stores):
    result = run_cli("models", env=stores)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line[:1] == " "}
    lm_name = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/smollm2-135m-instruct-q4_1.gguf"
    for name, store in (("smol:135m", "ollama"), ("someone/tuned:latest", "ollama"),
                        (lm_name, "LM Studio")):  # fmt: skip
        assert name in rows, result.stdout
        assert rows[name].split()[1:3] == ["llama", "Q4_1"], rows[name]
        assert rows[name].rstrip().endswith(store), rows[name]
    assert "mmproj" not in result.stdout and "broken" not in result.stdout
    # each model's second line names the runtimes that run it here
    assert result.stdout.count("runs on int4, llama") >= 4, result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smol:135m", "smol:latest", "someone/tuned"])
def test_ask_answers_with_a_model_named_as_ollama_names_it(stores, name):
    """`smol:latest` is not in the store (only its 135m tag): one line, exit 2. `someone/tuned`
    without a tag is `someone/tuned:latest`, as ollama reads it."""
    result = run_cli(
        "ask", "Say hi.", "--model", name, "--max-tokens", "4", "--json", "--no-log", env=stores
    )
    if name == "smol:latest":
        assert result.returncode == 2 and "model not found: smol:latest" in result.stderr
        return
    assert result.returncode == 0, result.stderr
    done = json.loads(result.stdout.strip().splitlines()[-1])
    assert done["token_ids"] and done["model"] == (name if ":" in name else f"{name}:latest")


def test_folders_the_settings_name_are_listed_and_taken_by_name(tmp_path, stores):
    """settings.toml's model_folders (and --model-folder): every GGUF below each folder, named
    by its path there, in `specchat models`, and answered through `--model NAME`."""
    folder = tmp_path / "my-models"
    (folder / "smol").mkdir(parents=True)
    (folder / "smol" / "tiny-q4_1.gguf").symlink_to(bundled_gguf())
    config = tmp_path / "config"
    config.mkdir()
    (config / "settings.toml").write_text(f"model_folders = [{json.dumps(str(folder))}]\n")
    env = {**stores, "SPECCHAT_CONFIG_DIR": str(config), "SPECCHAT_DATA_DIR": str(tmp_path)}
    listed = run_cli("models", env=env)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "smol/tiny-q4_1.gguf" in line)
    assert row.split()[1:3] == ["llama", "Q4_1"] and row.rstrip().endswith(f"folder {folder}")
    asked = run_cli(
        "ask", "Say hi.", "--model", "smol/tiny-q4_1.gguf", "--max-tokens", "2", "--json",
        "--no-log", env=env,
    )  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout.strip().splitlines()[-1])["token_ids"]
    # without the setting the name means nothing; the flag names the folder for one run
    bare = {**env, "SPECCHAT_CONFIG_DIR": str(tmp_path / "no-config")}
    missing = run_cli("ask", "Hi", "--model", "smol/tiny-q4_1.gguf", "--no-log", env=bare)
    assert missing.returncode == 2 and "not in the local Hugging Face cache" in missing.stderr
    flagged = run_cli(
        "ask", "Hi", "--model", "smol/tiny-q4_1.gguf", "--model-folder", str(folder),
        "--max-tokens", "2", "--no-log", env=bare,
    )  # fmt: skip
    assert flagged.returncode == 0, flagged.stderr
    # `models` takes the flag too: it lists what `ask --model-folder` would open
    shown = run_cli("models", "--model-folder", str(folder), env=bare)
    assert shown.returncode == 0, shown.stderr
    assert "smol/tiny-q4_1.gguf" in shown.stdout


def test_a_file_no_runtime_loads_is_listed_as_running_on_nothing(tmp_path, stores):
    """A GGUF header with no architecture (every runtime refuses it, in one line) is not
    offered to llama.cpp in the listing: it runs on nothing, and the line says why."""
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "headless.gguf").write_bytes(b"GGUF" + (3).to_bytes(4, "little") + bytes(16))
    env = {
        **stores,
        "SPECCHAT_CONFIG_DIR": str(tmp_path / "none"),
        "SPECCHAT_DATA_DIR": str(tmp_path),
    }
    shown = run_cli("models", "--model-folder", str(folder), env=env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("  headless.gguf"))
    assert (
        lines[row + 1]
        .strip()
        .startswith("runs on nothing (not a valid GGUF: no general.architecture)")
    )
    asked = run_cli("ask", "Hi", "--model", str(folder / "headless.gguf"), "--no-log", env=env)
    assert asked.returncode == 2 and "no general.architecture" in asked.stderr


def test_a_model_gone_since_it_was_listed_is_said_in_its_facts(stores, monkeypatch):
    """The picker reads each listed file's header after listing it: a file removed in between
    (a download cleaned up, a store pruned) says so in its line, and the others keep theirs."""
    for variable, value in stores.items():
        monkeypatch.setenv(variable, value)
    listed = {m.spec: m for m in list_models()}
    gone = listed["HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/smollm2-135m-instruct-q4_1.gguf"]
    assert gone.path.is_symlink()  # the store's link, never the bundled file it points to
    gone.path.unlink()
    assert str(listing_facts(gone)[3]).startswith("nothing (cannot read it: No such file")
    assert listing_facts(listed["smol:135m"])[:2] == ("llama", "Q4_1")
