"""From what the user typed to prompt token ids: the model's chat template, or raw text."""

from __future__ import annotations

from dataclasses import dataclass

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
    """Token ids of the whole conversation in the model's template, ending where the answer
    starts."""
    return backend.tokenize(backend.chat_prompt(messages), special=True)


def raw_prompt_ids(backend: Backend, text: str) -> list[int]:
    """Token ids of plain text for completion, with BOS when the model expects one."""
    ids = backend.tokenize(text, special=False)
    if backend.add_bos and backend.bos_id >= 0:
        ids = [backend.bos_id, *ids]
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


@dataclass(frozen=True)
class FittedChat:
    """The conversation as it fits the context window: the messages kept and how many of the
    earliest were left out."""

    messages: list[ChatMessage]
    left_out: int
    n_ctx: int


def answer_room(n_ctx: int, max_tokens: int) -> int:
    """Tokens kept free for the answer: its limit, but never more than a quarter of the window
    (a long limit must not squeeze the conversation out)."""
    return max(1, min(max_tokens, n_ctx // 4))


def fit_to_context(backend: Backend, messages: list[ChatMessage], max_tokens: int) -> FittedChat:
    """Leave out the oldest turns (whole user turns with what followed them; a system message
    stays) until the prompt leaves room for the answer. A long chat goes on this way instead of
    failing at the context limit. The newest turn is never cut: when it alone does not fit, a
    SpecchatError says so."""
    n_ctx = backend.n_ctx
    budget = n_ctx - answer_room(n_ctx, max_tokens)
    head = [m for m in messages[:1] if m.role == "system"]
    body = messages[len(head) :]

    def fits(start: int) -> bool:
        return len(chat_prompt_ids(backend, head + body[start:])) <= budget

    if fits(0):
        return FittedChat(list(messages), 0, n_ctx)
    cuts = [i for i, m in enumerate(body) if m.role == "user" and i > 0]
    last = max((i for i, m in enumerate(body) if m.role == "user"), default=len(body) - 1)
    if not cuts or not fits(last):
        size = len(chat_prompt_ids(backend, head + body[last:]))
        raise SpecchatError(
            f"this message is {size} prompt tokens and the model's context window holds "
            f"{n_ctx}, {n_ctx - budget} of them kept for the answer: shorten it"
        )
    low, high = 0, len(cuts) - 1  # the earliest cut that fits; fits(cuts[high]) holds
    while low < high:
        middle = (low + high) // 2
        if fits(cuts[middle]):
            high = middle
        else:
            low = middle + 1
    start = cuts[low]
    return FittedChat(head + body[start:], start, n_ctx)
