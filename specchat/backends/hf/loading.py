"""Loading a model for the transformers backend from disk, never from the network: a Hugging Face
model directory, a model already in the local Hugging Face cache, or a GGUF file; device, dtype,
threads and context size as asked.

GGUF files (such as the bundled SmolLM2) are dequantized by transformers' GGUF reader, which is
slow; the result is saved once as a safetensors model directory under the cache dir and loaded
from there, far faster, ever after.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import io
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specchat import locations
from specchat.backends.hf.backend import HFBackend
from specchat.errors import SpecchatError, first_line
from specchat.hardware import physical_cores

if TYPE_CHECKING:
    import torch

# Folder under the cache dir holding one converted model directory per GGUF file.
GGUF_CACHE_FOLDER = "hf-from-gguf"
# Bump when the layout of a converted directory changes, so old conversions are not reused.
_CONVERSION_FORMAT = 1
_DTYPES = ("float32", "bfloat16", "float16")

Progress = Callable[[str], None]


def _quiet(_message: str) -> None:
    return None


def _offline() -> None:
    """Never reach a model hub (every file must already be on disk), and draw no progress bars
    of transformers' own on a terminal that may belong to the TUI: `progress` reports instead."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    # its warnings about a user's model would stand beside specchat's own one line
    transformers_logging.set_verbosity_error()


def _check_device_and_dtype(device: str, dtype: str) -> torch.dtype:
    import torch

    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise SpecchatError(
                f"CUDA is not available: torch {torch.__version__} sees no CUDA device;"
                " use --device cpu"
            )
    elif device == "mps":
        if not torch.backends.mps.is_available():
            raise SpecchatError("MPS is not available on this machine; use --device cpu")
    elif device != "cpu":
        raise SpecchatError(f"unknown device {device!r}: use cpu, cuda, cuda:N or mps")
    if dtype not in _DTYPES:
        raise SpecchatError(f"unknown dtype {dtype!r}: use one of {', '.join(_DTYPES)}")
    if dtype == "float16" and not device.startswith("cuda"):
        raise SpecchatError("float16 needs --device cuda; use float32 or bfloat16 on the CPU")
    return getattr(torch, dtype)


def load_hf_backend(
    path: str,
    *,
    gguf_file: str | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    threads: int | None = None,
    n_ctx: int | None = None,
    progress: Progress | None = None,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
) -> HFBackend:
    """Load a model for the transformers backend, never touching the network.

    `path` is a Hugging Face model directory (or the id of a model already in the local Hugging
    Face cache), or, with `gguf_file` (a file name inside `path`, or a path of its own), the folder
    holding a GGUF file. `n_ctx` caps the context (default: the model's, at most 8192).
    `threads` (default: the physical cores) sets torch's thread count, which is process-wide:
    `models.load_draft` passes the target's, so that a draft never changes it.
    Every problem the user can fix raises SpecchatError with one line.
    Loading runs no code from the model's files: weights come from safetensors (pickle `.bin`
    weights only with `allow_pickle`), and a model's own Python code only with
    `trust_remote_code`.
    """
    progress = progress or _quiet
    _offline()
    torch_dtype = _check_device_and_dtype(device, dtype)
    import torch

    torch.set_num_threads(threads or physical_cores())

    source = Path(path).expanduser()
    if gguf_file is not None:
        gguf_path: Path | None = source / gguf_file
        if not gguf_path.is_file():
            raise SpecchatError(f"GGUF file not found: {gguf_path}")
    elif source.suffix == ".gguf" and source.is_file():
        gguf_path = source
    else:
        gguf_path = _lone_gguf(source)

    if gguf_path is not None:
        where = str(converted_gguf_dir(gguf_path, progress))
        model_name = gguf_path.stem
        source_key = Path(where).name
    elif source.is_dir():
        where, model_name, source_key = str(source), source.name, _source_key(source)
    elif source.exists():
        raise SpecchatError(f"not a model directory: {source}")
    else:
        where, model_name, source_key = path, path, path  # an id in the local HF cache, maybe

    progress(f"loading {model_name} with transformers…")
    try:
        model, tokenizer = _load_model_dir(
            where, torch_dtype, device, model_name, allow_pickle, trust_remote_code
        )
    except SpecchatError:
        if gguf_path is None:
            raise
        # Only a damaged disk or a hand edit spoils a finished conversion: redo it once.
        progress("the converted copy is unreadable; converting again…")
        shutil.rmtree(where, ignore_errors=True)
        where = str(converted_gguf_dir(gguf_path, progress))
        model, tokenizer = _load_model_dir(where, torch_dtype, device, model_name)
    return HFBackend(
        model, tokenizer, model_name=model_name, device=device, n_ctx=n_ctx, source_key=source_key
    )


def _lone_gguf(model_dir: Path) -> Path | None:
    """The one GGUF file of a folder without a config.json, so `--model FOLDER` finds it."""
    if not model_dir.is_dir() or (model_dir / "config.json").exists():
        return None
    files = sorted(model_dir.glob("*.gguf"))
    return files[0] if len(files) == 1 else None


def _source_key(model_dir: Path) -> str:
    """Identifies the weights on disk, for the block-cost cache."""
    config = model_dir / "config.json"
    try:
        stat = config.stat()
        return f"{model_dir.resolve()}-{stat.st_size}-{stat.st_mtime_ns}"
    except OSError:
        return str(model_dir)


PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def check_weights(model_dir: Path, model_name: str, allow_pickle: bool = False) -> None:
    """Refuse a model directory whose weights cannot be loaded without running code: unpickling
    a `.bin` file executes whatever it was made to, so only safetensors load unless the user
    says they trust the pickle. A directory without any weights is one line too."""
    if any(model_dir.glob("*.safetensors")):
        return
    pickles = sorted(p.name for p in model_dir.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles and not allow_pickle:
        raise SpecchatError(
            f"cannot load model {model_name}: its weights ({pickles[0]}) are a pickle, which can "
            "run code when loaded; convert them to safetensors, or pass --allow-pickle if you "
            "trust their source"
        )
    if not pickles:
        raise SpecchatError(
            f"cannot load model {model_name}: {model_dir} holds no weights (no .safetensors file)"
        )


def _load_model_dir(
    where: str,
    torch_dtype: torch.dtype,
    device: str,
    model_name: str,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
) -> tuple[Any, Any]:
    """Model and tokenizer from a local directory (or the local HF cache), moved to `device`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not Path(where).is_dir() and not _looks_like_hub_id(where):
        raise SpecchatError(f"model not found: {where}")
    if Path(where).is_dir():
        check_weights(Path(where), model_name, allow_pickle)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            where, local_files_only=True, trust_remote_code=trust_remote_code
        )
        model = AutoModelForCausalLM.from_pretrained(
            where,
            dtype=torch_dtype,
            local_files_only=True,
            trust_remote_code=trust_remote_code,
            use_safetensors=None if allow_pickle else True,
        )
    except OSError as error:
        if not Path(where).is_dir():
            raise SpecchatError(
                f"model not found: {where} is no directory and not in the local Hugging Face cache"
            ) from error
        raise SpecchatError(f"cannot load model {model_name}: {first_line(error)}") from error
    except Exception as error:  # noqa: BLE001 - any failure of a user's model is one line for them
        raise SpecchatError(f"cannot load model {model_name}: {first_line(error)}") from error
    if model.config._attn_implementation not in ("sdpa", "eager"):
        # Flash-attention kernels ignore a 4-D mask; tree blocks need one of these two.
        model.set_attn_implementation("sdpa")
    model.to(device)
    model.eval()
    return model, tokenizer


def _looks_like_hub_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(parts) and not text.startswith((".", "~"))


def conversion_dir(gguf_path: Path) -> Path:
    """Where the conversion of `gguf_path` is kept: under the file's name, where it lies, its
    size and mtime, so an edited or replaced file converts again and two installs of one model
    (two virtual environments, each with its own copy) keep a conversion each."""
    stat = gguf_path.stat()
    key = f"{_installed_as(gguf_path)}{stat.st_size}-{stat.st_mtime_ns}-v{_CONVERSION_FORMAT}"
    return locations.cache_dir() / GGUF_CACHE_FOLDER / key


def _installed_as(gguf_path: Path) -> str:
    """The start every conversion of the file at this path shares, whatever its contents."""
    where = hashlib.sha256(str(gguf_path.resolve()).encode()).hexdigest()[:12]
    return f"{gguf_path.stem}-{where}-"


def conversion_temporaries(target: Path) -> list[Path]:
    """The temporary folders conversions into `target` (`conversion_dir`) are written in until
    they are renamed into place: a killed conversion leaves one behind."""
    return list(target.parent.glob(f".{glob.escape(target.name)}.*"))


def converted_gguf_dir(gguf_path: Path, progress: Progress | None = None) -> Path:
    """The safetensors directory converted from `gguf_path`, converting it first if needed.

    The conversion is written to a temporary folder and renamed into place, so a killed conversion
    never leaves a half-written directory that a later run would trust.
    """
    progress = progress or _quiet
    target = conversion_dir(gguf_path)
    root, key = target.parent, target.name
    root.mkdir(parents=True, exist_ok=True)
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    if target.exists():
        shutil.rmtree(target, ignore_errors=True)
    _remove_stale_temporaries(target)

    progress("converting GGUF to safetensors (once)…")
    started = time.perf_counter()
    temporary = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    try:
        _convert_gguf(gguf_path, temporary, progress)
        try:
            os.rename(temporary, target)
        except OSError:
            # Another process finished the same conversion first; theirs is as good as ours.
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    _remove_replaced(target, gguf_path)
    progress(f"converted {gguf_path.name} in {time.perf_counter() - started:.1f} s")
    return target


def _remove_replaced(target: Path, gguf_path: Path) -> None:
    """Drop the conversions of an earlier file at the same path (another size, mtime or format):
    a reinstalled model package would otherwise leave a full-size float32 copy behind each time.
    A copy installed elsewhere keeps its own. Names of the older scheme, with no path in them
    (`stem-size-mtime-vN`, only an older specchat made them), go by that scheme's rule: same
    name and size, so an upgrade leaves none behind."""
    earlier = list(target.parent.glob(f"{glob.escape(_installed_as(gguf_path))}*"))
    older_scheme = re.compile(rf"{re.escape(gguf_path.stem)}-{gguf_path.stat().st_size}-\d+-v\d+")
    earlier += [p for p in target.parent.iterdir() if older_scheme.fullmatch(p.name)]
    for path in earlier:
        if path != target and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def _remove_stale_temporaries(target: Path) -> None:
    """Drop temporary folders that a conversion killed an hour or more ago left behind."""
    for leftover in conversion_temporaries(target):
        try:
            if time.time() - leftover.stat().st_mtime > 3600:
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            pass


def _convert_gguf(gguf_path: Path, target: Path, progress: Progress) -> None:
    """Dequantize a GGUF file into a float32 Hugging Face model directory at `target`.

    We call transformers' GGUF reader directly rather than `from_pretrained(gguf_file=...)`: the
    latter insists on `accelerate` (not needed for anything else here) and marks the model as
    quantized, which `save_pretrained` then refuses.
    """
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    folder, name = str(gguf_path.parent), gguf_path.name
    try:
        progress("reading GGUF metadata and tokenizer…")
        config = AutoConfig.from_pretrained(folder, gguf_file=name, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config)
        progress("dequantizing GGUF weights…")
        # Its plain tqdm bar ignores transformers' switch; keep it off the terminal.
        with contextlib.redirect_stderr(io.StringIO()):
            checkpoint = load_gguf_checkpoint(
                str(gguf_path),
                return_tensors=True,
                model_to_load=skeleton,
                torch_dtype=torch.float32,
            )
        tensors = checkpoint["tensors"]
    except SpecchatError:
        raise
    except Exception as error:  # noqa: BLE001 - a bad file is the user's to fix, in one line
        raise SpecchatError(f"cannot read GGUF file {gguf_path}: {first_line(error)}") from error

    expected = set(skeleton.state_dict())
    missing = expected - set(tensors)
    if getattr(config, "tie_word_embeddings", False):
        missing.discard("lm_head.weight")
    if missing:
        example = sorted(missing)[0]
        raise SpecchatError(
            f"cannot convert GGUF file {gguf_path}: {len(missing)} weights missing (e.g. {example})"
        )
    progress("saving the converted model…")
    weights = {key: tensor.contiguous() for key, tensor in tensors.items() if key in expected}
    save_file(weights, str(target / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(target)
    GenerationConfig.from_model_config(config).save_pretrained(target)
    tokenizer.save_pretrained(target)


def cuda_available() -> bool:
    """Whether this torch runs on a CUDA GPU here (`--device auto`)."""
    import torch

    return torch.cuda.is_available()


def load(path: Path, options, progress: Progress | None) -> HFBackend:
    """The registry's loader (`backends/registry.py`): a model folder or a GGUF file as
    `options` (models.LoadOptions) ask for it."""
    return load_hf_backend(
        str(path),
        device=options.device,
        dtype=options.dtype,
        threads=options.threads,
        n_ctx=options.n_ctx,
        progress=progress,
        allow_pickle=options.allow_pickle,
        trust_remote_code=options.trust_remote_code,
    )
