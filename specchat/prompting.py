"""From what the user typed to prompt token ids: the model's chat template, or raw text."""

from __future__ import annotations

from specchat.backends.base import Backend, ChatMessage
from specchat.errors import SpecchatError


def checked_prompt(text: str, where: str = "the prompt") -> str:
    """`text` when it is something to answer; otherwise one line saying why not. Text that was
    not UTF-8 reaches Python as lone surrogates (argv and, in the C locale, stdin), which no
    tokenizer can encode: it is refused here rather than deep inside a backend."""
    if not text.strip():
        raise SpecchatError(f"{where} is empty: there is no question to answer")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SpecchatError(
            f"{where} is not UTF-8 text (byte {exc.start} is not valid): re-encode it as UTF-8"
        ) from None
    return text


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


def turn_start(backend: Backend, messages: list[ChatMessage], prompt_ids: list[int]) -> int:
    """Where the last message's turn begins in `prompt_ids` (the conversation's ids): the tokens
    before it are earlier turns of the chat, a draft source of their own. 0 for a first turn.

    Only the new turn's text is tokenized (the conversation may be long and this runs before the
    first token): the prompt text is cut where it parts from the earlier conversation's, which
    is a template marker, so the two tokenizations agree up to there."""
    earlier = messages[:-1]
    if not any(m.role in ("user", "assistant") for m in earlier):
        return 0
    try:
        before, full = backend.chat_prompt(earlier), backend.chat_prompt(messages)
    except Exception:  # a template that refuses the shorter conversation
        return 0
    shared = 0
    for a, b in zip(before, full):
        if a != b:
            break
        shared += 1
    tail = backend.tokenize(full[shared:], special=True)
    return max(0, len(prompt_ids) - len(tail))
