"""A line-mode chat for terminals without the TUI (and until it is opened)."""

from __future__ import annotations

from specchat.answers import build_engine, open_model
from specchat.app.foreground import AnswerOutput, generating
from specchat.backends.base import ChatMessage
from specchat.engine.events import DoneEvent, StepEvent
from specchat.errors import SpecchatError
from specchat.options import RunConfig
from specchat.prompting import checked_prompt
from specchat.run_config import chosen_decoder, run_params, sampling_for


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


def run_repl(config: RunConfig) -> None:
    """The chat, a line at a time, with the run's model, decoder, sampling and answer length."""
    loaded = open_model(config)
    name = chosen_decoder(config, loaded)
    engine = build_engine(loaded, name, run_params([name], config)[name])
    sampling = sampling_for(name, config)
    system = config.system_prompt
    history: list[ChatMessage] = [ChatMessage("system", system)] if system else []
    print(f"specchat on {loaded.model_name} ({loaded.name}, {loaded.device}); Ctrl+D quits.")
    while True:
        line = _read_line()
        if line is None:
            return
        if not line.strip():
            continue
        history.append(ChatMessage("user", line))
        # the engine prompts: a template here, the messages themselves on a server
        request = engine.request(
            history, max_tokens=config.max_tokens, sampling=sampling, end_loops=config.end_loops
        )
        answer = ""
        # in this thread, where the model was loaded (foreground.py); Ctrl+C ends the answer
        with generating(engine, request) as (events, interrupted):
            out = AnswerOutput(interrupted)
            for event in events:
                if isinstance(event, StepEvent):
                    out.write(event.text)
                elif isinstance(event, DoneEvent):
                    answer = event.text
                    out.write("\n")  # the answer ends here, before the engine's work after it
        if out.gone:  # the reader of a pipe went away (`specchat | head`): as a shell says
            raise SystemExit(141)
        history.append(ChatMessage("assistant", answer))
