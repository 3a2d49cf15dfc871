"""The chat session: what the screens share, and their only way to the model.

It owns the settings, the chat history, the loaded model with its engine, the decoder choice, and
whether an answer or a race holds the engine; it turns chat messages into prompt ids. It is not a
widget. Work that blocks (loading the model, building a decoder, which may load a draft model,
generating) runs in a thread worker of a screen and only posts messages (`messages.py`) to it: the
chat screen, attached on mount, hears about the model, decoder switches and its answers; a race
reports to the race screen that started it. Their handlers, on the event loop, tell the session what
changed (`use_model`, `decoder_switched`, `answer_ended`, `race_ended`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from functools import partial

from textual.screen import Screen
from textual.worker import get_current_worker

from specchat.app.tui.figures import format_params
from specchat.app.tui.messages import (
    AnswerDone,
    AnswerFailed,
    DecoderFailed,
    DecoderSwitched,
    LoadProgress,
    ModelFailed,
    ModelLoaded,
    RaceDone,
    RaceFailed,
    RaceFinished,
    RaceProgress,
    RaceStarted,
    TurnsLeftOut,
)
from specchat.app.tui.streaming import StepBuffer
from specchat.backends.base import Backend, ChatMessage
from specchat.decoding.base import Decoder
from specchat.decoding.engine import Engine, GenerationRequest
from specchat.decoding.engines import engine_for
from specchat.decoding.events import DoneEvent, StepEvent
from specchat.decoding.race import run_decoder
from specchat.decoding.registry import (
    DECODERS,
    baseline_name,
    build_decoder,
    default_decoder,
    sampling_for,
    unavailable_reason,
)
from specchat.decoding.remote_engine import RemoteEngine
from specchat.decoding.sampling import SamplingParams
from specchat.decoding.sources import NO_SOURCES, DraftSources
from specchat.decoding.suffix_tree import unavailable_reason as suffix_trees_missing
from specchat.decoding.variants import DecoderVariant
from specchat.errors import SpecchatError
from specchat.hardware import physical_cores
from specchat.history import HistoryStore, StoredMessage
from specchat.models import REMOTE_BACKEND, LoadOptions, load_model
from specchat.prompting import chat_prompt_ids, fit_to_context, turn_start
from specchat.saved_chats import SavedChatsIndex, open_saved_chats
from specchat.settings import COLOUR_MODES, Settings, save_settings

RACE_PROGRESS_SECONDS = 0.25  # how often a race pane hears its run's token count


def ui_model_threads() -> int:
    """CPU threads for the model while the TUI runs: every physical core, as headless.

    It used to leave a core to the UI: when the UI thread preempts one of llama.cpp's spinning
    pool threads, the pool stalls at every barrier, and a UI that worked on every step preempted
    it all the time (2 cores: 2 model threads gave 31 tok/s in the TUI against 95 headless, one
    thread 52 against 53). Now the UI works a bounded few times a second whatever the model's
    pace (`streaming.py`), so the model gets the cores; scripts/measure_ui_cost.py checks the
    chat against `specchat ask` in a real terminal (`threads` in settings.toml overrides this).
    """
    return physical_cores()


class RaceRecorder:
    """Keeps the step events of one race run (for its replay) and tells the pane its token
    count a few times a second: a sign of life that costs the run nothing."""

    def __init__(self, screen: Screen, pane: int) -> None:
        self.screen = screen
        self.pane = pane
        self.steps: list[StepEvent] = []
        self._tokens = 0
        self._last_post = time.monotonic()

    def add(self, event: StepEvent) -> None:
        self.steps.append(event)
        self._tokens += len(event.tokens)
        now = time.monotonic()
        if now - self._last_post >= RACE_PROGRESS_SECONDS:
            self._last_post = now
            self.screen.post_message(RaceProgress(self.pane, self._tokens))


def _error_text(exc: Exception) -> str:
    """Our own errors read as they are; anything else (a bug, a runtime failing) says its kind."""
    return str(exc) if isinstance(exc, SpecchatError) else f"{type(exc).__name__}: {exc}"


class ChatSession:
    """One TUI run's state between the screens and the engine. Pass `backend` to reuse a loaded
    model (tests, snapshots); else `start` loads the one the settings name."""

    def __init__(
        self,
        settings: Settings,
        history: HistoryStore,
        *,
        draft: str | None = None,
        backend: Backend | None = None,
        save_settings_file: bool = True,
        allow_pickle: bool = False,
        trust_remote_code: bool = False,
    ) -> None:
        self.settings = settings
        self.history = history
        self.draft = draft  # --draft: the draft model of a draft-model decoder
        # --allow-pickle / --trust-remote-code: consent for this run's loads, never saved
        self._trust = {"allow_pickle": allow_pickle, "trust_remote_code": trust_remote_code}
        self.engine: Engine | None = None
        self.decoder_name = settings.decoder if settings.decoder in DECODERS else baseline_name()
        self.busy = False  # an answer or a race holds the engine
        self.racing = False
        self.ready_seconds: float | None = None  # from start-up to a usable model
        self.saved_chats: SavedChatsIndex | None = None  # a draft source, built in the background
        self._backend = backend
        self._owns_backend = backend is None
        self._save_settings_file = save_settings_file
        self._home: Screen | None = None
        self._started = time.perf_counter()
        self._race_cancel: threading.Event | None = None
        self._race_servers: dict[str, Backend] = {}  # server@URL race panes, by URL
        # Decoder keys in the order pressed: each build worker holds a ticket, and only the newest
        # key's decoder reaches the engine, however long the earlier builds take.
        self._switch_lock = threading.Lock()
        self._switch_ticket = 0

    def attach(self, screen: Screen) -> None:
        """`screen` hears the session: the model's loading, decoder switches and answers post
        their messages to it, from workers of its own (the chat screen, on mount)."""
        self._home = screen

    def _post(self, message) -> None:
        if self._home is not None:
            self._home.post_message(message)

    # -- the model ------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.engine is not None

    @property
    def model_label(self) -> str:
        b = self._backend
        if b is None:
            return "no model"
        return f"{getattr(b, 'model_name', '?')} · {getattr(b, 'name', '?')} {getattr(b, 'device', '')}"

    def start(self) -> str | None:
        """Use the model handed in at once, returning a warning when the chosen decoder could not
        be built; or load the one the settings name in a worker of the attached screen, which gets
        LoadProgress, then ModelLoaded (for `use_model`) or ModelFailed."""
        if self.engine is not None:
            return None
        if self._backend is not None:
            return self.use_model(self._backend)
        self._home.run_worker(
            self._load, name="load model", group="load", exclusive=True, thread=True
        )
        return None

    def _load(self) -> None:
        """Load in a worker, with the threads of `ui_model_threads` unless the settings say."""
        start = time.perf_counter()
        self._post(LoadProgress("loading model"))
        options = LoadOptions(
            backend=self.settings.backend,
            device=self.settings.device,
            threads=self.settings.threads or ui_model_threads(),
            base_url=self.settings.base_url,
            api_key_env=self.settings.api_key_env,
            **self._trust,
        )
        try:
            backend = load_model(
                self.settings.model, options, progress=lambda text: self._post(LoadProgress(text))
            )
        except Exception as exc:  # a runtime failing to load is shown, not a crash
            self._post(ModelFailed(_error_text(exc)))
            return
        self._post(ModelLoaded(backend, time.perf_counter() - start))

    def use_model(self, backend: Backend) -> str | None:
        """Make the engine on `backend` with the chosen decoder, or with the backend's default
        (the baseline; a remote server's own method) when that one cannot be built (the returned
        warning says why, unless no decoder was chosen)."""
        self._backend = backend
        warning = None
        if not self.settings.decoder and self.unavailable_reason(self.decoder_name):
            self.decoder_name = default_decoder(backend)
        try:
            decoder = self._build(self.decoder_name)
        except SpecchatError as exc:
            self.decoder_name = default_decoder(backend)
            warning = f"{exc}; using {self.decoder_name}"
            decoder = self._build(self.decoder_name)
        self.engine = engine_for(backend, decoder)
        self.ready_seconds = time.perf_counter() - self._started
        if self.settings.draft_from_saved_chats and suffix_trees_missing() is None:
            # loads (or builds) in its own thread: neither start-up nor the first token waits
            self.saved_chats = open_saved_chats(self.history, backend)
        return warning

    def close(self) -> None:
        """Stop any answer, close the history and a model this session loaded itself."""
        if self.engine is not None:
            self.engine.cancel()
        if self.saved_chats is not None:
            self.saved_chats.close()
        self.history.close()
        owned = [self._backend] if self._owns_backend and self._backend is not None else []
        for backend in owned + list(self._race_servers.values()):
            close = getattr(backend, "close", None)
            if close:
                close()

    # -- decoders -------------------------------------------------------------------------------
    def decoder_params(self, name: str) -> dict[str, object]:
        """Registry defaults, then the user's settings, then --draft for a draft-model decoder."""
        info = DECODERS[name]
        params = {**info.defaults(), **self.settings.decoder_params(name)}
        if self.draft and info.needs_draft_model:
            params["draft"] = self.draft
        return {k: v for k, v in params.items() if k in {p.name for p in info.params}}

    def sampling(self, name: str) -> SamplingParams:
        """The sampling an answer with `name` runs with; a temperature the decoder refuses
        falls back to the decoder's own default."""
        base = SamplingParams(
            top_k=self.settings.top_k, top_p=self.settings.top_p, seed=self.settings.seed
        )
        try:
            return sampling_for(name, self.settings.temperature(name), base)
        except SpecchatError:
            return sampling_for(name, None, base)

    def params_label(self, name: str) -> str:
        """The decoder's parameters; on a remote server, what it reports of its own method."""
        params = dict(self.decoder_params(name))
        sampling = self.sampling(name)
        if not sampling.greedy:
            params["T"] = sampling.temperature
        label = format_params(params)
        if isinstance(self.engine, RemoteEngine) and self.engine.note:
            label = f"{label} · {self.engine.note}" if label else self.engine.note
        return label

    def unavailable_reason(self, name: str) -> str | None:
        if self._backend is None:
            return None
        return unavailable_reason(name, self._backend, self.decoder_params(name))

    def _build(self, name: str) -> Decoder:
        return build_decoder(name, self.decoder_params(name), self._backend)

    def choose_decoder(self, name: str) -> str | None:
        """Switch to `name`: mid-answer from the next step on, else for the next answer. Returns
        why not (a race runs, the decoder is unavailable); else the attached screen gets
        DecoderSwitched (for `decoder_switched`) once the decoder is built, or DecoderFailed."""
        if name not in DECODERS:
            return None
        if self.racing:
            return "a race is running: Esc stops it"
        reason = self.unavailable_reason(name)
        if reason:
            return f"{name} is unavailable: {reason}"
        if self.engine is None:
            self._post(DecoderSwitched(name, mid_answer=False))
        else:
            self._switch(name)
        return None

    def _switch(self, name: str) -> None:
        # Building may load a draft model: off the event loop.
        self._switch_ticket += 1
        work = partial(self._build_and_switch, name, self.busy, self._switch_ticket)
        self._home.run_worker(work, name=f"switch to {name}", group="switch", thread=True)

    def _build_and_switch(self, name: str, mid_answer: bool, ticket: int) -> None:
        try:
            decoder = self._build(name)
        except Exception as exc:
            self._post(DecoderFailed(name, _error_text(exc)))
            return
        with self._switch_lock:
            if ticket != self._switch_ticket:
                return  # a later key was pressed while this one built: that one wins
            self.engine.switch(decoder, self.sampling(name))
            self._post(DecoderSwitched(name, mid_answer))

    def decoder_switched(self, name: str) -> None:
        """The engine runs `name` from now on (or will, once the model is loaded)."""
        self.decoder_name = name

    def set_decoder_settings(
        self,
        name: str,
        values: dict[str, object],
        *,
        top_k: int,
        top_p: float,
        seed: int | None,
    ) -> str | None:
        """Store a decoder's parameters and the shared sampling settings, and apply them from the
        next answer on; returns why the settings file could not be written."""
        self.settings.decoders[name] = values
        self.settings.top_k, self.settings.top_p, self.settings.seed = top_k, top_p, seed
        error = self.save_settings()
        if name == self.decoder_name and self.engine is not None:
            self._switch(name)
        self._post(DecoderSwitched(self.decoder_name, mid_answer=False))  # its new parameters
        return error

    # -- answers --------------------------------------------------------------------------------
    def prompt_ids(self, messages: Sequence[ChatMessage]) -> tuple[int, ...]:
        """The conversation in the model's chat template, ending where the answer starts."""
        return tuple(chat_prompt_ids(self._backend, list(messages)))

    def request(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        sampling: SamplingParams,
        previous_answer: str | None = None,
    ) -> GenerationRequest:
        """An answer to the conversation: prompt ids and draft sources for a model specchat runs,
        the messages themselves for a remote server (which applies its own template)."""
        chat = list(messages)
        ids = self.prompt_ids(chat)
        remote = isinstance(self.engine, RemoteEngine)
        sources = NO_SOURCES if remote else self.draft_sources(chat, ids, previous_answer)
        return GenerationRequest(ids, max_tokens, (), sampling, sources, tuple(chat))

    def answer(
        self,
        answer_id: int,
        messages: Sequence[StoredMessage],
        cancel: threading.Event,
        previous_answer: str | None = None,
    ) -> StepBuffer:
        """Answer the conversation with the chosen decoder in a worker of the attached screen.
        Each engine step goes into the returned buffer, which the screen drains at its own pace
        (`streaming.py`: no message per step); AnswerDone or AnswerFailed, carrying `answer_id`,
        comes after the last step was put. Setting `cancel` stops it at the next step boundary,
        also before the engine started. `previous_answer`, the answer being regenerated, is
        offered to the drafters as a source. A conversation longer than the context window loses
        its oldest turns from the prompt (TurnsLeftOut says how many; `fit_to_context`). The
        session is busy until `answer_ended`."""
        self.busy = True
        steps = StepBuffer()
        # An answer stopped (or failed) before its first token stays in the transcript but not
        # in the prompt: an empty assistant turn would teach the model to answer with nothing.
        chat = [ChatMessage(m.role, m.content) for m in messages if m.content or m.role == "user"]
        work = partial(
            self._generate,
            answer_id,
            chat,
            self.sampling(self.decoder_name),
            self.settings.max_tokens,
            cancel,
            steps,
            previous_answer,
        )
        self._home.run_worker(work, name="answer", group="answer", exclusive=True, thread=True)
        return steps

    def _generate(
        self,
        answer_id: int,
        chat: list[ChatMessage],
        sampling: SamplingParams,
        max_tokens: int,
        cancel: threading.Event,
        steps: StepBuffer,
        previous_answer: str | None = None,
    ) -> None:
        engine = self.engine
        worker = get_current_worker()
        try:
            fitted = fit_to_context(self._backend, chat, max_tokens)
            if fitted.left_out:
                self._post(TurnsLeftOut(answer_id, fitted.left_out, fitted.n_ctx))
            request = self.request(fitted.messages, max_tokens, sampling, previous_answer)
            for event in engine.generate(request, cancel=(cancel, worker.cancelled_event)):
                if isinstance(event, DoneEvent):
                    self._post(AnswerDone(answer_id, event))
                else:
                    steps.put(event)
        except Exception as exc:  # a bug or a runtime failure: show it, keep the app
            self._post(AnswerFailed(answer_id, _error_text(exc)))

    def draft_sources(
        self, chat: list[ChatMessage], ids: tuple[int, ...], previous_answer: str | None = None
    ) -> DraftSources:
        """What drafters may copy from besides the prompt: where this turn starts, the answer
        being regenerated, the saved chats (when the settings allow)."""
        previous = ()
        if previous_answer:
            previous = tuple(self._backend.tokenize(previous_answer))
        return DraftSources(
            turn_start=turn_start(self._backend, chat, list(ids)),
            previous_answer=previous,
            saved=self.saved_chats,
        )

    def answer_ended(self) -> None:
        self.busy = False

    # -- races ----------------------------------------------------------------------------------
    def race_params(self, variant: DecoderVariant) -> dict[str, object]:
        """A race pane's parameters: the decoder's as the chat has them, the variant's on top."""
        return variant.with_params(self.decoder_params(variant.name))

    def race_unavailable(self, variant: DecoderVariant) -> str | None:
        if self._backend is None or variant.server is not None:  # a server answers when it runs
            return None
        return unavailable_reason(variant.name, self._backend, self.race_params(variant))

    @property
    def race_servers(self) -> list[str]:
        """Servers the race picker offers (settings' `race_servers`, `--race-server`)."""
        return list(self.settings.race_servers)

    def race_backend(self, variant: DecoderVariant) -> Backend:
        """Where a race pane runs: the chat's model, or the server a `server@URL` pane names
        (connected once, then kept; the chat's API key goes only to the chat's own server)."""
        url = variant.server
        if url is None:
            return self._backend
        if url not in self._race_servers:
            key_env = self.settings.api_key_env if url == self.settings.base_url else None
            options = LoadOptions(backend=REMOTE_BACKEND, base_url=url, api_key_env=key_env)
            self._race_servers[url] = load_model(None, options)
        return self._race_servers[url]

    def race(
        self, screen: Screen, prompt: str, variants: list[DecoderVariant], max_tokens: int
    ) -> None:
        """Run `prompt` through each decoder (or variant) in a worker of `screen`, one after
        another: per pane RaceStarted, RaceProgress now and then, then RaceDone with every step
        event, or RaceFailed; RaceFinished at the end. The session is busy and racing until
        `race_ended`."""
        self.busy = True
        self.racing = True
        self._race_cancel = threading.Event()
        work = partial(self._race, screen, prompt, variants, max_tokens, self._race_cancel)
        screen.run_worker(work, name="race", group="race", exclusive=True, thread=True)

    def _race(
        self,
        screen: Screen,
        prompt: str,
        variants: list[DecoderVariant],
        max_tokens: int,
        cancel: threading.Event,
    ) -> None:
        """Each pane is one `run_decoder` from an empty cache: the function `specchat compare`
        times, so a pane's figures are a compare run's. The screen hears little while a run is
        measured (a token count a few times a second) and gets the steps when it ends."""
        worker = get_current_worker()
        try:
            ids = self.prompt_ids([ChatMessage("user", prompt)])
            for pane, variant in enumerate(variants):
                if cancel.is_set() or worker.is_cancelled:
                    break
                screen.post_message(RaceStarted(pane))
                recorder = RaceRecorder(screen, pane)
                try:
                    done = run_decoder(
                        self.race_backend(variant),
                        variant.name,
                        self.race_params(variant),
                        list(ids),
                        max_tokens,
                        self.sampling(variant.name),
                        messages=(ChatMessage("user", prompt),),
                        on_step=recorder.add,
                        cancel=(cancel, worker.cancelled_event),
                    )
                except Exception as exc:  # a decoder that cannot run, or a bug: the pane says
                    screen.post_message(RaceFailed(pane, _error_text(exc)))
                else:
                    screen.post_message(RaceDone(pane, done, tuple(recorder.steps)))
        finally:
            screen.post_message(RaceFinished())

    def stop_race(self) -> None:
        """Stop the running race's answer at its next step boundary."""
        if self._race_cancel is not None:
            self._race_cancel.set()

    def race_ended(self) -> None:
        """The race's runs used engines of their own from an empty cache; the chat's engine
        forgets what it thought the cache held and goes on with its own decoder."""
        self.busy = False
        self.racing = False
        self._race_cancel = None
        if self.engine is not None:
            self.engine = Engine(self._backend, self.engine.decoder)

    # -- settings -------------------------------------------------------------------------------
    def save_settings(self) -> str | None:
        """Write the settings file; returns why it could not be written."""
        if not self._save_settings_file:
            return None
        try:
            save_settings(self.settings)
        except OSError as exc:
            return f"could not save settings: {exc}"
        return None

    @property
    def colour_runs(self) -> bool:
        return self.settings.colour_runs

    def toggle_colour_runs(self) -> str | None:
        self.settings.colour_runs = not self.settings.colour_runs
        return self.save_settings()

    @property
    def colour_by(self) -> str:
        return self.settings.colour_by

    def toggle_colour_by(self) -> str | None:
        """Colour runs by tokens per step, or by where their drafts came from."""
        modes = COLOUR_MODES
        self.settings.colour_by = modes[(modes.index(self.settings.colour_by) + 1) % len(modes)]
        return self.save_settings()

    def set_theme(self, name: str) -> str | None:
        if self.settings.theme == name:
            return None
        self.settings.theme = name
        return self.save_settings()
