"""The model families the int4 runtime's one forward runs, each declared by how it differs from
Llama, and the tensors a layer of each holds.

The families people run at 0.5-8 B parameters share one transformer: RMS norms before attention
and the MLP, grouped-query attention with RoPE, a SwiGLU MLP, a residual stream. What differs is
small and local (a bias on the projections, a norm over each head's q and k, which pairs RoPE
rotates, weights stored fused), so the forward reads these rows instead of being copied per
family, and a family is added here, not in the forward. The RoPE pairing follows llama.cpp's
rope type per architecture: Llama GGUFs carry q/k weights permuted for adjacent pairs ("normal"),
the others rotate x[j] with x[j + d/2] ("NEOX").

Gemma 2 and 3 are these rows and more of their own: the MLP's gate through GELU, embeddings
scaled by sqrt(dim), an RMS norm on each sublayer's output before the residual add, local layers
(all but each `local_pattern`-th) that attend within a sliding window (Gemma 3's with a RoPE base
of their own), and soft caps, c * tanh(x / c), on the attention scores and the logits (Gemma 2
always: llama.cpp's defaults where the file declares none).

SmolLM3 is Llama with every fourth layer attending without RoPE (NoPE: positions reach those
layers only through the others' outputs), as llama.cpp's `n_no_rope_layer_step` fixes it.

Not here: LongRoPE scaling (phi3's 128k files: per-length factor tables).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    neox_rope: bool = False  # RoPE rotates (x[j], x[j + d/2]), llama.cpp's NEOX type
    qkv_bias: bool = False  # q, k and v projections carry biases (qwen2)
    qk_norm: bool = False  # each head's q and k are RMS-normed before RoPE (qwen3)
    fused_qkv: bool = False  # one attn_qkv weight holds q, k and v rows (phi3)
    fused_gate_up: bool = False  # ffn_up holds the gate's rows, then the up rows (phi3)
    gelu: bool = False  # the MLP's gate goes through GELU (tanh), not SiLU (gemma3)
    scaled_embeddings: bool = False  # token embeddings times sqrt(dim) (gemma3)
    post_norms: bool = False  # attention's and the MLP's outputs RMS-normed before the add (gemma3)
    # every layer but each N-th is local: a sliding window and the local RoPE base (gemma3: 6)
    local_pattern: int = 0
    local_rope_base: float | None = None  # the local layers' RoPE base, unscaled (None: global's)
    default_window: int = 0  # the local layers' window where the file declares none
    attn_softcap: float = 0.0  # the scores' soft cap where the file declares none (0: none)
    final_softcap: float = 0.0  # the logits' soft cap where the file declares none (0: none)
    no_rope_every: int = 0  # each N-th layer (counting from 1) attends without RoPE (smollm3: 4)

    def uses_rope(self, layer: int) -> bool:
        """Whether layer `layer` (from 0) rotates its q and k."""
        return not self.no_rope_every or (layer + 1) % self.no_rope_every != 0


FAMILIES = {
    "llama": Family(),  # Llama 2/3 (with rope_freqs), SmolLM, Mistral 7B (written as llama)
    "qwen2": Family(neox_rope=True, qkv_bias=True),
    "qwen3": Family(neox_rope=True, qk_norm=True),
    "phi3": Family(neox_rope=True, fused_qkv=True, fused_gate_up=True),
    "smollm3": Family(no_rope_every=4),
    "gemma2": Family(
        neox_rope=True, gelu=True, scaled_embeddings=True, post_norms=True, local_pattern=2,
        default_window=4096, attn_softcap=50.0, final_softcap=30.0,
    ),
    "gemma3": Family(
        neox_rope=True, qk_norm=True, gelu=True, scaled_embeddings=True, post_norms=True,
        local_pattern=6, local_rope_base=10000.0,
    ),
}  # fmt: skip

# RoPE scalings the tables implement (llama.cpp applies a declared factor whatever the type;
# YaRN adds a ramp between interpolated and original frequencies and a magnitude scale)
ROPE_SCALINGS = (None, "none", "linear", "yarn")


def layer_tensors(
    family: Family, *, dim: int, ffn: int, q: int, kv: int, head_dim: int
) -> dict[str, tuple[int, ...]]:
    """Each tensor of a layer (its name after `blk.N.`) and its shape [rows, cols] as the
    header's sizes give it: what the loader reads and what a file must hold."""
    parts: dict[str, tuple[int, ...]] = {"attn_norm.weight": (dim,), "ffn_norm.weight": (dim,)}
    if family.fused_qkv:
        parts["attn_qkv.weight"] = (q + 2 * kv, dim)
    else:
        parts.update({"attn_q.weight": (q, dim), "attn_k.weight": (kv, dim)})
        parts["attn_v.weight"] = (kv, dim)
    if family.qkv_bias:
        parts.update({"attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,)})
    if family.qk_norm:
        parts.update({"attn_q_norm.weight": (head_dim,), "attn_k_norm.weight": (head_dim,)})
    parts["attn_output.weight"] = (dim, q)
    if family.fused_gate_up:
        parts["ffn_up.weight"] = (2 * ffn, dim)
    else:
        parts.update({"ffn_gate.weight": (ffn, dim), "ffn_up.weight": (ffn, dim)})
    parts["ffn_down.weight"] = (dim, ffn)
    if family.post_norms:  # llama.cpp's names for Gemma's norms after the sublayers
        parts.update({"post_attention_norm.weight": (dim,), "post_ffw_norm.weight": (dim,)})
    return parts


def qkv_names(family: Family) -> list[str]:
    return ["attn_qkv.weight"] if family.fused_qkv else [f"attn_{p}.weight" for p in "qkv"]


def gate_up_names(family: Family) -> list[str]:
    return ["ffn_up.weight"] if family.fused_gate_up else ["ffn_gate.weight", "ffn_up.weight"]
