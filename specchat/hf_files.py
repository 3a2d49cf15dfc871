"""Which files of a Hugging Face repo make the model a user names: `REPO`, `REPO:QUANT` or
`REPO:FILE.gguf`, as llama.cpp's `-hf repo:quant` reads them. One rule for `specchat pull`
(choosing what to download from the repo's file list) and `--model` (choosing among the files a
pulled repo holds in the Hugging Face cache).

A GGUF repo holds one file per quantization (`…-Q4_K_M.gguf`), sometimes split in parts
(`…-Q8_0-00001-of-00002.gguf`), sometimes a vision projector (`mmproj-…`, not a model). With no
quantization named, the first of `PREFERRED` the repo has is taken (llama.cpp's default first).
A repo without GGUF files but with `config.json` is a transformers model: all of it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from specchat.errors import SpecchatError

# what `REPO` alone takes: llama.cpp's default, then the quantizations closest to it in size
PREFERRED = ("Q4_K_M", "Q4_K_S", "Q4_0", "Q4_1", "Q5_K_M", "Q5_0", "Q6_K", "Q8_0", "F16", "BF16")
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_QUANT = re.compile(r"(?<![A-Za-z0-9])(I?Q\d[A-Za-z0-9_]*|F16|BF16|F32)(?=[.-]|$)", re.IGNORECASE)


@dataclass(frozen=True)
class ModelName:
    """`REPO[:QUANT|:FILE]` split: the repo id and what follows its colon (None: nothing)."""

    repo: str
    selector: str | None

    @classmethod
    def parse(cls, spec: str) -> ModelName:
        repo, _, selector = spec.partition(":")
        if repo.count("/") != 1 or not all(repo.split("/")):
            raise SpecchatError(f"{spec!r} is not a Hugging Face repo (ORG/NAME[:QUANT|:FILE])")
        return cls(repo, selector or None)


def model_ggufs(files: list[str]) -> list[str]:
    """The repo's GGUF files that are models (not vision projectors)."""
    return [
        f
        for f in files
        if f.lower().endswith(".gguf") and not PurePosixPath(f).name.lower().startswith("mmproj")
    ]


def later_part(file: str) -> bool:
    """Whether `file` is the second or a later part of a split GGUF (the first opens them all)."""
    split = _SPLIT.search(file)
    return bool(split) and int(split.group(1)) > 1


def quant_of(file: str) -> str | None:
    """The quantization a GGUF file's name says (Q4_K_M), if any."""
    name = _SPLIT.sub(".gguf", PurePosixPath(file).name)
    found = _QUANT.findall(name.removesuffix(".gguf").removesuffix(".GGUF"))
    return found[-1].upper() if found else None


def choose_files(files: list[str], name: ModelName) -> list[str]:
    """The files that make the named model: one GGUF (with its other parts, if split), or every
    file of a transformers repo; a one-line error naming what the repo has where nothing fits."""
    ggufs = model_ggufs(files)
    selector = name.selector
    if selector and selector.lower().endswith(".gguf"):
        if selector not in files:
            raise SpecchatError(f"{name.repo} has no file {selector}")
        return _with_parts(selector, files)
    if not ggufs:
        if "config.json" in files and selector is None:
            return list(files)
        raise SpecchatError(f"{name.repo} holds no GGUF file")
    wanted = [selector.upper()] if selector else list(PREFERRED)
    for quant in wanted:
        matching = sorted(f for f in ggufs if quant_of(f) == quant)
        if matching:
            return _with_parts(matching[0], files)
    if selector is None:  # none of the usual ones: the first the repo lists
        return _with_parts(sorted(ggufs)[0], files)
    has = sorted({q for q in map(quant_of, ggufs) if q})
    raise SpecchatError(
        f"{name.repo} has no {selector} file; it has {', '.join(has) or 'other GGUF files'}"
    )


def _with_parts(first: str, files: list[str]) -> list[str]:
    """A split GGUF's every part, in order (llama.cpp opens the first and finds the others)."""
    split = _SPLIT.search(first)
    if not split:
        return [first]
    stem = first[: split.start()]
    return sorted(f for f in files if f.startswith(stem) and _SPLIT.search(f))


def hf_cache_dir() -> Path:
    """The Hugging Face cache as the hub library finds it, read now (not at its import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = (
        os.environ.get("HF_HOME")
        or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "huggingface"
    )
    return Path(home).expanduser() / "hub"
