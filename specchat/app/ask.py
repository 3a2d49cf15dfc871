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
from specchat.decoding.engine import GenerationRequest
from specchat.decoding.engines import engine_for
from specchat.decoding.events import DoneEvent, StepEvent
from specchat.decoding.registry import (
    build_decoder,
    checked_params,
    decoder_class,
    default_decoder,
    sampling_for,
    scoped_params,
)
from specchat.decoding.remote_engine import RemoteEngine
from specchat.decoding.sampling import SamplingParams
from specchat.decoding.sources import DraftSources
from specchat.errors import SpecchatError
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
    decoder: str | None,
    raw_params: dict[str, object],
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
    """Returns the exit code: 0, 130 when Ctrl+C stopped the answer, 2 when a remote server
    broke the answer off (what arrived is printed first). `decoder` None: the backend's default
    (the baseline; a remote server's own method); `raw_params` as `--param` gave them."""
    if decoder is not None:  # bad parameters fail before the model loads
        checked_params([decoder], raw_params)
        sampling_for(decoder, temperature, sampling)
    loaded = load_model(model, load_options, progress)
    progress_done()
    decoder = decoder or default_decoder(loaded)
    decoder_params = scoped_params([decoder], raw_params)[decoder]
    chosen_sampling = sampling_for(decoder, temperature, sampling)
    engine = engine_for(loaded, build_decoder(decoder, decoder_params, loaded))
    remote = isinstance(engine, RemoteEngine)
    messages = messages_for(prompt, system)
    if raw and remote:
        raise SpecchatError("--raw: a remote server answers chat messages, not raw text")
    ids = raw_prompt_ids(loaded, prompt) if raw else chat_prompt_ids(loaded, messages)
    if remote:  # the server drafts from what it keeps; the exchange is still recorded
        sources, store = DraftSources(), (HistoryStore() if log else None)
    else:
        sources, store = _sources(loaded, decoder, messages, ids, raw, log)
    request = GenerationRequest(
        tuple(ids), max_tokens, stop, chosen_sampling, sources, () if raw else tuple(messages)
    )
    colour = sys.stdout.isatty() and not as_json
    handle = engine.start(request)
    interrupted = threading.Event()
    failed = False
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
                if remote and not as_json:
                    sys.stderr.write(f"[{server_summary(event, engine.note)}]\n")
                if event.error:
                    sys.stderr.write(f"specchat: error: {event.error}\n")
                    failed = True
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
    if interrupted.is_set():
        return 130
    return 2 if failed else 0


def server_summary(event: DoneEvent, note: str) -> str:
    """What a remote server reported about the answer, in one line; figures it did not report
    are not shown."""
    stats = event.stats
    parts = []
    if stats.drafted:
        parts.append(
            f"{stats.accepted} of {stats.drafted} drafted tokens accepted "
            f"({stats.acceptance_rate:.0%})"
        )
    if stats.steps and stats.generated_tokens:
        parts.append(f"{stats.tokens_per_step:.2f} tokens per step")
    if stats.generated_tokens and stats.decode_seconds > 0:
        parts.append(f"{stats.tokens_per_second:.1f} tok/s")
    return "; ".join([*parts, note]) if note else "; ".join(parts)
