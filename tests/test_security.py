"""What specchat never does with a user's files, network and secrets, checked on real processes:

- loading a model runs no code from it: pickle weights are refused unless `--allow-pickle`, a
  model's own Python code is not imported unless `--trust-remote-code` (each test plants code
  that would leave a marker file, and the marker never appears);
- no network at run time but the remote server the user names (Python's audit hook logs every
  socket connection the process makes, with the environment asking the Hugging Face libraries
  to go online);
- an API key is read from the variable the user names and sent to the server, and never written
  to settings, history, cache or the output.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.servers import FaultServer

# Python's audit hook sees every socket connection and name lookup of the process it runs in.
AUDIT = """
import os, sys

def _audit(event, args):
    if event in ("socket.connect", "socket.getaddrinfo"):
        with open(os.environ["SPECCHAT_TEST_NET_LOG"], "a") as log:
            address = args[1] if event == "socket.connect" else args[:2]
            log.write(f"{event} {address!r}\\n")

sys.addaudithook(_audit)
"""


def run(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specchat", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONWARNINGS": "ignore", **env},
    )


def private(root: Path) -> dict[str, str]:
    return {
        "SPECCHAT_CONFIG_DIR": str(root / "config"),
        "SPECCHAT_DATA_DIR": str(root / "data"),
        "SPECCHAT_CACHE_DIR": str(root / "cache"),
    }


def one_line_error(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert all(word in line for word in words), line


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama saved as a Hugging Face directory, in safetensors."""
    import torch

    from tests.tiny_models import tiny_model, tiny_tokenizer

    folder = tmp_path_factory.mktemp("tiny") / "tiny-llama"
    tiny_model(dtype=torch.float32).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


class _Plant:
    """Unpickling this runs `touch MARKER`: what a malicious .bin file does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _copy_without_weights(source: Path, target: Path) -> Path:
    target.mkdir(parents=True)
    for file in source.iterdir():
        if file.suffix != ".safetensors":
            (target / file.name).write_bytes(file.read_bytes())
    return target


@pytest.mark.slow
def test_pickle_weights_are_refused_and_never_unpickled(tiny_dir: Path, tmp_path: Path):
    folder = _copy_without_weights(tiny_dir, tmp_path / "pickled")
    marker = tmp_path / "pickle-ran"
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_Plant(marker)))
    result = run("ask", "t5 t6", "--raw", "--model", str(folder), env=private(tmp_path))
    one_line_error(result, "pickle", "--allow-pickle")
    assert not marker.exists()


@pytest.mark.slow
def test_pickle_weights_load_with_allow_pickle(tiny_dir: Path, tmp_path: Path):
    import torch
    from safetensors.torch import load_file

    folder = _copy_without_weights(tiny_dir, tmp_path / "pickled")
    weights = load_file(tiny_dir / "model.safetensors")
    torch.save(weights, folder / "pytorch_model.bin")  # a genuine, harmless pickle
    args = ("ask", "t5 t6", "--raw", "--model", str(folder), "--max-tokens", "3")
    one_line_error(run(*args, env=private(tmp_path)), "pickle")
    allowed = run(*args, "--allow-pickle", env=private(tmp_path))
    assert allowed.returncode == 0, allowed.stderr


@pytest.mark.slow
def test_the_chat_takes_allow_pickle_as_its_error_says(tiny_dir: Path, tmp_path: Path):
    """The line-mode chat (stdin is a pipe) refuses pickle weights in one line naming
    --allow-pickle, and with that flag loads them; the consent is never saved."""
    import torch
    from safetensors.torch import load_file

    folder = _copy_without_weights(tiny_dir, tmp_path / "pickled")
    torch.save(load_file(tiny_dir / "model.safetensors"), folder / "pytorch_model.bin")
    refused = run("--model", str(folder), env=private(tmp_path))
    one_line_error(refused, "pickle", "--allow-pickle")
    allowed = run("--allow-pickle", "--model", str(folder), env=private(tmp_path))
    assert allowed.returncode == 0, allowed.stderr
    assert "specchat on pickled (hf, cpu)" in allowed.stdout
    settings = tmp_path / "config" / "settings.toml"
    assert not settings.exists() or "pickle" not in settings.read_text()


@pytest.mark.slow
def test_a_models_own_code_is_not_run_without_trust_remote_code(tiny_dir: Path, tmp_path: Path):
    folder = tmp_path / "custom"
    folder.mkdir()
    for file in tiny_dir.iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    marker = tmp_path / "remote-code-ran"
    code = f"open({str(marker)!r}, 'w').close()\nfrom transformers import LlamaConfig\n"
    (folder / "configuration_planted.py").write_text(
        code + "class PlantedConfig(LlamaConfig):\n    model_type = 'planted'\n"
    )
    (folder / "modeling_planted.py").write_text(
        code + "from transformers import LlamaForCausalLM as PlantedModel\n"
    )
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "planted"
    config["auto_map"] = {
        "AutoConfig": "configuration_planted.PlantedConfig",
        "AutoModelForCausalLM": "modeling_planted.PlantedModel",
    }
    (folder / "config.json").write_text(json.dumps(config))
    result = run("ask", "t5 t6", "--raw", "--model", str(folder), env=private(tmp_path))
    one_line_error(result, "cannot load model")
    assert not marker.exists()


# -- network ------------------------------------------------------------------------------------


@pytest.fixture
def network_log(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose specchat logs every connection it makes, and that asks the Hugging
    Face libraries to go online (specchat must override it)."""
    hook = tmp_path / "audit"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(AUDIT)
    log = tmp_path / "network.log"
    log.write_text("")
    env = {
        **private(tmp_path),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
        "SPECCHAT_TEST_NET_LOG": str(log),
        "HF_HUB_OFFLINE": "0",
        "TRANSFORMERS_OFFLINE": "0",
    }
    return env, log


@pytest.mark.slow
def test_no_network_at_run_time_on_local_models(tiny_dir: Path, network_log):
    env, log = network_log
    for args in (
        ("ask", "Say hi.", "--max-tokens", "3"),  # the bundled GGUF on llama.cpp
        ("ask", "t5 t6", "--raw", "--model", str(tiny_dir), "--max-tokens", "3"),  # hf
        ("models",),
    ):
        result = run(*args, env=env)
        assert result.returncode == 0, result.stderr
    assert log.read_text() == ""


def test_a_remote_backend_connects_to_the_users_server_only(network_log):
    env, log = network_log
    with FaultServer("plain") as server:
        result = run("ask", "hi", "--backend", "openai", "--base-url", server.base_url, env=env)
    assert result.returncode == 0, result.stderr
    connections = [line for line in log.read_text().splitlines() if line.startswith("socket.conn")]
    assert connections and all(f"{server.port})" in line for line in connections), connections


# -- secrets -------------------------------------------------------------------------------------


def test_an_api_key_is_sent_to_the_server_and_written_nowhere(tmp_path: Path):
    secret = f"sk-specchat-test-{uuid.uuid4().hex}"
    env = {**private(tmp_path), "MY_SERVER_KEY": secret}
    with FaultServer("plain") as server:
        result = run(
            "ask",
            "hi",
            "--backend",
            "openai",
            "--base-url",
            server.base_url,
            "--api-key-env",
            "MY_SERVER_KEY",
            env=env,
        )
    assert result.returncode == 0, result.stderr
    headers = [{k.lower(): v for k, v in h.items()} for h in server.headers]
    assert headers and all(h.get("authorization") == f"Bearer {secret}" for h in headers)
    assert secret not in result.stdout + result.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name.endswith(".sqlite3") for p in written), "the exchange was recorded"
    for path in written:
        assert secret.encode() not in path.read_bytes(), path
