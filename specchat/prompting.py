"""From what the user typed to prompt token ids: the model's chat template, or raw text."""

from __future__ import annotations

from specchat.backends.base import Backend, ChatMessage


def chat_prompt_ids(backend: Backend, messages: list[ChatMessage]) -> list[int]:
    """Token ids of the whole conversation in the model's template, ending where the answer starts.
    A remote server applies its own template and has no tokenizer here: no ids."""
    if not getattr(backend, "has_logits", True):
        return []
    return backend.tokenize(backend.chat_prompt(messages), special=True)


def raw_prompt_ids(backend: Backend, text: str) -> list[int]:
    """Token ids of plain text for completion, with BOS when the model expects one."""
    ids = backend.tokenize(text, special=False)
    bos = getattr(backend, "bos_id", None)
    if getattr(backend, "add_bos", False) and bos is not None and bos >= 0:
        ids = [bos, *ids]
    return ids


def messages_for(
    prompt: str, system: str | None = None, history: list[ChatMessage] | None = None
) -> list[ChatMessage]:
    messages = [ChatMessage("system", system)] if system else []
    messages.extend(history or [])
    messages.append(ChatMessage("user", prompt))
    return messages
