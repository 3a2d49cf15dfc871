"""`specchat ask`: one answer streamed to stdout (coloured runs) or as JSON Lines events.

The exchange is recorded in the chat store as a chat of its own (as `llm` logs its prompts), so
later answers — in the TUI or another `ask` — can draft from it; `--no-log` skips that.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable

from specchat import cpu
from specchat.answer_steps import AnswerSteps, draft_figures
from specchat.answers import AnswerRecord, build_engine, open_model
from specchat.app.drafts_view import explanation
from specchat.app.foreground import AnswerOutput, generating
from specchat.backends.base import Backend, Exactness
from specchat.decoding.registry import decoder_class
from specchat.engine.events import DoneEvent, StepEvent
from specchat.history import DB_FILE, HistoryStore, StoredMessage
from specchat.locations import data_dir
from specchat.metrics.figures import not_target_distribution
from specchat.options import RunConfig
from specchat.prompting import messages_for
from specchat.run_config import chosen_decoder, run_params, sampling_for
from specchat.saved_chats import saved_chats_for
from specchat.themes.palette import COLOUR_BLIND_SAFE, ansi


def _step_json(event: StepEvent, rejected: str) -> str:
    """A step event; `rejected`: its rejected draft tokens as text."""
    return json.dumps(
        {
            "type": "step",
            "tokens": list(event.tokens),
            "text": event.text,
            "drafted": event.drafted,
            "accepted": event.accepted,
            "source": event.source,
            "rejected": list(event.rejected),
            "rejected_text": rejected,
            "depth": event.depth,
            "pass_seconds": round(event.pass_seconds, 6),
            # not None: soft matching verified the step, NOT sampled from the target's distribution
            "distance": None if event.distance is None else round(event.distance, 6),
            "decoder": event.decoder,
        },
        ensure_ascii=False,
    )


def _done_json(event: DoneEvent, decoder: str, exactness: Exactness | None, loaded: Backend) -> str:
    """The last line of `--json`: `decoder` ran last; `exactness`: whether the model's block
    logits are its one-token passes' (null on a remote server); `model`, `runtime`, `device` and
    `cpu`: what ran it, where, and on what CPU at which instruction-set level (null on a GPU or
    a server)."""
    return json.dumps(
        {
            "type": "done",
            "finish_reason": event.finish_reason,
            "prompt_token_ids": list(event.prompt_token_ids),
            "token_ids": list(event.token_ids),
            "text": event.text,
            "decoder": decoder,
            "stats": event.stats.as_dict(),
            "exactness": None if exactness is None else exactness.as_dict(),
            "model": loaded.model_name,
            "runtime": loaded.name,
            "device": loaded.device,
            "cpu": cpu.describe(loaded.level) if loaded.level else None,
            # null: sampled from the target's distribution (or greedy); else what soft matching did
            "distribution_note": not_target_distribution(event.stats.distance_per_token),
        },
        ensure_ascii=False,
    )


def _drafts_json(answer: AnswerSteps) -> str:
    """`--explain --json`: the answer's figures from its steps and its oracle (the steps
    themselves are the step events), before the done event."""
    return json.dumps(
        {
            "type": "drafts",
            "figures": draft_figures(answer).as_dict(),
            "pass_costs": [round(cost, 7) for cost in answer.pass_costs],
        }
    )


def _record(
    store: HistoryStore,
    question: StoredMessage,
    answer: AnswerRecord,
    title: str,
    system: str | None,
) -> None:
    """The exchange as a chat of its own, with its system prompt, titled by the question like
    the TUI titles a new chat (not by the files before it); its steps kept with the answer (the
    drafts view opens them)."""
    chat_id = store.new_chat(" ".join(title.split())[:48] or "ask", system)
    store.add_message(chat_id, question)
    store.add_message(chat_id, answer.stored())


def run_ask(
    prompt: str,
    config: RunConfig,
    *,
    raw_params: dict[str, object],
    system: str | None,
    stop: tuple[str, ...],
    raw: bool,
    as_json: bool,
    progress: Callable[[str], None],
    progress_done: Callable[[], None],
    log: bool = True,
    explain: bool = False,
    title: str | None = None,
    attached: list[tuple[str, int]] | None = None,
) -> int:
    """Returns the exit code: 0, 130 when Ctrl+C stopped the answer, 141 (as a shell says of a
    command SIGPIPE ended) when stdout's reader went away, 2 when a remote server broke the
    answer off (what arrived is printed first). No decoder in `config`: the backend's
    default (`run_config.chosen_decoder`); `raw_params` as `--param` gave them; `attached`: the
    files at the start of `prompt` (`attachments.attached_spans`), kept with the question."""
    decoder = config.decoder
    if decoder is not None:  # bad parameters fail before the model loads
        run_params([decoder], config, raw_params)
        sampling_for(decoder, config)
    loaded = open_model(config, progress=progress)
    progress_done()
    decoder = chosen_decoder(config, loaded)
    engine = build_engine(loaded, decoder, run_params([decoder], config, raw_params)[decoder])
    engine.one_answer = True
    # --no-log writes nothing: the saved chats are read only where a store already exists
    reads = decoder_class(decoder).reads_saved_chats and (data_dir() / DB_FILE).exists()
    store = HistoryStore() if log or reads else None
    saved = saved_chats_for(store, loaded, config, [decoder])
    request = engine.request(
        messages_for(prompt, system),
        max_tokens=config.max_tokens,
        sampling=sampling_for(decoder, config),
        stop=stop,
        raw=raw,
        saved=saved,
        end_loops=config.end_loops,
    )
    colour_by = config.colour_by
    exactness = engine.exactness()  # --json says how exact greedy-family decoders are here
    colour = sys.stdout.isatty() and not as_json
    failed = False
    answer = AnswerRecord(engine, decoder)

    # in this thread, where the model was loaded (foreground.py)
    with generating(engine, request) as (events, interrupted):
        out = AnswerOutput(interrupted)
        try:
            for event in events:
                if isinstance(event, StepEvent):
                    rejected = answer.add(event)
                    if not (event.tokens or event.text):
                        # a step that produced only EOS, or a beam step whose beams do not agree yet:
                        # nothing to show, and --json lists only steps that added something
                        continue
                    if as_json:
                        out.write(_step_json(event, rejected) + "\n")
                    else:
                        run_colour = (
                            COLOUR_BLIND_SAFE.colour(len(event.tokens), event.source, colour_by)
                            if colour
                            else None
                        )
                        out.write(ansi(run_colour, event.text) if run_colour else event.text)
                elif isinstance(event, DoneEvent):
                    steps = answer.finish(event)
                    if as_json:
                        if explain:
                            out.write(_drafts_json(steps) + "\n")
                        out.write(_done_json(event, answer.decoder, exactness, loaded) + "\n")
                    else:
                        out.write("\n")
                        if event.finish_reason == "cancelled" and not out.gone:
                            sys.stderr.write("[stopped]\n")
                        inexact = not_target_distribution(event.stats.distance_per_token)
                        if inexact:
                            sys.stderr.write(f"[{inexact}]\n")
                        if explain:
                            out.run(functools.partial(_explain, steps, event, colour_by))
                    if engine.note and not as_json:  # what a remote server reported
                        sys.stderr.write(f"[{server_summary(event, engine.note)}]\n")
                    if event.error:
                        sys.stderr.write(f"specchat: error: {event.error}\n")
                        failed = True
                    if log and store is not None:
                        question = StoredMessage("user", prompt, attached=list(attached or ()))
                        _record(store, question, answer, title or prompt, system)
        finally:
            if saved is not None:
                if not interrupted.is_set():
                    # a first build finishes (and is saved) after the answer, not at every ask
                    saved.wait_idle()
                saved.close()
            if store is not None:
                store.close()
    if out.gone:
        return 141
    if interrupted.is_set():
        return 130
    return 2 if failed else 0


def _explain(answer: AnswerSteps, done: DoneEvent, colour_by: str) -> None:
    """`--explain`: the answer's drafts after it (coloured on a terminal)."""
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=False)
    palette = COLOUR_BLIND_SAFE if console.is_terminal else None
    sys.stdout.write("\n")
    console.print(
        explanation(
            answer.steps, draft_figures(answer), done.stats, palette, colour_by, console.width
        )
    )


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
