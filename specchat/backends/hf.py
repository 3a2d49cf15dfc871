"""The transformers backend: a causal LM in PyTorch, evaluated a block (chain or tree) at a time.

A block is carried by one forward pass with explicit position ids (committed length + depth) and a
custom 4-D additive mask in which each block token sees the committed prefix, its ancestors in the
block and itself. transformers 5.x hands a 4-D mask to the attention functions untouched
(`masking_utils._preprocess_mask_arguments` returns it as-is), and SDPA then gets `is_causal=False`
because a mask is present, so the tree structure really reaches attention. The KV cache is a
`DynamicCache` whose per-layer tensors we crop and gather ourselves, so committing any root-to-node
path of a tree is one `index_select` per layer.

GGUF files (such as the bundled SmolLM2) are dequantized by transformers' GGUF reader, which takes
10-30 seconds; the result is saved once as a safetensors model directory under the cache dir and
loaded from there (well under a second) ever after.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specchat import locations
from specchat.backends.base import Block, ChatMessage
from specchat.backends.block_cost import BlockCostTable
from specchat.backends.chat_template import CHATML_TEMPLATE
from specchat.backends.token_bytes import token_bytes_table
from specchat.errors import SpecchatError
from specchat.hardware import physical_cores

if TYPE_CHECKING:
    import torch

# Folder under the cache dir holding one converted model directory per GGUF file.
GGUF_CACHE_FOLDER = "hf-from-gguf"
# Bump when the layout of a converted directory changes, so old conversions are not reused.
_CONVERSION_FORMAT = 1
_DEFAULT_MAX_CONTEXT = 8192
_PREFILL_CHUNK = 512
_DTYPES = ("float32", "bfloat16", "float16")

Progress = Callable[[str], None]


def _quiet(_message: str) -> None:
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def _offline() -> None:
    """Never reach a model hub (every file must already be on disk), and draw no progress bars
    of transformers' own on a terminal that may belong to the TUI: `progress` reports instead."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()


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
) -> HFBackend:
    """Load a model for the transformers backend, never touching the network.

    `path` is a Hugging Face model directory (or the id of a model already in the local Hugging
    Face cache), or, with `gguf_file` (a file name inside `path`, or a path of its own), the folder
    holding a GGUF file. `n_ctx` caps the context (default: the model's, at most 8192).
    Every problem the user can fix raises SpecchatError with one line.
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
        model, tokenizer = _load_model_dir(where, torch_dtype, device, model_name)
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


def _load_model_dir(
    where: str, torch_dtype: torch.dtype, device: str, model_name: str
) -> tuple[Any, Any]:
    """Model and tokenizer from a local directory (or the local HF cache), moved to `device`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not Path(where).is_dir() and not _looks_like_hub_id(where):
        raise SpecchatError(f"model not found: {where}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            where, dtype=torch_dtype, local_files_only=True
        )
    except OSError as error:
        if not Path(where).is_dir():
            raise SpecchatError(
                f"model not found: {where} is no directory and not in the local Hugging Face cache"
            ) from error
        raise SpecchatError(f"cannot load model {model_name}: {_first_line(error)}") from error
    except Exception as error:  # noqa: BLE001 - any failure of a user's model is one line for them
        raise SpecchatError(f"cannot load model {model_name}: {_first_line(error)}") from error
    if model.config._attn_implementation not in ("sdpa", "eager"):
        # Flash-attention kernels ignore a 4-D mask; tree blocks need one of these two.
        model.set_attn_implementation("sdpa")
    model.to(device)
    model.eval()
    return model, tokenizer


def _looks_like_hub_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(parts) and not text.startswith((".", "~"))


def converted_gguf_dir(gguf_path: Path, progress: Progress | None = None) -> Path:
    """The safetensors directory converted from `gguf_path`, converting it first if needed.

    The key holds the file's name, size and mtime, so an edited or replaced file converts again.
    The conversion is written to a temporary folder and renamed into place, so a killed conversion
    never leaves a half-written directory that a later run would trust.
    """
    progress = progress or _quiet
    stat = gguf_path.stat()
    key = f"{gguf_path.stem}-{stat.st_size}-{stat.st_mtime_ns}-v{_CONVERSION_FORMAT}"
    root = locations.cache_dir() / GGUF_CACHE_FOLDER
    root.mkdir(parents=True, exist_ok=True)
    target = root / key
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    if target.exists():
        shutil.rmtree(target, ignore_errors=True)
    _remove_stale_temporaries(root, key)

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
    progress(f"converted {gguf_path.name} in {time.perf_counter() - started:.1f} s")
    return target


def _remove_stale_temporaries(root: Path, key: str) -> None:
    """Drop temporary folders that a conversion killed an hour or more ago left behind."""
    for leftover in root.glob(f".{key}.*"):
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
        raise SpecchatError(f"cannot read GGUF file {gguf_path}: {_first_line(error)}") from error

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


class HFBackend:
    """One transformers causal LM, its tokenizer and a KV cache of committed tokens.

    See base.Backend. The cache may also hold the entries of the last evaluated block until the
    next `commit`, `evaluate`, `prefill` or `rollback`, which drops whatever was not committed.
    """

    name = "hf"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        model_name: str,
        device: str,
        n_ctx: int | None = None,
        source_key: str | None = None,
    ) -> None:
        import torch
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        self.model = model
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.device = device
        self._source_key = source_key or model_name
        config = model.config.get_text_config(decoder=True)
        self.vocab_size = int(config.vocab_size)
        model_limit = int(getattr(config, "max_position_embeddings", 0) or _DEFAULT_MAX_CONTEXT)
        self.n_ctx = min(model_limit, n_ctx or _DEFAULT_MAX_CONTEXT)
        self.eos_ids = frozenset(self._eos_ids())
        self._dtype = next(model.parameters()).dtype
        self._torch_device = torch.device(device)
        self._mask_min = torch.finfo(self._dtype).min
        self._token_bytes = token_bytes_table(tokenizer, self.vocab_size)
        self._cache = DynamicCache(config=model.config)
        if any(type(layer) is not DynamicLayer for layer in self._cache.layers):
            raise SpecchatError(
                f"model {model_name} uses sliding-window or recurrent layers; "
                "the hf backend supports full-attention models"
            )
        self._n_committed = 0
        self._pending: Block | None = None
        self.threads = torch.get_num_threads()
        self._costs = BlockCostTable(self, key=f"hf|{self._source_key}|{self._dtype}")

    # -- tokenizer -------------------------------------------------------------------------------

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        generation = getattr(self.model, "generation_config", None)
        for value in (getattr(generation, "eos_token_id", None), self.tokenizer.eos_token_id):
            if value is None:
                continue
            ids.update([value] if isinstance(value, int) else value)
        return {int(token) for token in ids}

    @property
    def n_committed(self) -> int:
        return self._n_committed

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        """Token ids of `text`, no BOS; control-token text is plain text unless `special`."""
        return list(
            self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=not special)
        )

    def token_bytes(self, token_id: int) -> bytes:
        return self._token_bytes[token_id]

    def chat_prompt(self, messages: list[ChatMessage]) -> str:
        """The model's chat template (ChatML for a model without one, as the llama backend does)."""
        history = [{"role": message.role, "content": message.content} for message in messages]
        template = None if getattr(self.tokenizer, "chat_template", None) else CHATML_TEMPLATE
        try:
            return self.tokenizer.apply_chat_template(
                history, chat_template=template, tokenize=False, add_generation_prompt=True
            )
        except SpecchatError:
            raise
        except Exception as error:  # noqa: BLE001 - a template's own raise_exception, for one
            raise SpecchatError(f"chat template: {_first_line(error)}") from error

    # -- KV cache and blocks ---------------------------------------------------------------------

    def _keep(self, length: int) -> None:
        """Crop every layer's cache to its first `length` positions."""
        for layer in self._cache.layers:
            if layer.is_initialized:
                layer.keys = layer.keys[..., :length, :]
                layer.values = layer.values[..., :length, :]

    def _drop_pending(self) -> None:
        if self._pending is not None:
            self._keep(self._n_committed)
            self._pending = None

    def _check_room(self, extra: int) -> None:
        if self._n_committed + extra > self.n_ctx:
            raise SpecchatError(
                f"context full: {self._n_committed} + {extra} tokens exceed n_ctx {self.n_ctx}"
            )

    def prefill(self, ids: list[int]) -> None:
        """Evaluate and commit `ids`, in chunks so a long prompt needs bounded memory."""
        import torch

        self._drop_pending()
        self._check_room(len(ids))
        with torch.inference_mode():
            for start in range(0, len(ids), _PREFILL_CHUNK):
                chunk = ids[start : start + _PREFILL_CHUNK]
                input_ids = torch.tensor([chunk], dtype=torch.long, device=self._torch_device)
                positions = torch.arange(
                    self._n_committed,
                    self._n_committed + len(chunk),
                    device=self._torch_device,
                ).unsqueeze(0)
                # The plain causal case: transformers builds the mask itself. The base model
                # skips the LM head, whose logits nobody reads here.
                self.model.base_model(
                    input_ids=input_ids,
                    position_ids=positions,
                    past_key_values=self._cache,
                    use_cache=True,
                )
                self._n_committed += len(chunk)

    def tree_mask(self, block: Block) -> torch.Tensor:
        """Additive mask [1, 1, len(block), n_committed + len(block)]: 0 where attention is allowed.

        Every block token sees the whole committed prefix; within the block it sees exactly its
        ancestors and itself, so sibling branches never see each other.
        """
        import torch

        size = len(block)
        sees = np.eye(size, dtype=bool)
        for index, parent in enumerate(block.parents):
            if parent >= 0:
                sees[index] |= sees[parent]
        allowed = torch.ones(
            (size, self._n_committed + size), dtype=torch.bool, device=self._torch_device
        )
        allowed[:, self._n_committed :] = torch.from_numpy(sees).to(self._torch_device)
        mask = torch.zeros(allowed.shape, dtype=self._dtype, device=self._torch_device)
        mask.masked_fill_(~allowed, self._mask_min)
        return mask[None, None]

    def evaluate(self, block: Block) -> np.ndarray:
        """Logits of every block token in one forward pass; the block's KV stays until `commit`."""
        return self.evaluate_tensor(block).float().cpu().numpy()

    def evaluate_tensor(self, block: Block) -> torch.Tensor:
        """`evaluate`, with the logits left in the model's dtype and on its device.

        For callers that stay in torch, and for exactness tests on float64 models, which a cast
        to float32 would blur.
        """
        import torch

        self._drop_pending()
        if len(block) == 0:
            return torch.zeros((0, self.vocab_size), dtype=self._dtype, device=self._torch_device)
        self._check_room(max(block.depths) + 1)
        input_ids = torch.tensor([block.tokens], dtype=torch.long, device=self._torch_device)
        positions = torch.tensor(
            [[self._n_committed + depth for depth in block.depths]],
            dtype=torch.long,
            device=self._torch_device,
        )
        with torch.inference_mode():
            output = self.model(
                input_ids=input_ids,
                attention_mask=self.tree_mask(block),
                position_ids=positions,
                past_key_values=self._cache,
                use_cache=True,
            )
        self._pending = block
        return output.logits[0]

    def commit(self, path: list[int]) -> None:
        """Keep the cache entries of `path` (root-to-node in the last block) as committed tokens."""
        import torch

        block = self._pending
        if block is None:
            if path:
                raise ValueError("commit without a block evaluated since the last commit")
            return
        for position, index in enumerate(path):
            expected_parent = path[position - 1] if position else -1
            if not 0 <= index < len(block) or block.parents[index] != expected_parent:
                raise ValueError(f"commit path {path} is not a root-to-node chain of the block")
        start = self._n_committed
        if path == list(range(len(path))):
            self._keep(start + len(path))
        else:
            # A branch other than the first: gather its positions behind the committed prefix.
            keep = torch.tensor([start + index for index in path], device=self._torch_device)
            with torch.inference_mode():
                for layer in self._cache.layers:
                    if layer.is_initialized:
                        layer.keys = torch.cat(
                            [layer.keys[..., :start, :], layer.keys.index_select(-2, keep)], dim=-2
                        )
                        layer.values = torch.cat(
                            [layer.values[..., :start, :], layer.values.index_select(-2, keep)],
                            dim=-2,
                        )
        self._n_committed = start + len(path)
        self._pending = None

    def rollback(self, n_committed: int) -> None:
        if not 0 <= n_committed <= self._n_committed:
            raise ValueError(f"cannot roll back to {n_committed} of {self._n_committed} tokens")
        self._pending = None
        self._n_committed = n_committed
        self._keep(n_committed)

    # -- cost ------------------------------------------------------------------------------------

    def block_cost(self, k: int) -> float:
        """Seconds of one k-token chain pass, measured once per model, device, dtype and threads."""
        return self._costs.cost(k)

    def close(self) -> None:
        """Free the model and the cache (and the GPU memory they held)."""
        import torch

        self._cache = None
        self._pending = None
        self.model = None
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()


def early_exit_draft(target: HFBackend, layers: int) -> HFBackend:
    """A draft that is the target's first `layers` decoder layers plus its final norm and head
    (self-speculation). It shares the target's weights, so it costs no memory, only its own KV
    cache; Llama-family models only (a `model.layers` stack, a `model.norm`, an `lm_head`)."""
    import copy

    import torch

    outer = target.model
    inner = getattr(outer, "model", None)
    stack = getattr(inner, "layers", None)
    if stack is None or not hasattr(outer, "lm_head"):
        raise SpecchatError("self-speculation needs a Llama-style model (model.layers, lm_head)")
    if not 1 <= layers < len(stack):
        raise SpecchatError(f"self-speculation needs 1 ≤ layers < {len(stack)}, got {layers}")
    config = copy.deepcopy(outer.config)
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:layers]
    shallow_inner = copy.copy(inner)
    shallow_inner._modules = dict(inner._modules)
    shallow_inner._modules["layers"] = torch.nn.ModuleList(list(stack)[:layers])
    shallow_inner.config = config
    shallow_outer = copy.copy(outer)
    shallow_outer._modules = dict(outer._modules)
    shallow_outer._modules["model"] = shallow_inner
    shallow_outer.config = config
    return HFBackend(
        shallow_outer,
        target.tokenizer,
        model_name=f"{target.model_name} (first {layers} layers)",
        device=target.device,
        n_ctx=target.n_ctx,
        source_key=f"{target._source_key}|early-exit-{layers}",
    )
