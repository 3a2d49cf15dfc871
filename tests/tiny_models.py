"""Tiny real models built from a config in the test: fast enough to decode thousands of times.

`peaked` scales the output head so the model is confident and falls into repetitions, which is what
makes drafts get accepted (random tiny models are otherwise near-uniform).
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from specchat.backends.hf.backend import HFBackend


def tiny_tokenizer(vocab_size: int = 128, eos: int = 2) -> PreTrainedTokenizerFast:
    """Word-level tokens t0…tN; the EOS is LlamaConfig's default eos_token_id (2), so the model
    and the tokenizer agree on the one token that ends an answer."""
    vocab = {f"t{i}": i for i in range(vocab_size)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=f"t{eos}")


def tiny_model(
    vocab_size: int = 128,
    seed: int = 0,
    peaked: float = 1.0,
    dtype: torch.dtype = torch.float64,
    noise: float = 0.0,
    attention: str = "sdpa",
) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab_size,
        max_position_embeddings=256,
        attn_implementation=attention,
    )
    model = LlamaForCausalLM(config).to(dtype).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(peaked)
        if noise:
            generator = torch.Generator().manual_seed(seed + 1)
            for param in model.parameters():
                param.add_(noise * torch.randn(param.shape, generator=generator, dtype=dtype))
    return model


def tiny_backend(name: str = "tiny", vocab_size: int = 128, **kwargs) -> HFBackend:
    return HFBackend(
        tiny_model(vocab_size, **kwargs), tiny_tokenizer(vocab_size), model_name=name, device="cpu"
    )
