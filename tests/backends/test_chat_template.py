"""A chat's system prompt reaches a model whose template has no system role: Gemma 2's template
raises "System role not supported", so the system text starts the first question, where Gemma
3's own template puts it — on both template paths (the GGUF renderer and transformers')."""

from __future__ import annotations

import pytest

from specchat.backends.base import ChatMessage
from specchat.backends.chat_template import render_chat_template
from specchat.errors import SpecchatError
from tests.tiny_models import tiny_backend

# Gemma 2's chat template, as its tokenizer_config.json ships it
GEMMA2 = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)
CHAT = [
    ChatMessage("system", "Answer like a pirate."),
    ChatMessage("user", "Name a colour."),
    ChatMessage("assistant", "Red."),
    ChatMessage("user", "Another?"),
]
FOLDED = (
    "<bos><start_of_turn>user\nAnswer like a pirate.\n\nName a colour.<end_of_turn>\n"
    "<start_of_turn>model\nRed.<end_of_turn>\n<start_of_turn>user\nAnother?<end_of_turn>\n"
    "<start_of_turn>model\n"
)


def test_a_template_without_a_system_role_gets_it_in_the_first_question():
    assert render_chat_template(GEMMA2, CHAT, bos_token="<bos>") == FOLDED


def test_a_template_that_refuses_for_another_reason_still_says_why():
    with pytest.raises(SpecchatError, match="roles must alternate"):
        render_chat_template(GEMMA2, [*CHAT[:2], CHAT[3]], bos_token="<bos>")


def test_transformers_templates_fold_it_the_same_way():
    backend = tiny_backend()
    backend.tokenizer.chat_template = GEMMA2
    backend.tokenizer.bos_token = "<bos>"
    assert backend.chat_prompt(CHAT) == FOLDED
