"""The runtime registry: every runtime is declared once, and its name appears nowhere else."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import specchat
from specchat.backends.registry import (
    GGUF,
    HF_FOLDER,
    RUNTIMES,
    SERVER,
    native_runtimes,
    runtime,
    runtime_of,
)
from specchat.errors import SpecchatError
from specchat.models import LoadOptions

ROOT = Path(specchat.__file__).parent
# files where "llama" is a GGUF file's architecture (general.architecture), not the runtime
GGUF_ARCHITECTURES = {
    "backends/int4/families.py",
    "backends/gguf/header.py",
    "benchmarks/random_gguf.py",
}


def test_no_runtime_name_outside_the_registry():
    """Options, loading, the chooser, drafts and peers read the registry: no string literal
    under specchat/ names a runtime but the registry's own."""
    found = []
    for path in ROOT.rglob("*.py"):
        where = str(path.relative_to(ROOT))
        if where == "backends/registry.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in RUNTIMES:
                if node.value == "llama" and where in GGUF_ARCHITECTURES:
                    continue
                found.append(f"{where}:{node.lineno} {node.value!r}")
    assert found == []


def test_every_declared_function_resolves():
    """A runtime's loader, checks, cost key and self-drafting are named, not imported: each name
    must lead to a function."""
    import importlib

    for rt in RUNTIMES.values():
        for spec in (rt.loader, rt.checks, rt.costs, rt.self_drafts):
            if spec:
                module, _, name = spec.partition(":")
                assert callable(getattr(importlib.import_module(module), name)), spec


def test_the_chooser_picks_among_a_formats_own_runtimes():
    assert [r.name for r in native_runtimes(GGUF)] == ["int4", "llama"]
    assert [r.name for r in native_runtimes(HF_FOLDER)] == ["hf"]
    assert not SERVER.local and SERVER.formats == ()


@pytest.mark.parametrize("name", ["int4", "llama"])
def test_a_runtime_loads_as_itself(name: str, bundled_gguf: Path):
    backend = runtime(name).load(bundled_gguf, LoadOptions(threads=1, n_ctx=256), None)
    try:
        assert backend.name == name and runtime_of(backend) is RUNTIMES[name]
        assert runtime(name).cost_key(bundled_gguf).startswith(f"{name}|")
    finally:
        backend.close()


def test_an_unknown_runtime_is_one_line():
    with pytest.raises(SpecchatError, match=r"unknown backend 'vllm': use int4, llama, hf, openai"):
        runtime("vllm")
