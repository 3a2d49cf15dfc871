"""The transformers backend: a causal LM in PyTorch, evaluated a block (chain or tree) at a time.

A block is carried by one forward pass with explicit position ids (committed length + depth) and a
custom 4-D additive mask in which each block token sees the committed prefix, its ancestors in the
block and itself. transformers 5.x hands a 4-D mask to the attention functions untouched
(`masking_utils._preprocess_mask_arguments` returns it as-is), and SDPA then gets `is_causal=False`
because a mask is present, so the tree structure really reaches attention. The KV cache is a
`DynamicCache` whose per-layer tensors we crop and gather ourselves, so committing any root-to-node
path of a tree is one `index_select` per layer.

Loading a model from disk (and converting a GGUF file) is `hf/loading.py`'s job; this module only
needs a model and a tokenizer.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import numpy as np

from specchat import cpu
from specchat.backends.base import Block, ChatMessage, block_to_commit
from specchat.backends.block_cost import BlockCostTable, MeasuredCosts
from specchat.backends.chat_template import CHATML_TEMPLATE, system_folded_if_refused
from specchat.backends.hf.packed import pack_linears
from specchat.backends.registry import TRANSFORMERS
from specchat.backends.token_bytes import token_bytes_table
from specchat.errors import SpecchatError, first_line

if TYPE_CHECKING:
    import torch

_DEFAULT_MAX_CONTEXT = 8192
_PREFILL_CHUNK = 512


class HFBackend(MeasuredCosts):
    """One transformers causal LM, its tokenizer and a KV cache of committed tokens.

    See base.Backend. The cache may also hold the entries of the last evaluated block until the
    next `commit`, `evaluate`, `prefill` or `rollback`, which drops whatever was not committed.
    """

    name = TRANSFORMERS
    model_path = None  # a folder of weights (a GGUF is converted into one)
    add_bos = False  # its tokenizer's template adds what the model expects
    bos_id = -1

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
        self._cache_keyword = cache_keyword(model)
        if any(type(layer) is not DynamicLayer for layer in self._cache.layers):
            raise SpecchatError(
                f"model {model_name} uses sliding-window or recurrent layers; "
                "the hf backend supports full-attention models"
            )
        self._n_committed = 0
        self._pending: Block | None = None
        self.threads = torch.get_num_threads()
        self.level = "" if device.startswith("cuda") else cpu.torch_level()
        # float32 on the CPU: weights prepacked once, so drafted tokens cost little (hf/packed.py)
        self.packed = pack_linears(model)
        layout = "|packed" if self.packed else ""
        self._costs = BlockCostTable(
            self, key=f"{self.name}|{self._source_key}|{self._dtype}{layout}|{self.level}"
        )

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
        return system_folded_if_refused(self._render, messages)

    def _render(self, messages: list[ChatMessage]) -> str:
        history = [{"role": message.role, "content": message.content} for message in messages]
        template = None if getattr(self.tokenizer, "chat_template", None) else CHATML_TEMPLATE
        try:
            return self.tokenizer.apply_chat_template(
                history, chat_template=template, tokenize=False, add_generation_prompt=True
            )
        except SpecchatError:
            raise
        except Exception as error:  # noqa: BLE001 - a template's own raise_exception, for one
            raise SpecchatError(f"chat template: {first_line(error)}") from error

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
                    use_cache=True,
                    **{self._cache_keyword: self._cache},
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

    def draft_features(self, token: int) -> None:
        """None: not asked of transformers' passes yet (base.Backend)."""
        return None

    def ride_draft_head(self, head: object) -> bool:
        return False  # no hidden states to guess from (draft_features)

    def ridden_guess(self, token: int) -> None:
        return None

    def evaluate_more(self, tree: Block, evaluated: int) -> None:
        return None  # each pass evaluates its whole block (base.Backend)

    def evaluate(self, block: Block) -> np.ndarray:
        """Logits of every block token in one pass (timed: use refines the pass costs)."""
        with self._costs.timing(block):
            return self._evaluate(block)

    def _evaluate(self, block: Block) -> np.ndarray:
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
                use_cache=True,
                **{self._cache_keyword: self._cache},
            )
        self._pending = block
        return output.logits[0]

    def commit(self, path: list[int]) -> None:
        """Keep the cache entries of `path` (root-to-node in the last block) as committed tokens."""
        import torch

        block = block_to_commit(self._pending, path)
        if block is None:
            return
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


def cache_keyword(model: Any) -> str:
    """The name a model's forward takes its KV cache by: transformers 5.24 renamed
    `past_key_values` to `cache` (the old name still works there, with a FutureWarning on every
    load, until 5.40); earlier 5.x know only the old one."""
    forward = inspect.signature(model.forward).parameters
    base = inspect.signature(model.base_model.forward).parameters
    return "cache" if "cache" in forward and "cache" in base else "past_key_values"
