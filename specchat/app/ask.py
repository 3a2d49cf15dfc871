"""`specchat ask`: one answer streamed to stdout (coloured runs) or as JSON Lines events.

The exchange is recorded in the chat store as a chat of its own (as `llm` logs its prompts), so
later answers — in the TUI or another `ask` — can draft from it; `--no-log` skips that.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable

from specchat.app.tui.runs import RunText
from specchat.backends.base import Backend, ChatMessage
from specchat.decoding.engine import Engine, GenerationRequest
from specchat.decoding.events import DoneEvent, StepEvent
from specchat.decoding.registry import build_decoder, decoder_class, sampling_for
from specchat.decoding.sampling import SamplingParams
from specchat.decoding.sources import DraftSources
from specchat.history import HistoryStore, StoredMessage
from specchat.models import LoadOptions, load_model
from specchat.prompting import chat_prompt_ids, messages_for, raw_prompt_ids, turn_start
from specchat.saved_chats import open_saved_chats
from specchat.settings import load_settings
from specchat.themes.palette import COLOUR_BLIND_SAFE, ansi


def _step_json(event: StepEvent) -> str:
    return json.dumps(
        {
            "type": "step",
            "tokens": list(event.tokens),
            "text": event.text,
            "drafted": event.drafted,
            "accepted": event.accepted,
            "source": event.source,
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


def _record(store: HistoryStore, prompt: str, done: DoneEvent, runs: RunText, decoder: str) -> None:
    """The exchange as a chat of its own, titled like the TUI titles a new chat."""
    chat_id = store.new_chat(" ".join(prompt.split())[:48] or "ask")
    store.add_message(chat_id, StoredMessage("user", prompt))
    runs.finish(done.text)
    store.add_message(
        chat_id,
        StoredMessage(
            "assistant",
            done.text,
            decoder=decoder,
            finish_reason=done.finish_reason,
            stats=done.stats,
            runs=list(runs.runs),
        ),
    )


def _sources(
    loaded: Backend, decoder: str, messages: list[ChatMessage], ids: list[int], raw: bool, log: bool
) -> tuple[DraftSources, HistoryStore | None]:
    """What the decoder may draft from besides the prompt, and the store to record into."""
    settings, _ = load_settings()
    reads = decoder_class(decoder).reads_saved_chats and settings.draft_from_saved_chats
    store = HistoryStore() if log or reads else None
    saved = open_saved_chats(store, loaded) if reads else None
    start = 0 if raw else turn_start(loaded, messages, ids)
    return DraftSources(turn_start=start, saved=saved), store


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
    log: bool = True,
    colour_by: str = "length",
) -> int:
    """Returns the exit code: 0, or 130 when Ctrl+C stopped the answer."""
    chosen_sampling = sampling_for(decoder, temperature, sampling)
    loaded = load_model(model, load_options, progress)
    progress_done()
    engine = Engine(loaded, build_decoder(decoder, decoder_params, loaded))
    messages = messages_for(prompt, system)
    ids = raw_prompt_ids(loaded, prompt) if raw else chat_prompt_ids(loaded, messages)
    sources, store = _sources(loaded, decoder, messages, ids, raw, log)
    request = GenerationRequest(tuple(ids), max_tokens, stop, chosen_sampling, sources)
    colour = sys.stdout.isatty() and not as_json
    handle = engine.start(request)
    interrupted = threading.Event()
    runs = RunText()

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
                runs.add_step(event.text, len(event.tokens), event.source)
                if as_json:
                    print(_step_json(event), flush=True)
                else:
                    run_colour = (
                        COLOUR_BLIND_SAFE.colour(len(event.tokens), event.source, colour_by)
                        if colour
                        else None
                    )
                    sys.stdout.write(ansi(run_colour, event.text) if run_colour else event.text)
                    sys.stdout.flush()
            elif isinstance(event, DoneEvent):
                if as_json:
                    print(_done_json(event), flush=True)
                else:
                    sys.stdout.write("\n")
                    if event.finish_reason == "cancelled":
                        sys.stderr.write("[stopped]\n")
                if log and store is not None:
                    _record(store, prompt, event, runs, decoder)
    finally:
        signal.signal(signal.SIGINT, previous)
        if sources.saved is not None:
            if not interrupted.is_set():
                # a first build finishes (and is saved) after the answer, not at every ask
                sources.saved.wait_idle()
            sources.saved.close()
        if store is not None:
            store.close()
    return 130 if interrupted.is_set() else 0
