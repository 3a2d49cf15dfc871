"""The models people already have, where other tools keep them: ollama's store and LM Studio's
models folder, read in place (never copied, never fetched).

ollama keeps a manifest per model and tag (`manifests/HOST/NAMESPACE/MODEL/TAG`, JSON whose
`application/vnd.ollama.image.model` layer names the GGUF by digest) and the files themselves as
content-addressed blobs (`blobs/sha256-HEX`); its models are named as `ollama list` names them
(`qwen2.5:1.5b`, `user/model:tag`, `host/namespace/model:tag`). `OLLAMA_MODELS` moves the store;
a system install keeps it under /usr/share/ollama. LM Studio keeps GGUF files as
`PUBLISHER/REPO/FILE.gguf` under its models folder (`~/.lmstudio/models`, formerly
`~/.cache/lm-studio/models`; `LMSTUDIO_MODELS` here moves it), named here by that path. Folders
the settings name (`model_folders`) hold GGUF files anywhere below them, each named by its path
in the folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

OLLAMA = "ollama"
LM_STUDIO = "LM Studio"
_OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
_OLLAMA_REGISTRY = "registry.ollama.ai"


@dataclass(frozen=True)
class StoredModel:
    """A GGUF another tool keeps: its name there, the file, and which tool."""

    name: str
    path: Path
    store: str


def ollama_roots() -> list[Path]:
    """Where ollama's store may be: `OLLAMA_MODELS` alone where set, else the user's and a
    system install's."""
    if os.environ.get("OLLAMA_MODELS"):
        return [Path(os.environ["OLLAMA_MODELS"]).expanduser()]
    return [Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]


def lmstudio_roots() -> list[Path]:
    """Where LM Studio's models folder may be: `LMSTUDIO_MODELS` alone where set, else its
    current and its former default."""
    if os.environ.get("LMSTUDIO_MODELS"):
        return [Path(os.environ["LMSTUDIO_MODELS"]).expanduser()]
    return [Path.home() / ".lmstudio" / "models", Path.home() / ".cache" / "lm-studio" / "models"]


def ollama_name(host: str, namespace: str, model: str, tag: str) -> str:
    """A model's name as `ollama list` shows it."""
    if host == _OLLAMA_REGISTRY:
        return f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
    return f"{host}/{namespace}/{model}:{tag}"


def ollama_models(root: Path) -> list[StoredModel]:
    """The models of the ollama store at `root` whose GGUF blob is there (a manifest that is
    unreadable, names no model layer or a missing blob is skipped)."""
    manifests = root / "manifests"
    found = []
    for manifest in sorted(manifests.glob("*/*/*/*")):
        if not manifest.is_file():
            continue
        try:
            layers = json.loads(manifest.read_text()).get("layers", [])
            digest = next(
                layer["digest"] for layer in layers if layer.get("mediaType") == _OLLAMA_MODEL_LAYER
            )
        except (OSError, ValueError, AttributeError, KeyError, StopIteration, TypeError):
            continue
        blob = root / "blobs" / str(digest).replace(":", "-")
        if blob.is_file():
            host, namespace, model, tag = manifest.relative_to(manifests).parts
            found.append(StoredModel(ollama_name(host, namespace, model, tag), blob, OLLAMA))
    return found


def lmstudio_models(root: Path) -> list[StoredModel]:
    """The GGUF files of the LM Studio models folder at `root` (vision projectors, `mmproj-*`,
    are not models and are left out)."""
    return [
        StoredModel(path.relative_to(root).as_posix(), path, LM_STUDIO)
        for path in sorted(root.glob("*/*/*.gguf"))
        if path.is_file() and not path.name.lower().startswith("mmproj")
    ]


def folder_models(root: Path) -> list[StoredModel]:
    """The GGUF files anywhere below a folder the settings name (projectors left out)."""
    return [
        StoredModel(path.relative_to(root).as_posix(), path, f"folder {root}")
        for path in sorted(root.rglob("*.gguf"))
        if path.is_file() and not path.name.lower().startswith("mmproj")
    ]


def stored_models(folders: Sequence[str] = ()) -> list[StoredModel]:
    """Every model ollama and LM Studio keep on this machine, and those in `folders` (each
    store once)."""
    found: list[StoredModel] = []
    seen: set[Path] = set()
    named = [Path(folder).expanduser() for folder in folders]
    for roots, read in (
        (ollama_roots(), ollama_models),
        (lmstudio_roots(), lmstudio_models),
        (named, folder_models),
    ):
        for root in roots:
            resolved = root.resolve()
            if resolved in seen or not root.is_dir():
                continue
            seen.add(resolved)
            found += read(root)
    return found


def find_stored(spec: str, folders: Sequence[str] = ()) -> StoredModel | None:
    """The stored model `spec` names: its name as listed, or an ollama model without a tag
    (`qwen2.5` is `qwen2.5:latest`, as ollama reads it)."""
    models = stored_models(folders)
    wanted = {spec} if ":" in spec or spec.endswith(".gguf") else {spec, f"{spec}:latest"}
    return next((m for m in models if m.name in wanted), None)
