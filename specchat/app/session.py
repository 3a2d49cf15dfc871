"""The chat session: the model, its engine, the decoder choice and the run's settings — what every
screen of the chat shares, and their only way to the model. Plain Python: no widgets, no workers.

Screens call it, and run in workers of their own what blocks: loading the model (`load`), building
a decoder, which may load a draft model (`switch_to`), answering (`answer`) and racing (`race`).
Those methods return or yield what happened; the screens post it to themselves. The session keeps
its own state as it goes (the decoder that runs, whether the engine is busy), so no screen reports
back to it. Only the session sends commands to the engine; no screen touches a backend.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from specchat.answers import AnswerRecord, build_engine, make_decoder, open_model
from specchat.backends.base import AnyBackend, ChatMessage, Exactness, ServerBackend
from specchat.decoding.base import Decoder
from specchat.decoding.registry import (
    DECODERS,
    baseline_name,
    default_decoder,
    speculates,
    unavailable_reason,
)
from specchat.decoding.sampling import SamplingParams
from specchat.engine.choice import prompt_ids
from specchat.engine.events import DoneEvent, StepEvent
from specchat.engine.protocol import AnswerEngine
from specchat.errors import SpecchatError
from specchat.evaluation.race import (
    RaceEvent,
    RaceJudged,
    RaceTurn,
    line_up_entrants,
    racing,
)
from specchat.evaluation.variants import DecoderVariant
from specchat.hardware import physical_cores
from specchat.history import HistoryStore
from specchat.models import LoadOptions, list_models, listing_facts, open_race_server
from specchat.options import COLOUR_MODES, RunConfig
from specchat.run_config import chosen_decoder, run_params, sampling_for
from specchat.saved_chats import SavedChatsIndex, saved_chats_for
from specchat.settings import save_settings


def ui_model_threads() -> int:
    """CPU threads for the model while the TUI runs: every physical core, as headless.

    It used to leave a core to the UI: when the UI thread preempts one of llama.cpp's spinning
    pool threads, the pool stalls at every barrier, and a UI that worked on every step preempted
    it all the time. Now the UI works a bounded few times a second whatever the model's pace
    (`tui/streaming.py`), so the model gets the cores; benchmarks/measure_ui_cost.py checks the
    chat against `specchat ask` in a real terminal (`threads` in settings.toml overrides this).
    """
    return physical_cores()


@dataclass(frozen=True)
class ModelChoice:
    """A model the chat's picker offers: the name --model takes, where it was found, whether
    the chat runs it now, and its family, quantization, size and runtimes (as `specchat models`
    says them), so a user sees what a switch would load before it loads."""

    spec: str
    where: str
    current: bool
    facts: str = ""


@dataclass(frozen=True)
class TurnsLeftOut:
    """The conversation outgrew the context window: the answer's prompt leaves out its
    `left_out` earliest messages."""

    left_out: int
    n_ctx: int


AnswerEvent = StepEvent | DoneEvent | TurnsLeftOut


class ChatSession:
    """One chat run's state between the screens and the engine. Pass `backend` to reuse a loaded
    model (tests, snapshots); else `load` loads the one the configuration names."""

    def __init__(
        self,
        settings: RunConfig,
        config: RunConfig,
        history: HistoryStore,
        *,
        backend: AnyBackend | None = None,
        save_settings_file: bool = True,
    ) -> None:
        self.settings = settings  # what the settings file holds: the user's changes go there
        self.config = config  # this run: the settings with the command line applied
        self.history = history
        self.backend = backend
        self.engine: AnswerEngine | None = None
        self.decoder_name = config.decoder if config.decoder in DECODERS else default_decoder()
        self.busy = False  # an answer or a race holds the engine
        self.racing = False
        self.ready_seconds: float | None = None  # from start-up to a usable model
        self.exactness: Exactness | None = None  # the model's, once loaded (None: a server's)
        self.saved_chats: SavedChatsIndex | None = None  # a draft source, built in the background
        self._owns_backend = backend is None
        self._save_settings_file = save_settings_file
        self._started = time.perf_counter()
        self._race_cancel: threading.Event | None = None
        self._race_servers: dict[str, ServerBackend] = {}  # server@URL race lanes, by URL
        # Decoder keys in the order pressed: each build holds a ticket, and only the newest key's
        # decoder reaches the engine, however long the earlier builds take.
        self._switch_lock = threading.Lock()
        self._switch_ticket = 0

    # -- the model ------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.engine is not None

    @property
    def needs_loading(self) -> bool:
        return self.backend is None

    @property
    def model_label(self) -> str:
        b = self.backend
        if b is None:
            return "no model"
        label = f"{b.model_name} · {b.name} {b.device}{f' {b.level}' if b.level else ''}"
        by_load = getattr(b, "threads_by_load", None)
        if by_load is not None and by_load.reduced:  # backends/threads_by_load.py
            label += f" · {by_load.threads} of {by_load.full} threads: the machine is busy"
        return f"{label} · {self.exactness.label}" if self.exactness is not None else label

    def load(self, progress: Callable[[str], None]) -> tuple[float, str | None]:
        """Load the configured model (blocking: a worker's job) and make its engine; returns the
        seconds it took and a warning when the chosen decoder could not be built. Raises what
        made the load fail."""
        start = time.perf_counter()
        progress("loading model")
        speculative = speculates(self.decoder_name)
        backend = open_model(
            self.config, threads=ui_model_threads(), speculative=speculative, progress=progress
        )
        warning = self.use_model(backend)
        return time.perf_counter() - start, warning

    def model_choices(self) -> list[ModelChoice]:
        """The models this machine has (`specchat models`' list), for the chat's picker; the one
        the chat runs is marked."""
        current = self.backend.model_name if self.backend is not None else ""
        choices = []
        for m in list_models(self.config.model_folders):
            family, quant, size, runs = listing_facts(m)
            facts = " · ".join(part for part in (family, quant, size) if part)
            choices.append(
                ModelChoice(
                    m.spec,
                    m.store or m.kind,
                    current in (m.spec, m.path.stem, m.path.name),
                    f"{facts} · runs on {runs}" if facts else f"runs on {runs}",
                )
            )
        return choices

    def switch_model(self, spec: str, progress: Callable[[str], None]) -> tuple[float, str | None]:
        """Load the model `spec` names (a name `specchat models` lists) in place of the current
        one, for this run (settings.toml keeps its own): blocking, on the model thread, so no
        answer runs while it loads. The old model stays until the new one is ready, and is
        closed then where this session loaded it; a failed load leaves it in use."""
        if self.busy:
            raise SpecchatError("an answer or a race is running: stop it (Esc) first")
        start = time.perf_counter()
        progress(f"loading {spec}")
        config = replace(self.config, model=spec)
        backend = open_model(
            config,
            threads=ui_model_threads(),
            speculative=speculates(self.decoder_name),
            progress=progress,
        )
        old, owned = self.backend, self._owns_backend
        self.config, self._owns_backend = config, True
        if self.engine is not None:
            self.engine.cancel()
        if self.saved_chats is not None:  # indexed with the old model's tokenizer
            self.saved_chats.close()
            self.saved_chats = None
        warning = self.use_model(backend)
        if owned and old is not None and old is not backend:
            old.close()
        return time.perf_counter() - start, warning

    def use_model(self, backend: AnyBackend) -> str | None:
        """Make the engine on `backend` with the chosen decoder, or with the backend's default
        (`registry.default_decoder`; a remote server's own method) when that one cannot be
        built (the returned warning says why, unless no decoder was chosen)."""
        # the model before's own default was not chosen either (a draft found for it)
        defaults = {default_decoder()}
        if self.backend is not None and self.backend is not backend:
            defaults.add(default_decoder(self.backend))
        self.backend = backend
        warning = None
        if not self.config.decoder and (
            self.decoder_name in defaults or self.unavailable_reason(self.decoder_name)
        ):  # none chosen: the backend's own default (a draft model's where one pays)
            self.decoder_name = chosen_decoder(self.config, backend)
        for fallback in (False, True):
            try:
                name = self.decoder_name
                self.engine = build_engine(backend, name, self.decoder_params(name))
                break
            except SpecchatError as exc:
                if fallback:
                    raise
                self.decoder_name = default_decoder(backend)
                warning = f"{exc}; using {self.decoder_name}"
        # what greedy-family decoders are here: bitwise greedy, or greedy to near-ties
        self.exactness = self.engine.exactness()
        self.ready_seconds = time.perf_counter() - self._started
        # loads (or builds) in its own thread: neither start-up nor the first token waits
        self.saved_chats = saved_chats_for(self.history, backend, self.config, DECODERS)
        return warning

    def close(self) -> None:
        """Stop any answer, close the history and a model this session loaded itself."""
        if self.engine is not None:
            self.engine.cancel()
        if self.saved_chats is not None:
            self.saved_chats.close()
        self.history.close()
        owned = [self.backend] if self._owns_backend and self.backend is not None else []
        for backend in owned + list(self._race_servers.values()):
            backend.close()

    # -- decoders -------------------------------------------------------------------------------
    def decoder_params(self, name: str) -> dict[str, object]:
        """Registry defaults, then the user's settings, then --draft for a draft-model decoder."""
        return run_params([name], self.config)[name]

    def sampling(self, name: str) -> SamplingParams:
        """The sampling an answer with `name` runs with; a temperature the decoder refuses
        falls back to the decoder's own default."""
        try:
            return sampling_for(name, self.config)
        except SpecchatError:
            return sampling_for(name, replace(self.config, temperature=None, decoders={}))

    def params_label(self, name: str) -> str:
        """The decoder's parameters set apart from its defaults; on a remote server, what it
        reports of its own method."""
        defaults = DECODERS[name].defaults()
        running = self.engine.decoder if self.engine is not None else None
        # the running decoder's own: what it found for itself (a draft model) shows too
        values = running.values if running is not None and running.name == name else None
        params = {
            k: Path(v).name if isinstance(v, str) and v.endswith(".gguf") else v
            for k, v in (values or self.decoder_params(name)).items()
            if v != defaults.get(k)
        }
        sampling = self.sampling(name)
        if not sampling.greedy:
            params["T"] = sampling.temperature
        label = " ".join(f"{k}={v}" for k, v in params.items())
        note = self.engine.note if self.engine is not None else ""
        return f"{label} · {note}" if label and note else label or note

    def unavailable_reason(self, name: str) -> str | None:
        if self.backend is None:
            return None
        return unavailable_reason(name, self.backend, self.decoder_params(name))

    def _build(self, name: str) -> Decoder:
        return make_decoder(name, self.decoder_params(name), self.backend)

    def choose_decoder(self, name: str) -> str | None:
        """Why `name` cannot be switched to now (a race runs, it is unavailable), else None. With
        no model yet it is simply chosen; with one, `switch_to` builds it."""
        if name not in DECODERS:
            return f"unknown decoder {name!r}"
        if self.racing:
            return "a race is running: Esc stops it"
        reason = self.unavailable_reason(name)
        if reason:
            return f"{name} is unavailable: {reason}"
        if self.engine is None:
            self.decoder_name = name
        return None

    def switch_ticket(self) -> int:
        """A ticket for the decoder key just pressed (see `switch_to`)."""
        with self._switch_lock:
            self._switch_ticket += 1
            return self._switch_ticket

    def switch_to(self, name: str, ticket: int) -> bool:
        """Build `name` (blocking: it may load a draft model) and hand it to the engine: from the
        next step on mid-answer, else for the next answer. False when a later key's ticket came
        first (that one wins). Raises what made the build fail."""
        decoder = self._build(name)
        with self._switch_lock:
            if ticket != self._switch_ticket:
                return False
            self.engine.switch(decoder, self.sampling(name))
            self.decoder_name = name
            return True

    def set_decoder_settings(
        self,
        name: str,
        values: dict[str, object],
        *,
        top_k: int,
        top_p: float,
        seed: int | None,
    ) -> str | None:
        """Store a decoder's parameters and the shared sampling settings (applied from the next
        answer on, once the decoder is switched to anew); returns why the settings file could not
        be written."""
        return self._change(
            decoders={**self.settings.decoders, name: values}, top_k=top_k, top_p=top_p, seed=seed
        )

    # -- answers --------------------------------------------------------------------------------
    def answer(
        self,
        messages: Sequence[ChatMessage],
        cancel: threading.Event,
        previous_answer: str | None = None,
    ) -> Iterator[AnswerEvent]:
        """Answer the conversation with the chosen decoder (iterate it in a worker): TurnsLeftOut
        when the conversation outgrew the context window (its oldest turns are left out of the
        prompt), a StepEvent per step, then the DoneEvent. The session is busy from this call
        until the DoneEvent (or the iterator's end, or its close); iterate it to the end all the
        same, so what the engine does after an answer is done. Setting `cancel` stops the
        answer at the next step boundary, also before the engine started. `previous_answer`,
        the answer being regenerated, is offered to the drafters as a source."""
        self.busy = True
        return self._answer(list(messages), cancel, previous_answer)

    def _answer(
        self, chat: list[ChatMessage], cancel: threading.Event, previous_answer: str | None
    ) -> Iterator[AnswerEvent]:
        done = False
        try:
            engine = self.engine
            max_tokens = self.config.max_tokens
            fitted = engine.fit(chat, max_tokens)
            if fitted.left_out:
                yield TurnsLeftOut(fitted.left_out, fitted.n_ctx)
            request = engine.request(
                fitted.messages,
                max_tokens=max_tokens,
                sampling=self.sampling(self.decoder_name),
                previous_answer=previous_answer,
                saved=self.saved_chats,
                end_loops=self.config.end_loops,
            )
            for event in engine.generate(request, cancel=cancel):
                if isinstance(event, DoneEvent):
                    # the answer is over: what the engine does after it (`keep_costs`) holds
                    # the model thread only, where the next answer or a model load queues
                    self.busy = False
                    done = True
                yield event
        finally:
            if not done:  # a later answer may be busy already: only this one's busy ends here
                self.busy = False

    def record(self) -> AnswerRecord:
        """What keeps the next answer as its events make it (feed it from the answer's worker)."""
        return AnswerRecord(self.engine, self.decoder_name)

    # -- races ----------------------------------------------------------------------------------
    def race_params(self, variant: DecoderVariant) -> dict[str, object]:
        """A race lane's parameters: the decoder's as the chat has them, the variant's on top."""
        return variant.with_params(self.decoder_params(variant.name))

    def race_unavailable(self, variant: DecoderVariant) -> str | None:
        if self.backend is None or variant.server is not None:  # a server answers when it runs
            return None
        return unavailable_reason(variant.name, self.backend, self.race_params(variant))

    @property
    def race_servers(self) -> list[str]:
        """Servers the race picker offers (settings' `race_servers`, `--race-server`)."""
        return list(self.config.race_servers)

    def _race_backend(self, variant: DecoderVariant) -> AnyBackend:
        """Where a lane runs: the chat's model, or the server a `server@URL` lane names
        (connected once, then kept; the chat's API key goes only to the chat's own server)."""
        url = variant.server
        if url is None:
            return self.backend
        if url not in self._race_servers:
            self._race_servers[url] = open_race_server(LoadOptions.of(self.config), url)
        return self._race_servers[url]

    def race(
        self, prompt: str, variants: list[DecoderVariant], max_tokens: int
    ) -> Iterator[RaceEvent | RaceJudged]:
        """Run `prompt` through each decoder (or variant) one after another (iterate it in a
        worker): the race's events as they happen (`evaluation.race`), every lane's steps kept
        for the replay, then RaceJudged. Each lane runs from an empty cache, as `specchat
        compare` times it. The session is busy and racing from this call until the iterator is
        exhausted; `stop_race` stops it at the next step boundary."""
        self.busy = self.racing = True
        self._race_cancel = threading.Event()
        return self._race(prompt, variants, max_tokens, self._race_cancel)

    def _race(
        self, prompt: str, variants: list[DecoderVariant], max_tokens: int, cancel: threading.Event
    ) -> Iterator[RaceEvent | RaceJudged]:
        try:
            messages = (ChatMessage("user", prompt),)
            # greedy: the turn's own sampling, against which greedy lanes are judged; each lane
            # runs with its decoder's sampling as the chat has it
            turn = RaceTurn(messages, prompt_ids(self.backend, messages), max_tokens)
            entrants = line_up_entrants(
                variants,
                self._race_backend,  # a server out of reach: its lane says so
                self.race_params,
                lambda variant: self.sampling(variant.name),
            )
            yield from racing(
                self.backend,
                turn,
                entrants,
                baseline=baseline_name(),
                cancel=cancel,
                keep_steps=True,
            )
        finally:
            # the lanes used engines of their own from an empty cache: the chat's engine must not
            # trust what it thought the cache held
            if self.engine is not None:
                self.engine.forget_cache()
            self.busy = self.racing = False
            self._race_cancel = None

    def stop_race(self) -> None:
        """Stop the running race at its next step boundary."""
        if self._race_cancel is not None:
            self._race_cancel.set()

    # -- settings -------------------------------------------------------------------------------
    def _change(self, **values: object) -> str | None:
        """Apply what the user changed to this run and to the settings file (never what the
        command line said); returns why the file could not be written."""
        self.settings = replace(self.settings, **values)
        self.config = replace(self.config, **values)
        if not self._save_settings_file:
            return None
        try:
            save_settings(self.settings)
        except OSError as exc:
            return f"could not save settings: {exc}"
        return None

    @property
    def colour_runs(self) -> bool:
        return self.config.colour_runs

    def toggle_colour_runs(self) -> str | None:
        return self._change(colour_runs=not self.config.colour_runs)

    @property
    def colour_by(self) -> str:
        return self.config.colour_by

    def toggle_colour_by(self) -> str | None:
        """Colour runs by tokens per step, or by where their drafts came from."""
        modes = COLOUR_MODES
        return self._change(colour_by=modes[(modes.index(self.config.colour_by) + 1) % len(modes)])

    def set_default_system_prompt(self, text: str | None) -> str | None:
        """The system prompt new chats start with (blank: none), kept in the settings file."""
        return self._change(system_prompt=text if text and text.strip() else None)

    def set_theme(self, name: str) -> str | None:
        if self.config.theme == name:
            return None
        return self._change(theme=name)
