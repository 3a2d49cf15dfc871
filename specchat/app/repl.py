"""A line-mode chat for terminals without the TUI (and until it is opened)."""

from __future__ import annotations

import sys

from specchat.backends.base import ChatMessage
from specchat.decoding.engine import GenerationRequest
from specchat.decoding.engines import engine_for
from specchat.decoding.events import DoneEvent, StepEvent
from specchat.decoding.registry import build_decoder, default_decoder
from specchat.errors import SpecchatError
from specchat.models import LoadOptions, load_model
from specchat.prompting import chat_prompt_ids, checked_prompt


def _read_line() -> str | None:
    """The next line the user typed or piped in (None at the end), refused in one line when it
    is not UTF-8 text: decoding fails in a UTF-8 locale, and arrives as lone surrogates in the
    C locale."""
    try:
        line = input("> ")
    except (EOFError, KeyboardInterrupt):
        print()
        return None
    except UnicodeDecodeError as exc:
        raise SpecchatError(f"stdin is not UTF-8 text ({exc.reason})") from None
    if line.strip():
        checked_prompt(line, "a line of stdin")
    return line


def run_repl(
    model: str | None,
    backend: str | None,
    device: str,
    base_url: str | None = None,
    api_key_env: str | None = None,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
) -> None:
    options = LoadOptions(
        backend=backend,
        device=device,
        base_url=base_url,
        api_key_env=api_key_env,
        allow_pickle=allow_pickle,
        trust_remote_code=trust_remote_code,
    )
    loaded = load_model(model, options)
    engine = engine_for(loaded, build_decoder(default_decoder(loaded), {}, loaded))
    history: list[ChatMessage] = []
    print(f"specchat on {loaded.model_name} ({loaded.name}, {loaded.device}); Ctrl+D quits.")
    while True:
        line = _read_line()
        if line is None:
            return
        if not line.strip():
            continue
        history.append(ChatMessage("user", line))
        prompt = tuple(chat_prompt_ids(loaded, history))
        request = GenerationRequest(prompt, 512, messages=tuple(history))
        handle = engine.start(request)
        events = iter(handle)
        answer = ""
        while True:
            try:
                event = next(events)
            except StopIteration:
                break
            except KeyboardInterrupt:
                handle.cancel()
                continue
            if isinstance(event, StepEvent):
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, DoneEvent):
                answer = event.text
        print()
        history.append(ChatMessage("assistant", answer))
