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
    AnswerStep,
    DecoderFailed,
    DecoderSwitched,
    LoadProgress,
    ModelFailed,
    ModelLoaded,
    RaceDone,
    RaceFailed,
    RaceFinished,
    RaceStarted,
    RaceStep,
)
from specchat.backends.base import Backend, ChatMessage
from specchat.decoding.base import Decoder
from specchat.decoding.engine import Engine, GenerationRequest
from specchat.decoding.engines import engine_for
from specchat.decoding.events import DoneEvent
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
from specchat.errors import SpecchatError
from specchat.hardware import physical_cores
from specchat.history import HistoryStore, StoredMessage
from specchat.models import LoadOptions, load_model
from specchat.prompting import chat_prompt_ids
from specchat.settings import Settings, save_settings


def ui_model_threads() -> int:
    """CPU threads for the model while the TUI runs: one core fewer than the machine has.

    The UI thread needs a core now and then; when every core also runs a model thread, the
    model's spinning thread pool stalls at each barrier whenever the UI preempts one of its
    threads. Measured on 2 cores (scripts/measure_ui_cost.py): 2 model threads give 31 tok/s in
    the TUI (95 headless), 1 thread gives 52 tok/s (53 headless).
    """
    return max(1, physical_cores() - 1)


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
    ) -> None:
        self.settings = settings
        self.history = history
        self.draft = draft  # --draft: the draft model of a draft-model decoder
        self.engine: Engine | None = None
        self.decoder_name = settings.decoder if settings.decoder in DECODERS else baseline_name()
        self.busy = False  # an answer or a race holds the engine
        self.racing = False
        self.ready_seconds: float | None = None  # from start-up to a usable model
        self._backend = backend
        self._owns_backend = backend is None
        self._save_settings_file = save_settings_file
        self._home: Screen | None = None
        self._started = time.perf_counter()

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
        """Load in a worker, leaving a core to the UI (see ui_model_threads)."""
        start = time.perf_counter()
        self._post(LoadProgress("loading model"))
        options = LoadOptions(
            backend=self.settings.backend,
            device=self.settings.device,
            threads=self.settings.threads or ui_model_threads(),
            base_url=self.settings.base_url,
            api_key_env=self.settings.api_key_env,
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
        return warning

    def close(self) -> None:
        """Stop any answer, close the history and a model this session loaded itself."""
        if self.engine is not None:
            self.engine.cancel()
        self.history.close()
        if self._owns_backend and self._backend is not None:
            close = getattr(self._backend, "close", None)
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
        work = partial(self._build_and_switch, name, self.busy)
        self._home.run_worker(work, name=f"switch to {name}", group="switch", thread=True)

    def _build_and_switch(self, name: str, mid_answer: bool) -> None:
        try:
            decoder = self._build(name)
        except Exception as exc:
            self._post(DecoderFailed(name, _error_text(exc)))
            return
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
        self, messages: Sequence[ChatMessage], max_tokens: int, sampling: SamplingParams
    ) -> GenerationRequest:
        """An answer to the conversation: prompt ids for a model specchat runs, the messages
        themselves for a remote server (which applies its own template)."""
        return GenerationRequest(
            self.prompt_ids(messages), max_tokens, (), sampling, tuple(messages)
        )

    def answer(
        self, answer_id: int, messages: Sequence[StoredMessage], cancel: threading.Event
    ) -> None:
        """Answer the conversation with the chosen decoder in a worker of the attached screen: an
        AnswerStep per engine step, then AnswerDone or AnswerFailed, all carrying `answer_id`.
        Setting `cancel` stops it at the next step boundary, also before the engine started.
        The session is busy until `answer_ended`."""
        self.busy = True
        chat = [ChatMessage(m.role, m.content) for m in messages]
        work = partial(
            self._generate,
            answer_id,
            chat,
            self.sampling(self.decoder_name),
            self.settings.max_tokens,
            cancel,
        )
        self._home.run_worker(work, name="answer", group="answer", exclusive=True, thread=True)

    def _generate(
        self,
        answer_id: int,
        chat: list[ChatMessage],
        sampling: SamplingParams,
        max_tokens: int,
        cancel: threading.Event,
    ) -> None:
        engine = self.engine
        worker = get_current_worker()
        try:
            request = self.request(chat, max_tokens, sampling)
            for event in engine.generate(request, cancel=(cancel, worker.cancelled_event)):
                if isinstance(event, DoneEvent):
                    self._post(AnswerDone(answer_id, event))
                else:
                    self._post(AnswerStep(answer_id, event))
        except Exception as exc:  # a bug or a runtime failure: show it, keep the app
            self._post(AnswerFailed(answer_id, _error_text(exc)))

    def answer_ended(self) -> None:
        self.busy = False

    # -- races ----------------------------------------------------------------------------------
    def race(self, screen: Screen, prompt: str, names: list[str], max_tokens: int) -> None:
        """Run `prompt` through each decoder in `names`, one after another on the one engine, in
        a worker of `screen`: per pane RaceStarted, RaceStep..., then RaceDone or RaceFailed;
        RaceFinished at the end. The chat's own decoder is restored after. The session is busy
        and racing until `race_ended`."""
        self.busy = True
        self.racing = True
        work = partial(self._race, screen, prompt, names, max_tokens)
        screen.run_worker(work, name="race", group="race", exclusive=True, thread=True)

    def _race(self, screen: Screen, prompt: str, names: list[str], max_tokens: int) -> None:
        engine = self.engine
        worker = get_current_worker()
        try:
            chat = [ChatMessage("user", prompt)]
            for pane, name in enumerate(names):
                if worker.is_cancelled:
                    break
                try:
                    engine.switch(self._build(name))
                    request = self.request(chat, max_tokens, self.sampling(name))
                    screen.post_message(RaceStarted(pane))
                    for event in engine.generate(request, cancel=worker.cancelled_event):
                        if isinstance(event, DoneEvent):
                            screen.post_message(RaceDone(pane, event))
                        else:
                            screen.post_message(RaceStep(pane, event))
                except SpecchatError as exc:
                    screen.post_message(RaceFailed(pane, str(exc)))
        finally:
            try:  # the chat goes on with its own decoder
                engine.switch(self._build(self.decoder_name))
            except SpecchatError:
                pass
            screen.post_message(RaceFinished())

    def stop_race(self) -> None:
        """Stop the running race's answer at its next step boundary."""
        if self.engine is not None:
            self.engine.cancel()

    def race_ended(self) -> None:
        self.busy = False
        self.racing = False

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

    def set_theme(self, name: str) -> str | None:
        if self.settings.theme == name:
            return None
        self.settings.theme = name
        return self.save_settings()
