"""Which engine answers on a backend: specchat's own loop for a model it runs, the server's stream
for a remote server. This is the one place that asks what a backend can do; both engines keep
one protocol (`protocol.AnswerEngine`), so callers never ask which one they got."""

from __future__ import annotations

from collections.abc import Sequence

from specchat.backends.base import AnyBackend, ChatMessage, Exactness, is_server
from specchat.decoding.base import Decoder
from specchat.engine.protocol import AnswerEngine
from specchat.prompting import chat_prompt_ids, raw_prompt_ids


def engine_for(backend: AnyBackend, decoder: Decoder) -> AnswerEngine:
    if not is_server(backend):
        from specchat.engine.local import Engine

        return Engine(backend, decoder)
    from specchat.engine.remote import RemoteEngine

    return RemoteEngine(backend, decoder)


def prompt_ids(
    backend: AnyBackend, messages: Sequence[ChatMessage], raw: bool = False
) -> tuple[int, ...]:
    """The conversation's prompt ids on `backend` (with `raw`: the last message's text, no
    template); none for a remote server, which applies its own template to the messages."""
    if is_server(backend):
        return ()
    if raw:
        return tuple(raw_prompt_ids(backend, messages[-1].content))
    return tuple(chat_prompt_ids(backend, list(messages)))


def exactness_of(backend: AnyBackend) -> Exactness | None:
    """Whether a block's logits equal one-token passes' on `backend` (probed once, then kept);
    None for a remote server, where specchat does not decode."""
    return None if is_server(backend) else backend.exactness()
