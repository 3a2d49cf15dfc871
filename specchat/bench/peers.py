"""The libraries' own implementations of the same methods, run on the same questions.

They are what a user would otherwise reach for, so our decoders are reported as ratios over them:
llama-cpp-python's `Llama.generate` (plain, and with `LlamaPromptLookupDecoding`) and transformers'
`generate` (plain, `prompt_lookup_num_tokens`, `assistant_model`). This module is the one place that
reaches into a backend's library objects, because running the library is its whole job.
"""

from __future__ import annotations

import time

from specchat.backends.base import Backend
from specchat.bench.runner import Outcome
from specchat.decoding.sources import NO_SOURCES, DraftSources
from specchat.errors import SpecchatError


def _decode_seconds(first_token_at: float | None, end: float, tokens: int) -> float:
    """Library calls do not separate prefill from decoding: time from the first generated token
    on, scaled to all tokens (our engine's decode time also covers the first token's step)."""
    if first_token_at is None or tokens < 2:
        return max(end - (first_token_at or end), 1e-9)
    return (end - first_token_at) * tokens / (tokens - 1)


class LlamaCppPeer:
    greedy_family = True

    def __init__(self, backend: Backend, prompt_lookup: bool, num_pred_tokens: int = 10) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        path = getattr(backend, "model_path", None)
        if backend.name != "llama" or path is None:
            raise SpecchatError("llama-cpp-python peers need the llama backend")
        self.name = f"peer:llama-cpp-python:{'pld' if prompt_lookup else 'greedy'}"
        self._eos = backend.eos_ids
        draft = (
            LlamaPromptLookupDecoding(num_pred_tokens=num_pred_tokens) if prompt_lookup else None
        )
        # With a draft model llama-cpp-python keeps every position's logits, but sizes that buffer
        # for all positions only when logits_all is passed up front (else prompts > n_batch fail).
        self._llm = Llama(
            path,
            n_ctx=min(backend.n_ctx, 2048) if prompt_lookup else backend.n_ctx,
            logits_all=prompt_lookup,
            n_threads=backend.threads,
            n_threads_batch=backend.threads,
            flash_attn=False,
            draft_model=draft,
            verbose=False,
        )
        self._backend = backend

    def run(
        self, prompt: list[int], max_tokens: int, sources: DraftSources = NO_SOURCES
    ) -> Outcome:
        """Peers draft from the prompt alone: `sources` is not theirs to use."""
        tokens: list[int] = []
        self._llm.reset()
        first = None
        for token in self._llm.generate(prompt, top_k=1, temp=0.0, reset=True):
            if first is None:
                first = time.perf_counter()
            if token in self._eos:
                break
            tokens.append(token)
            if len(tokens) >= max_tokens:
                break
        end = time.perf_counter()
        text = b"".join(self._backend.token_bytes(t) for t in tokens).decode("utf-8", "replace")
        return Outcome(tuple(tokens), text, _decode_seconds(first, end, len(tokens)), 0, 0, 0)


class _FirstTokenClock:
    """A transformers streamer that notes when the first generated tokens arrive."""

    def __init__(self) -> None:
        self.calls = 0
        self.first: float | None = None

    def put(self, value) -> None:
        self.calls += 1
        if self.calls == 2:  # the first call carries the prompt
            self.first = time.perf_counter()

    def end(self) -> None:
        pass


class TransformersPeer:
    greedy_family = True

    def __init__(self, backend: Backend, mode: str, num_pred_tokens: int = 10) -> None:
        if backend.name != "hf":
            raise SpecchatError("transformers peers need the hf backend")
        self.name = f"peer:transformers:{mode}"
        self._backend = backend
        self._kwargs: dict[str, object] = {}
        if mode == "pld":
            self._kwargs["prompt_lookup_num_tokens"] = num_pred_tokens
        elif mode == "draft":
            # No smaller sibling of the bundled model exists in transformers form: the target
            # drafts for itself, which shows the machinery's own cost.
            self._kwargs["assistant_model"] = backend.model

    def run(
        self, prompt: list[int], max_tokens: int, sources: DraftSources = NO_SOURCES
    ) -> Outcome:
        """Peers draft from the prompt alone: `sources` is not theirs to use."""
        import torch

        model = self._backend.model
        input_ids = torch.tensor([prompt], device=model.device)
        clock = _FirstTokenClock()
        with torch.no_grad():
            out = model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                do_sample=False,
                max_new_tokens=max_tokens,
                pad_token_id=next(iter(self._backend.eos_ids)),
                streamer=clock,
                **self._kwargs,
            )
        end = time.perf_counter()
        generated = out[0, len(prompt) :].tolist()
        cut = next((i for i, t in enumerate(generated) if t in self._backend.eos_ids), None)
        tokens = generated[:cut] if cut is not None else generated
        text = b"".join(self._backend.token_bytes(t) for t in tokens).decode("utf-8", "replace")
        return Outcome(tuple(tokens), text, _decode_seconds(clock.first, end, len(tokens)), 0, 0, 0)


def peers_for(backend: Backend) -> list:
    if backend.name == "llama":
        return [LlamaCppPeer(backend, False), LlamaCppPeer(backend, True)]
    return [
        TransformersPeer(backend, "greedy"),
        TransformersPeer(backend, "pld"),
        TransformersPeer(backend, "draft"),
    ]


# Which peer each of our methods is compared with.
MATCHING_PEER = {
    "greedy": ("peer:llama-cpp-python:greedy", "peer:transformers:greedy"),
    "pld": ("peer:llama-cpp-python:pld", "peer:transformers:pld"),
    "draft": ("peer:transformers:draft",),
}
