"""A GGUF runs on the runtime whose measured pass costs make the chosen decoder fastest: the int4
runtime where its header says it can, else llama.cpp; costs never measured are measured once, with
progress, and kept; `--backend` forces one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.backends.block_cost import BlockCostTable
from specchat.backends.registry import GGUF, runtime
from specchat.backends.runtimes import candidates, choose, speed
from specchat.hardware import physical_cores
from specchat.heap import _trim
from specchat.models import LoadOptions, load_model


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of its own: these tests write made-up costs, never the suite's measured ones."""
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def keep_costs(
    cache: Path, name: str, gguf: Path, costs: dict[int, float], threads: int = 1
) -> None:
    key = BlockCostTable.full_key(runtime(name).cost_key(gguf), "cpu", threads)
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / "block_costs.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = {str(k): v for k, v in costs.items()}
    path.write_text(json.dumps(data))


def test_the_int4_runtime_is_a_candidate_where_its_header_allows(bundled_gguf: Path):
    assert candidates(GGUF, bundled_gguf, "cpu") == ["int4", "llama"]
    assert candidates(GGUF, bundled_gguf, "cuda") == ["llama"]


def test_a_plain_decoder_wants_the_cheapest_pass_a_speculative_one_cheap_blocks():
    cheap_single = {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0, 17: 17.0}  # every token costs a pass
    cheap_blocks = {1: 1.2, 2: 1.3, 4: 1.5, 8: 2.5, 17: 5.0}

    def cost(table):
        return lambda k: table[min(table, key=lambda size: abs(size - k))]

    assert speed(cost(cheap_single), False) > speed(cost(cheap_blocks), False)
    assert speed(cost(cheap_blocks), True) > speed(cost(cheap_single), True)


@pytest.mark.parametrize("speculative,expected", [(False, "llama"), (True, "int4")])
def test_the_choice_reads_the_kept_costs(empty_cache, bundled_gguf, speculative, expected):
    sizes = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48)
    keep_costs(empty_cache, "llama", bundled_gguf, {k: 0.010 * k for k in sizes})
    keep_costs(empty_cache, "int4", bundled_gguf, {k: 0.011 + 0.0005 * k for k in sizes})
    heard: list[str] = []
    options = LoadOptions(threads=1, n_ctx=512, speculative=speculative)
    backend = load_model(None, options, heard.append)
    try:
        assert backend.name == expected
        assert not [text for text in heard if "measuring" in text]
    finally:
        backend.close()
    forced = load_model(None, LoadOptions(backend="llama", threads=1, n_ctx=512))
    assert forced.name == "llama"
    forced.close()


@pytest.mark.slow
def test_costs_never_measured_are_measured_once_and_kept(empty_cache, bundled_gguf):
    """Measured with one runtime in memory at a time: each is closed before the next loads
    (both at once, a first start at 1.7B took 6.1 GB, 3.3 GB alone)."""
    heard: list[str] = []
    loaded = {}
    open_now: set[str] = set()
    most_open = []

    def load(name: str):
        options = LoadOptions(threads=1, n_ctx=512)
        backend = loaded[name] = runtime(name).load(bundled_gguf, options, None)
        open_now.add(name)
        most_open.append(len(open_now))
        close = backend.close
        backend.close = lambda: open_now.discard(name) or close()
        return backend

    chosen, backend = choose(GGUF, bundled_gguf, "cpu", 1, True, load, heard.append)
    assert {"int4", "llama"} == set(loaded) and backend is loaded[chosen]
    assert max(most_open) == 1 and open_now == {chosen}
    assert sum("measuring" in text for text in heard) == 2
    for name in ("int4", "llama"):
        assert BlockCostTable.kept(runtime(name).cost_key(bundled_gguf), "cpu", 1) is not None
    backend.close()
    again, none_loaded = choose(GGUF, bundled_gguf, "cpu", 1, True, load, heard.append)
    assert again == chosen and none_loaded is None
    assert sum("measuring" in text for text in heard) == 2
    assert physical_cores() >= 1


def test_a_runtime_measured_beside_a_busy_process_is_compared_on_the_count_kept_for_the_other(
    empty_cache, bundled_gguf
):
    """Beside a busy process int4 runs on one of its two threads and keeps a table for each
    count; llama.cpp's costs were kept for both threads. The choice sets int4's costs on both
    threads against them, as a person's machine would run each alone — not the one-thread
    table, which here says int4 is a hundred times slower."""
    from specchat.backends.threads_by_load import ThreadsByLoad

    sizes = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48)
    slow = {k: 100.0 * k for k in sizes}  # seconds a pass: slower than any real one
    keep_costs(empty_cache, "llama", bundled_gguf, slow, threads=2)
    keep_costs(empty_cache, "int4", bundled_gguf, {k: 100 * v for k, v in slow.items()}, threads=1)
    loaded = {}

    def load(name: str):
        backend = runtime(name).load(bundled_gguf, LoadOptions(threads=2, n_ctx=512), None)
        backend.threads_by_load = ThreadsByLoad(2, lambda: 1.0, cores=2)  # one busy process
        backend.threads_by_load.tick()
        assert backend.threads_by_load.threads == 1
        loaded[name] = backend
        return backend

    chosen, backend = choose(GGUF, bundled_gguf, "cpu", 2, True, load, lambda text: None)
    try:
        assert set(loaded) == {"int4"} and chosen == "int4" and backend is loaded["int4"]
        assert backend.threads_by_load.threads == 1  # it still runs on what the load leaves
    finally:
        for each in loaded.values():
            each.close()


_LOAD_AND_CLOSE = """
import sys
from pathlib import Path
from specchat.backends.registry import runtime
from specchat.models import LoadOptions

def rss(kind):
    status = Path("/proc/self/status").read_text()
    return int(status.split(f"Rss{kind}:")[1].split()[0])

before = [rss("Anon"), rss("File")]
backend = runtime("int4").load(Path(sys.argv[1]), LoadOptions(threads=1, n_ctx=512), None)
loaded = [rss("Anon") - before[0], rss("File") - before[1]]
backend.close()
del backend
print(*loaded, rss("Anon") - before[0], rss("File") - before[1])
"""


@pytest.mark.skipif(
    _trim() is None or not Path("/proc/self/status").exists(),
    reason="no malloc_trim in this C library (musl, macOS): it keeps what it keeps",
)
def test_a_closed_runtime_gives_its_memory_back(
    tmp_path: Path, bundled_gguf: Path, session_cache: Path
) -> None:
    """The chooser closes each runtime it measured before the next loads, and a chat keeps the
    one it runs. int4's weights, freed on close, stayed with the process in glibc's heap: 935
    MiB for the rest of its life after the 1.7B Q4_K_M was measured, 87 of the bundled model's
    179 (a first load, laying the weights out, as here). The file's pages it read go too."""
    kernels = session_cache / "int4-kernels"  # built already: only the weights laid out anew
    if kernels.is_dir():
        shutil.copytree(kernels, tmp_path / kernels.name)
    ran = subprocess.run(
        [sys.executable, "-c", _LOAD_AND_CLOSE, str(bundled_gguf)],
        env={**os.environ, "SPECCHAT_CACHE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    loaded, read, kept, still_mapped = map(int, ran.stdout.split())
    assert loaded > 50 * 1024  # the weights laid out, in KiB
    assert kept < loaded / 4
    # the file's pages the layout read (94 MB), let go with the runtime: a header kept for the
    # path (parsed once a process) held them while its tensors were read through its mapping
    assert read > 50 * 1024 and still_mapped < read / 4
