"""`specchat ask`: one answer streamed to stdout (coloured runs) or as JSON Lines events."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable

from specchat.decoding.engine import Engine, GenerationRequest
from specchat.decoding.events import DoneEvent, StepEvent
from specchat.decoding.registry import build_decoder, sampling_for
from specchat.decoding.sampling import SamplingParams
from specchat.models import LoadOptions, load_model
from specchat.prompting import chat_prompt_ids, messages_for, raw_prompt_ids
from specchat.themes.palette import COLOUR_BLIND_SAFE, ansi


def _step_json(event: StepEvent) -> str:
    return json.dumps(
        {
            "type": "step",
            "tokens": list(event.tokens),
            "text": event.text,
            "drafted": event.drafted,
            "accepted": event.accepted,
            "decoder": event.decoder,
        },
        ensure_ascii=False,
    )


def _done_json(event: DoneEvent) -> str:
    return json.dumps(
        {
            "type": "done",
            "finish_reason": event.finish_reason,
            "prompt_token_ids": list(event.prompt_token_ids),
            "token_ids": list(event.token_ids),
            "text": event.text,
            "stats": event.stats.as_dict(),
        },
        ensure_ascii=False,
    )


def run_ask(
    prompt: str,
    *,
    decoder: str,
    decoder_params: dict[str, object],
    model: str | None,
    load_options: LoadOptions,
    max_tokens: int,
    temperature: float | None,
    sampling: SamplingParams,
    system: str | None,
    stop: tuple[str, ...],
    raw: bool,
    as_json: bool,
    progress: Callable[[str], None],
    progress_done: Callable[[], None],
) -> int:
    """Returns the exit code: 0, or 130 when Ctrl+C stopped the answer."""
    chosen_sampling = sampling_for(decoder, temperature, sampling)
    loaded = load_model(model, load_options, progress)
    progress_done()
    engine = Engine(loaded, build_decoder(decoder, decoder_params, loaded))
    ids = (
        raw_prompt_ids(loaded, prompt)
        if raw
        else chat_prompt_ids(loaded, messages_for(prompt, system))
    )
    request = GenerationRequest(tuple(ids), max_tokens, stop, chosen_sampling)
    colour = sys.stdout.isatty() and not as_json
    handle = engine.start(request)
    interrupted = threading.Event()

    def on_interrupt(signum, frame) -> None:
        # Ctrl+C stops the answer between steps and keeps what was generated.
        interrupted.set()
        handle.cancel()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        for event in handle:
            if isinstance(event, StepEvent):
                if not (event.tokens or event.text):
                    # a step that produced only EOS, or a beam step whose beams do not agree yet:
                    # nothing to show, and --json lists only steps that added something
                    continue
                if as_json:
                    print(_step_json(event), flush=True)
                else:
                    run_colour = COLOUR_BLIND_SAFE.colour_for(len(event.tokens)) if colour else None
                    sys.stdout.write(ansi(run_colour, event.text) if run_colour else event.text)
                    sys.stdout.flush()
            elif isinstance(event, DoneEvent):
                if as_json:
                    print(_done_json(event), flush=True)
                else:
                    sys.stdout.write("\n")
                    if event.finish_reason == "cancelled":
                        sys.stderr.write("[stopped]\n")
    finally:
        signal.signal(signal.SIGINT, previous)
    return 130 if interrupted.is_set() else 0
