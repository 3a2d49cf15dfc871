"""`specchat pull` and what it leaves: the files chosen for REPO[:QUANT|:FILE] from a repo's file
list (given as data: the download itself cannot run here), the one line when the hub cannot be
reached, and a repo in the Hugging Face cache's own layout listed and answered by --model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specchat.bundled import bundled_gguf
from specchat.errors import SpecchatError
from specchat.hf_files import ModelName, choose_files, quant_of
from tests.cli import run_cli

# bartowski/SmolLM2-1.7B-Instruct-GGUF's files, as its listing gives them (shortened)
GGUF_REPO = [
    ".gitattributes",
    "README.md",
    "SmolLM2-1.7B-Instruct-IQ4_XS.gguf",
    "SmolLM2-1.7B-Instruct-Q2_K.gguf",
    "SmolLM2-1.7B-Instruct-Q4_0.gguf",
    "SmolLM2-1.7B-Instruct-Q4_K_M.gguf",
    "SmolLM2-1.7B-Instruct-Q4_K_S.gguf",
    "SmolLM2-1.7B-Instruct-Q5_K_M.gguf",
    "SmolLM2-1.7B-Instruct-Q8_0.gguf",
    "SmolLM2-1.7B-Instruct-f16.gguf",
    "mmproj-SmolLM2-f16.gguf",
]
SPLIT_REPO = [
    "Big-Q8_0-00001-of-00002.gguf",
    "Big-Q8_0-00002-of-00002.gguf",
    "Big-Q4_K_M.gguf",
    "Q8_0/ignored.txt",
]


def chosen(files: list[str], spec: str) -> list[str]:
    return choose_files(files, ModelName.parse(spec))


def test_a_repo_alone_pulls_llama_cpps_default_quantization():
    assert chosen(GGUF_REPO, "org/repo") == ["SmolLM2-1.7B-Instruct-Q4_K_M.gguf"]
    assert chosen(GGUF_REPO[:5], "org/repo") == ["SmolLM2-1.7B-Instruct-Q4_0.gguf"]


def test_a_named_quantization_or_file_is_what_is_pulled():
    assert chosen(GGUF_REPO, "org/repo:q8_0") == ["SmolLM2-1.7B-Instruct-Q8_0.gguf"]
    assert chosen(GGUF_REPO, "org/repo:IQ4_XS") == ["SmolLM2-1.7B-Instruct-IQ4_XS.gguf"]
    assert chosen(GGUF_REPO, "org/repo:F16") == ["SmolLM2-1.7B-Instruct-f16.gguf"]
    file = "SmolLM2-1.7B-Instruct-Q5_K_M.gguf"
    assert chosen(GGUF_REPO, f"org/repo:{file}") == [file]


def test_a_split_file_comes_with_every_part():
    assert chosen(SPLIT_REPO, "org/big:Q8_0") == SPLIT_REPO[:2]
    assert quant_of(SPLIT_REPO[1]) == "Q8_0"


def test_a_transformers_repo_is_pulled_whole():
    files = ["config.json", "model.safetensors", "tokenizer.json"]
    assert chosen(files, "org/tiny") == files


@pytest.mark.parametrize(
    "files,spec,message",
    [
        (GGUF_REPO, "org/repo:Q3_K_L", "has no Q3_K_L file; it has F16, IQ4_XS, Q2_K, Q4_0"),
        (GGUF_REPO, "org/repo:nope.gguf", "has no file nope.gguf"),
        (["README.md"], "org/repo", "holds no GGUF file"),
        (GGUF_REPO, "not-a-repo", "is not a Hugging Face repo"),
    ],
)
def test_what_cannot_be_pulled_is_one_line(files, spec, message):
    with pytest.raises(SpecchatError, match=message):
        chosen(files, spec)


def test_pull_says_in_one_line_when_the_hub_cannot_be_reached():
    """A closed port on loopback stands for a machine without network: no retries, one line."""
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0"}
    result = run_cli("pull", "org/repo:Q4_K_M", env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specchat: error: cannot reach 127.0.0.1:9")
    offline = run_cli("pull", "org/repo", env={**env, "HF_HUB_OFFLINE": "1"})
    assert offline.returncode == 2 and "HF_HUB_OFFLINE is set" in offline.stderr


@pytest.mark.skipif(bundled_gguf() is None, reason="the bundled model is missing")
def test_a_pulled_gguf_repo_is_listed_and_answers(tmp_path: Path):
    """The cache as the hub library writes it (models--ORG--NAME/snapshots/REV/FILE, refs/main),
    holding the bundled GGUF under a quantization's name: listed as ORG/NAME:Q4_1 and opened by
    that name."""
    repo = tmp_path / "hub" / "models--someorg--Smol-GGUF"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "Smol-Q4_1.gguf").symlink_to(bundled_gguf())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    env = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    listed = run_cli("models", env=env)
    assert "someorg/Smol-GGUF:Q4_1" in listed.stdout, listed.stdout + listed.stderr
    answered = run_cli(
        "ask", "Say hi.", "--model", "someorg/Smol-GGUF:Q4_1", "--max-tokens", "3", "--json",
        "--no-log", env=env,
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    done = json.loads(answered.stdout.strip().splitlines()[-1])
    assert done["model"] == "someorg/Smol-GGUF:Q4_1" and done["token_ids"]
    missing = run_cli("ask", "hi", "--model", "someorg/Smol-GGUF:Q8_0", env=env)
    assert missing.returncode == 2 and "has no Q8_0 file; it has Q4_1" in missing.stderr
