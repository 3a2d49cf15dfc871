"""Which runtime runs a model: the one whose measured pass costs make the chosen decoder fastest.

A model runs on each runtime whose own format it is (`backends/registry.py`) and that can run it: a
GGUF on llama.cpp, and on the int4 runtime when its header says it can (a family and types it
carries, on the CPU); a Hugging Face folder on transformers alone. Each runtime's pass costs are
measured once per model, device and threads and kept (`block_cost.py`); the choice reads them —
measuring, once and with progress, a runtime whose costs were never measured: each size timed once,
one runtime loaded at a time, the chosen runtime's sweep then timed whole, the other's glance kept —
and picks the faster for the decoder: a plain decoder by its one-token pass, a speculative one by
the most tokens per second a draft of the best length gives when each drafted token is accepted with
`PRIOR_ACCEPTANCE` (the rate the draft policy itself starts from). `--backend` forces a runtime and
skips all this.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specchat.backends.base import Backend
from specchat.backends.registry import native_runtimes
from specchat.backends.threads_by_load import held_threads
from specchat.errors import SpecchatError
from specchat.hardware import physical_cores

PRIOR_ACCEPTANCE = 0.5
_LONGEST_DRAFT = 16


def candidates(model_format: str, path: Path, device: str) -> list[str]:
    """The runtimes that can run the model at `path` (of `model_format`) on `device`, in the
    order a tie goes (the registry's)."""
    return [r.name for r in native_runtimes(model_format) if r.unavailable(path, device) is None]


def speed(cost: Callable[[int], float], speculative: bool) -> float:
    """Tokens per second a decoder can expect from a runtime with pass costs `cost(k)`."""
    if not speculative:
        return 1.0 / cost(1)
    best, expected = 0.0, 0.0
    for drafted in range(_LONGEST_DRAFT + 1):
        expected += PRIOR_ACCEPTANCE**drafted  # tokens a pass yields, drafting this many
        best = max(best, expected / cost(drafted + 1))
    return best


def choose(
    model_format: str,
    path: Path,
    device: str,
    threads: int | None,
    speculative: bool,
    load: Callable[[str], Backend],
    progress: Callable[[str], None],
) -> tuple[str, Backend | None]:
    """The runtime to run `path` with, and that runtime's backend when measuring it loaded it
    (None: `load` it). `load(runtime)` loads the file on a runtime."""
    from specchat.backends.block_cost import BlockCostTable
    from specchat.backends.registry import runtime

    names = candidates(model_format, path, device)
    if not names:
        raise SpecchatError(f"no runtime here can run {path.name}")
    if len(names) == 1:
        return names[0], None
    threads = threads or physical_cores()
    costs: dict[str, Callable[[int], float]] = {}
    glances: dict[str, object] = {}
    open_name, open_backend = "", None  # the one runtime loaded at a time
    for name in names:
        kept = BlockCostTable.kept(runtime(name).cost_key(path), device, threads)
        if kept is not None:
            costs[name] = kept.cost
            continue
        if open_backend is not None:  # one runtime's weights at a time: both at once, a first
            open_backend.close()  # start took twice the memory (6.1 GB at 1.7B Q4_K_M, 3.3 alone)
        progress(f"measuring {name}'s pass costs to choose the runtime (once)")
        open_name, open_backend = name, load(name)
        # on `threads`, the count the other runtimes' kept tables hold: a runtime that follows
        # the load keeps a table per count, and a model loaded beside a busy process runs on
        # fewer — its costs there, set against another's kept for every thread, chose by two
        with held_threads(open_backend, threads):
            costs[name] = open_backend.glance_costs()
            glances[name] = open_backend.keep_glanced_costs()  # the chosen one's goes on below
    chosen = max(names, key=lambda name: speed(costs[name], speculative))
    if open_backend is not None and open_name != chosen:
        open_backend.close()
        open_backend = None
    if chosen not in glances:  # its costs were kept: the caller loads it
        return chosen, None
    backend = open_backend or load(chosen)
    with held_threads(backend, threads):
        backend.go_on_from_glance(glances[chosen])  # its sweep timed whole, and kept
    return chosen, backend
