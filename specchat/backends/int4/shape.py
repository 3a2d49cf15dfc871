"""The hyper-parameters a GGUF of a family the int4 runtime runs declares, and the check that
every tensor the forward reads has the shape they give it (the C kernels size their buffers by
them)."""

from __future__ import annotations

from dataclasses import dataclass

from specchat.backends.gguf.tensors import (
    GGUFTensors,
)
from specchat.backends.int4.families import (
    FAMILIES,
    ROPE_SCALINGS,
    Family,
    layer_tensors,
)
from specchat.errors import SpecchatError


@dataclass(frozen=True)
class ModelShape:
    """The hyper-parameters a GGUF of a family the runtime runs declares."""

    family: Family
    layers: int
    dim: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    rope_base: float
    rope_freq_scale: float  # 1 / a declared scaling factor
    rope_scaling: str  # "none", "linear" or "yarn"
    yarn_context: int  # YaRN's original context length
    norm_eps: float
    context_length: int
    window: int  # a declared sliding window (0: none); the context is held within it
    # Gemma 3: local layers (all but each local_pattern-th) see `local_window` tokens back, with
    # RoPE at `local_rope_base` unscaled; every layer attends in full where local_window is 0
    local_window: int = 0
    local_pattern: int = 0
    local_rope_base: float = 0.0  # 0: the global layers' RoPE (base and scaling) serves them too
    attention_scale: float = 0.0  # q's scale before the scores (0: head_dim^-0.5)
    attn_softcap: float = 0.0  # scores = c * tanh(scores / c) before the softmax (0: none)
    logit_softcap: float = 0.0  # logits = c * tanh(logits / c) (0: none)

    def is_local(self, layer: int) -> bool:
        """Whether `layer` attends within the sliding window (llama.cpp's swa pattern)."""
        pattern = self.local_pattern
        return self.local_window > 0 and pattern > 0 and layer % pattern < pattern - 1

    @property
    def scale(self) -> float:
        return self.attention_scale or float(self.head_dim**-0.5)

    @classmethod
    def read(cls, tensors: GGUFTensors) -> ModelShape:
        arch = tensors.metadata("general.architecture", "unknown")
        if arch not in FAMILIES:
            raise SpecchatError(
                f"the int4 runtime runs {', '.join(FAMILIES)} models; {tensors.path.name} is "
                f"{arch!r} (use --backend llama)"
            )
        scaling = tensors.metadata(f"{arch}.rope.scaling.type", None)
        if scaling not in ROPE_SCALINGS:
            raise SpecchatError(
                f"{tensors.path.name} uses {scaling} RoPE scaling, which the int4 runtime does "
                "not implement (use --backend llama)"
            )

        def meta(key: str, default=None):
            value = tensors.metadata(f"{arch}.{key}", default)
            if value is None:
                raise SpecchatError(f"{tensors.path.name} lacks {arch}.{key}")
            return value

        dim = int(meta("embedding_length"))
        heads = int(meta("attention.head_count"))
        head_dim = int(meta("attention.key_length", dim // heads))
        vocab_rows = tensors.shape("token_embd.weight")[0]
        # llama.cpp reads the factor from either key and applies it whatever the type says
        factor = float(meta("rope.scaling.factor", meta("rope.scale_linear", 0.0)))
        family = FAMILIES[arch]
        declared_window = int(meta("attention.sliding_window", family.default_window))
        pattern = meta("attention.sliding_window_pattern", family.local_pattern)
        if not isinstance(pattern, int) or pattern < 0:
            raise SpecchatError(
                f"{tensors.path.name}: a sliding-window pattern the int4 runtime does not read "
                "(use --backend llama)"
            )
        layers = int(meta("block_count"))
        local = bool(family.local_pattern) and declared_window > 0
        shape = cls(
            family=family,
            layers=layers,
            dim=dim,
            ffn=int(meta("feed_forward_length")),
            heads=heads,
            kv_heads=int(meta("attention.head_count_kv", heads)),
            head_dim=head_dim,
            vocab=vocab_rows,
            rope_base=float(meta("rope.freq_base", 10000.0)),
            rope_freq_scale=1.0 if factor == 0.0 else 1.0 / factor,
            rope_scaling=scaling or "none",
            yarn_context=int(
                meta("rope.scaling.original_context_length", meta("context_length", 4096))
            ),
            norm_eps=float(meta("attention.layer_norm_rms_epsilon", 1e-5)),
            context_length=int(meta("context_length", 4096)),
            window=0 if family.local_pattern else declared_window,
            local_window=declared_window if local else 0,
            local_pattern=pattern if local else 0,
            local_rope_base=float(meta("rope.freq_base_swa", family.local_rope_base or 0.0)),
            # Gemma's 27B (Gemma 3: 62 layers, Gemma 2: 46) scale by the embedding's width per
            # head, as llama.cpp does
            attention_scale=(
                float((dim // heads) ** -0.5)
                if family.gelu and layers == (46 if family.attn_softcap else 62)
                else 0.0
            ),
            attn_softcap=float(meta("attn_logit_softcapping", family.attn_softcap)),
            logit_softcap=float(meta("final_logit_softcapping", family.final_softcap)),
        )
        if int(meta("rope.dimension_count", head_dim)) != head_dim:
            raise SpecchatError(f"{tensors.path.name}: partial RoPE is not supported")
        if shape.layers < 1 or shape.ffn < 1:
            raise SpecchatError(f"{tensors.path.name}: {shape.layers} layers of width {shape.ffn}")
        if head_dim < 16 or head_dim % 16 or head_dim > 256 or heads % shape.kv_heads:
            raise SpecchatError(f"{tensors.path.name}: head layout {heads}x{head_dim} unsupported")
        if (
            not (0.0 < shape.rope_freq_scale <= 1.0e6)
            or shape.window < 0
            or declared_window < 0
            or shape.yarn_context < 1
            or not (0.0 <= shape.local_rope_base < 1e12)
            or not (0.0 <= shape.logit_softcap < 1e6)
            or not (0.0 <= shape.attn_softcap < 1e6)
        ):
            raise SpecchatError(
                f"{tensors.path.name}: RoPE scaling (factor {factor}) or window unusable"
            )
        return shape

    def layer_tensors(self) -> dict[str, tuple[int, ...]]:
        """Each layer's tensors (named after `blk.N.`) and their shapes."""
        return layer_tensors(
            self.family, dim=self.dim, ffn=self.ffn, q=self.heads * self.head_dim,
            kv=self.kv_heads * self.head_dim, head_dim=self.head_dim,
        )  # fmt: skip


def check_shapes(tensors: GGUFTensors, shape: ModelShape, head_name: str) -> None:
    """Every tensor the forward reads has the shape the header's hyper-parameters give it: the C
    kernels size their buffers by those, so a crafted file must stop here, in one line."""
    wanted = {"token_embd.weight": (shape.vocab, shape.dim), head_name: (shape.vocab, shape.dim)}
    wanted["output_norm.weight"] = (shape.dim,)
    if "rope_freqs.weight" in tensors:
        wanted["rope_freqs.weight"] = (shape.head_dim // 2,)
    per_layer = shape.layer_tensors()
    for i in range(shape.layers):
        wanted.update({f"blk.{i}.{part}": dims for part, dims in per_layer.items()})
    tensors.check_readable(list(wanted))
    unread = sorted(set(tensors.header.tensors) - set(wanted))
    if unread:  # a part of the model this forward would skip: the answer would be wrong
        raise SpecchatError(
            f"{tensors.path.name}: the int4 runtime does not implement {unread[0]}"
            + (f" (and {len(unread) - 1} more tensors)" if len(unread) > 1 else "")
            + " (use --backend llama)"
        )
    for name, dims in wanted.items():
        if tensors.shape(name) != dims:
            raise SpecchatError(
                f"{tensors.path.name}: tensor {name} is {list(tensors.shape(name))}, where the "
                f"header's sizes make it {list(dims)}"
            )
