"""A GGUF model's tokenizer and chat template, through llama.cpp's vocabulary.

Shared by every runtime that reads a GGUF file (llama.cpp itself, the int4 runtime), so the same
file tokenizes the same way and builds the same prompt whichever runtime evaluates it.
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path
from typing import Any

from specchat import openmp
from specchat.backends.base import ChatMessage
from specchat.backends.chat_template import CHATML_TEMPLATE, render_chat_template
from specchat.errors import SpecchatError


def import_llama_cpp():
    """llama-cpp-python, its logging silenced; a one-line error when it is not installed."""
    openmp.share_torch_runtime()  # before llama.cpp binds to a runtime
    try:
        import llama_cpp
        import llama_cpp._logger as llama_logger
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SpecchatError(
            "llama-cpp-python is not installed: run the README's setup command"
        ) from exc
    llama_logger.logger.setLevel(logging.CRITICAL)
    return llama_cpp


class LlamaVocabulary:
    """Tokenize, token bytes, special ids and the chat template of one llama.cpp model.

    Built on a loaded model (`LlamaVocabulary(llama_cpp, model)`, which the caller frees) or,
    with `load`, on a vocabulary-only load of a GGUF file that it owns and frees itself.
    """

    def __init__(self, lib: Any, model: Any, *, owns_model: bool = False) -> None:
        self._lib = lib
        self._model = model
        self._owns_model = owns_model
        self._vocab = lib.llama_model_get_vocab(model)
        self.vocab_size = lib.llama_vocab_n_tokens(self._vocab)
        self.eos_ids = frozenset(
            t for t in range(self.vocab_size) if lib.llama_vocab_is_eog(self._vocab, t)
        )
        self.add_bos = bool(lib.llama_vocab_get_add_bos(self._vocab))
        self.bos_id = lib.llama_vocab_bos(self._vocab)
        self.eos_id = lib.llama_vocab_eos(self._vocab)
        self.template = self.metadata("tokenizer.chat_template") or CHATML_TEMPLATE
        self._piece_cache: dict[int, bytes] = {}

    @classmethod
    def load(cls, path: str | Path) -> LlamaVocabulary:
        """The vocabulary of a GGUF file alone (no weights are loaded)."""
        lib = import_llama_cpp()
        lib.llama_backend_init()
        params = lib.llama_model_default_params()
        params.vocab_only = True
        model = lib.llama_model_load_from_file(str(path).encode(), params)
        if not model:
            raise SpecchatError(f"cannot read the vocabulary of {Path(path).name}")
        return cls(lib, model, owns_model=True)

    def metadata(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = self._lib.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            self._lib.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 8
        buf = (self._lib.llama_token * n_max)()
        n = self._lib.llama_tokenize(self._vocab, data, len(data), buf, n_max, False, special)
        if n < 0:
            buf = (self._lib.llama_token * -n)()
            n = self._lib.llama_tokenize(self._vocab, data, len(data), buf, -n, False, special)
        return list(buf[:n])

    def token_bytes(self, token_id: int) -> bytes:
        piece = self._piece_cache.get(token_id)
        if piece is None:
            buf = ctypes.create_string_buffer(64)
            n = self._lib.llama_token_to_piece(self._vocab, token_id, buf, len(buf), 0, True)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = self._lib.llama_token_to_piece(self._vocab, token_id, buf, len(buf), 0, True)
            piece = buf.raw[:n]
            self._piece_cache[token_id] = piece
        return piece

    def chat_prompt(self, messages: list[ChatMessage]) -> str:
        bos = self.token_bytes(self.bos_id).decode("utf-8", "replace") if self.bos_id >= 0 else ""
        eos = self.token_bytes(self.eos_id).decode("utf-8", "replace") if self.eos_id >= 0 else ""
        return render_chat_template(self.template, messages, bos_token=bos, eos_token=eos)

    def close(self) -> None:
        if self._owns_model and self._model:
            self._lib.llama_model_free(self._model)
        self._model = None


class VocabularyOf:
    """The tokenizer half of a backend that holds a `LlamaVocabulary` as `vocabulary` (the
    llama.cpp and int4 runtimes read a GGUF's vocabulary alike)."""

    vocabulary: LlamaVocabulary

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        return self.vocabulary.tokenize(text, special=special)

    def token_bytes(self, token_id: int) -> bytes:
        return self.vocabulary.token_bytes(token_id)

    def chat_prompt(self, messages: list[ChatMessage]) -> str:
        return self.vocabulary.chat_prompt(messages)
