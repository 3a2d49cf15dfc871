"""Render a model's own Jinja chat template (as stored in GGUF metadata) without transformers.

Mirrors the environment transformers gives templates (trim_blocks, lstrip_blocks,
raise_exception, strftime_now) so both backends build the same prompt text for the same model.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import lru_cache

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from specchat.backends.base import ChatMessage
from specchat.errors import SpecchatError


def _raise(message: str) -> None:
    raise SpecchatError(f"chat template: {message}")


@lru_cache(maxsize=8)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except jinja2.TemplateError as exc:
        raise SpecchatError(f"the model's chat template does not parse: {exc}") from exc


def render_chat_template(
    template: str, messages: list[ChatMessage], *, bos_token: str = "", eos_token: str = ""
) -> str:
    """The prompt text for `messages`, ending where the assistant's answer begins."""
    compiled = _compile(template)

    def render(turns: list[ChatMessage]) -> str:
        return compiled.render(
            messages=[{"role": m.role, "content": m.content} for m in turns],
            add_generation_prompt=True,
            bos_token=bos_token,
            eos_token=eos_token,
        )

    return system_folded_if_refused(render, messages)


def system_folded_if_refused(
    render: Callable[[list[ChatMessage]], str], messages: list[ChatMessage]
) -> str:
    """`render(messages)`; where the template refuses a system message (Gemma 2's raises "System
    role not supported"), the system text starts the first question instead, where Gemma 3's own
    template puts it. Every runtime renders through this, so a chat's system prompt reaches
    every model."""
    try:
        return render(messages)
    except SpecchatError:
        if not (len(messages) > 1 and messages[0].role == "system" and messages[1].role == "user"):
            raise
    system, first, *rest = messages
    return render([ChatMessage("user", f"{system.content}\n\n{first.content}"), *rest])


# ChatML, for models that ship no template of their own.
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
