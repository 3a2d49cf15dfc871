"""The one list of runtimes: every runtime's name, what it runs, why it cannot, how it loads and
what its pass costs are kept under. The CLI's choices, model loading, the runtime chooser, the
draft model and bench's peers all read it; no runtime name appears anywhere else.

A runtime is *local* (specchat decodes on it: the `Backend` protocol's evaluate/commit) or a
*server* (it streams an answer of its own making); the engine choice reads which, once. Loaders
and checks are named as `module:function` and imported when called, so reading the registry
(`--help`, the settings) loads no runtime.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from specchat.errors import SpecchatError

GGUF, HF_FOLDER = "gguf", "hf"  # the model formats: a .gguf file, a Hugging Face folder
FORMATS = {GGUF: "a GGUF file", HF_FOLDER: "a Hugging Face model"}
# The runtimes' names, which each backend class takes as its `name`.
INT4, LLAMA_CPP, TRANSFORMERS, OPENAI_SERVER = "int4", "llama", "hf", "openai"
# The libraries runtimes run on, whose own methods `specchat bench --peers` sets beside them.
LLAMA_CPP_LIBRARY, TRANSFORMERS_LIBRARY = "llama.cpp", "transformers"


def _function(spec: str) -> Callable:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Runtime:
    """One runtime, declared once."""

    name: str  # what --backend, settings.toml and saved figures call it
    formats: tuple[str, ...]  # the model formats it runs; () for a server, which runs its own
    loader: str  # module:function (path, options: LoadOptions, progress) -> backend
    local: bool = True  # specchat decodes on it; False: a server answering with its own method
    library: str = ""  # whose library it runs on, where the bench sets that library's own methods
    checks: str = ""  # module:function (path, device) -> why it cannot run the file, or None
    costs: str = ""  # module:function (path) -> the key its measured pass costs are kept under
    torch_threads: bool = False  # it sets torch's thread pool, which is one per process
    self_drafts: str = ""  # module:function (backend, layers) -> its first layers as a draft
    bundled_draft: bool = False  # the bundled model has a default draft on it
    gpu: str = ""  # module:function () -> whether it can run on a GPU here ("": never)

    @property
    def own_format(self) -> str | None:
        """The format it runs as its own (the first it names; None for a server): a model of
        that format is the chooser's to place on it."""
        return self.formats[0] if self.formats else None

    def load(self, path: Path | None, options, progress: Callable[[str], None] | None):
        """The model at `path` on this runtime as `options` (models.LoadOptions) ask; a device
        left to `auto` is this runtime's GPU where it sees one, else the CPU (`devices.py`)."""
        from specchat.devices import pick

        options = replace(options, device=pick(options.device, [self]))
        return _function(self.loader)(path, options, progress)

    def unavailable(self, path: Path, device: str) -> str | None:
        """Why it cannot run the model at `path` on `device` (None: it can)."""
        return _function(self.checks)(path, device) if self.checks else None

    def cost_key(self, path: Path) -> str:
        return _function(self.costs)(path)

    def sees_gpu(self) -> bool:
        """Whether it can run a model on this machine's GPU (`--device auto`, `devices.py`)."""
        return bool(self.gpu) and bool(_function(self.gpu)())

    def first_layers(self, backend, layers: int):
        """`backend`'s first `layers` layers as a draft of its own (self-speculation)."""
        return _function(self.self_drafts)(backend, layers)


# In the order a tie between GGUF runtimes goes (the chooser, `runtimes.py`).
RUNTIMES: dict[str, Runtime] = {
    r.name: r
    for r in (
        Runtime(
            INT4,
            (GGUF,),
            "specchat.backends.int4.backend:load",
            checks="specchat.backends.int4.backend:unavailable_reason",
            costs="specchat.backends.int4.backend:cost_key",
        ),
        Runtime(
            LLAMA_CPP,
            (GGUF,),
            "specchat.backends.llama:load",
            library=LLAMA_CPP_LIBRARY,
            costs="specchat.backends.llama:cost_key",
            gpu="specchat.backends.llama:gpu_offload",
        ),
        Runtime(
            TRANSFORMERS,
            (HF_FOLDER, GGUF),
            "specchat.backends.hf.loading:load",
            library=TRANSFORMERS_LIBRARY,
            torch_threads=True,
            self_drafts="specchat.backends.hf.backend:early_exit_draft",
            bundled_draft=True,
            gpu="specchat.backends.hf.loading:cuda_available",
        ),
        Runtime(OPENAI_SERVER, (), "specchat.backends.remote:connect", local=False),
    )
}
LOCAL_RUNTIMES = tuple(name for name, r in RUNTIMES.items() if r.local)
SERVER = next(r for r in RUNTIMES.values() if not r.local)  # an OpenAI-compatible server


def runtime(name: str) -> Runtime:
    """The runtime called `name`, or a one-line error naming the ones there are."""
    try:
        return RUNTIMES[name]
    except KeyError:
        raise SpecchatError(f"unknown backend {name!r}: use {', '.join(RUNTIMES)}") from None


def runtime_of(backend) -> Runtime | None:
    """The runtime a loaded backend runs on (None: one outside the registry, as tests make)."""
    return RUNTIMES.get(backend.name)


def native_runtimes(model_format: str) -> list[Runtime]:
    """The runtimes whose own format `model_format` is, in the registry's order: the chooser's
    candidates for such a model (`runtimes.py`). A runtime may read other formats too (the hf
    runtime reads a GGUF) when the user names it."""
    return [r for r in RUNTIMES.values() if r.own_format == model_format]
