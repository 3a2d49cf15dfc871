"""The chat app: owns the loaded model, the engine, settings, history and themes.

Screens ask the app for the engine and the decoder choice; they never touch a backend. The model
loads in a thread worker so the window (and its progress line) appears at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from specchat.app.tui.figures import format_params
from specchat.app.tui.messages import (
    DecoderFailed,
    DecoderSwitched,
    LoadProgress,
    ModelFailed,
    ModelLoaded,
)
from specchat.decoding.engine import Engine
from specchat.decoding.registry import (
    DECODERS,
    baseline_name,
    build_decoder,
    sampling_for,
    unavailable_reason,
)
from specchat.decoding.sampling import SamplingParams
from specchat.errors import SpecchatError
from specchat.hardware import physical_cores
from specchat.history import HistoryStore
from specchat.settings import DEFAULT_THEME, Settings, load_settings, save_settings
from specchat.themes.app_themes import APP_THEMES, palette_for
from specchat.themes.palette import RunPalette


def ui_model_threads() -> int:
    """CPU threads for the model while the TUI runs: one core fewer than the machine has.

    The UI thread needs a core now and then; when every core also runs a model thread, the
    model's spinning thread pool stalls at each barrier whenever the UI preempts one of its
    threads. Measured on 2 cores (scripts/measure_ui_cost.py): 2 model threads give 31 tok/s in
    the TUI (95 headless), 1 thread gives 52 tok/s (53 headless).
    """
    return max(1, physical_cores() - 1)


class SpecchatApp(App):
    """specchat's TUI. Pass `backend` to reuse a loaded model (tests, snapshots)."""

    TITLE = "specchat"
    # one stylesheet per screen, all loaded up front (the default screen does not load its own)
    CSS_PATH = [
        "screens/chat.tcss",
        "screens/help.tcss",
        "screens/chats.tcss",
        "screens/decoder_settings.tcss",
        "screens/race.tcss",
    ]
    BINDINGS = [
        Binding("f1", "help", "help", key_display="F1", priority=True),
        Binding("ctrl+p", "command_palette", "commands", priority=True, show=False),
    ]

    def __init__(
        self,
        *,
        settings: Settings | None = None,
        settings_error: str | None = None,
        model: str | None = None,
        backend_name: str | None = None,
        device: str | None = None,
        draft: str | None = None,
        backend: object | None = None,
        history: HistoryStore | None = None,
        chat_id: int | None = None,
        save_settings_file: bool = True,
    ) -> None:
        super().__init__()
        self._started = time.perf_counter()
        if settings is None:
            settings, settings_error = load_settings()
        self.settings = settings.with_overrides(model=model, backend=backend_name, device=device)
        self.settings_error = settings_error
        self.draft = draft
        self._save_settings_file = save_settings_file
        self.history = history or HistoryStore()
        self.initial_chat_id = chat_id
        self.backend = backend
        self._owns_backend = backend is None
        self.engine: Engine | None = None
        self.decoder_name = (
            self.settings.decoder if self.settings.decoder in DECODERS else baseline_name()
        )
        self.busy = False  # an answer or a race holds the engine
        self.racing = False
        self.ready_seconds: float | None = None
        self.colour_runs = self.settings.colour_runs
        for app_theme in APP_THEMES.values():
            self.register_theme(app_theme.theme)

    # -- lifecycle --------------------------------------------------------------------------
    def get_default_screen(self) -> Screen:
        from specchat.app.tui.screens.chat import ChatScreen

        return ChatScreen(chat_id=self.initial_chat_id)

    def on_mount(self) -> None:
        theme = self.settings.theme
        if theme not in self.available_themes:
            self.notify(f"unknown theme {theme!r}; using {DEFAULT_THEME}", severity="warning")
            theme = DEFAULT_THEME
        self.theme = theme
        self.theme_changed_signal.subscribe(self, self._on_theme_changed)
        if self.settings_error:
            self.notify(self.settings_error, title="settings", severity="error", timeout=12)
        if self.backend is None:
            self._load_model()
        else:
            self._model_ready(self.backend)

    def on_unmount(self) -> None:
        if self.engine is not None:
            self.engine.cancel()
        self.history.close()
        if self._owns_backend and self.backend is not None:
            close = getattr(self.backend, "close", None)
            if close:
                close()

    @work(thread=True, exclusive=True, group="load")
    def _load_model(self) -> None:
        """Load in a worker, leaving a core to the UI (see ui_model_threads)."""
        from specchat.models import LoadOptions, load_model

        start = time.perf_counter()
        self.post_message(LoadProgress("loading model"))
        options = LoadOptions(
            backend=self.settings.backend,
            device=self.settings.device,
            threads=self.settings.threads or ui_model_threads(),
        )
        try:
            backend = load_model(
                self.settings.model,
                options,
                progress=lambda text: self.post_message(LoadProgress(text)),
            )
        except SpecchatError as exc:
            self.post_message(ModelFailed(str(exc)))
            return
        except Exception as exc:  # a runtime failing to load is shown, not a crash
            self.post_message(ModelFailed(f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(ModelLoaded(backend, time.perf_counter() - start))

    def on_load_progress(self, message: LoadProgress) -> None:
        self._chat().model_progress(f"{message.text}…")

    def on_model_failed(self, message: ModelFailed) -> None:
        self._chat().model_progress(f"model not loaded: {message.error}")
        self.notify(message.error, title="model", severity="error", timeout=30)

    def on_model_loaded(self, message: ModelLoaded) -> None:
        self._model_ready(message.backend)
        self.notify(f"model ready in {message.seconds:.2f} s", timeout=3)

    def _model_ready(self, backend: object) -> None:
        self.backend = backend
        name = self.decoder_name
        try:
            decoder = self.build(name)
        except SpecchatError as exc:
            self.notify(f"{exc}; using greedy", severity="warning")
            name = self.decoder_name = baseline_name()
            decoder = self.build(name)
        self.engine = Engine(backend, decoder)
        self.ready_seconds = time.perf_counter() - self._started
        self._chat().model_ready()

    def _chat(self):
        from specchat.app.tui.screens.chat import ChatScreen

        for screen in self.screen_stack:
            if isinstance(screen, ChatScreen):
                return screen
        raise RuntimeError("no chat screen")

    # -- decoders ---------------------------------------------------------------------------
    @property
    def model_label(self) -> str:
        if self.backend is None:
            return "no model"
        b = self.backend
        return f"{getattr(b, 'model_name', '?')} · {getattr(b, 'name', '?')} {getattr(b, 'device', '')}"

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
        params = dict(self.decoder_params(name))
        sampling = self.sampling(name)
        if not sampling.greedy:
            params["T"] = sampling.temperature
        return format_params(params)

    def build(self, name: str):
        return build_decoder(name, self.decoder_params(name), self.backend)

    def unavailable_reason(self, name: str) -> str | None:
        if self.backend is None:
            return None
        return unavailable_reason(name, self.backend, self.decoder_params(name))

    def action_decoder(self, name: str) -> None:
        """Switch decoder: mid-answer from the next step on, else for the next answer."""
        if name not in DECODERS:
            return
        if self.racing:
            self.notify("a race is running: Esc stops it", severity="warning")
            return
        reason = self.unavailable_reason(name)
        if reason:
            self.notify(f"{name} is unavailable: {reason}", severity="warning")
            return
        if self.engine is None:
            self.decoder_name = name
            self._chat().decoder_chosen(name, pending=False)
            return
        self._switch_decoder(name, self.busy)

    @work(thread=True, group="switch")
    def _switch_decoder(self, name: str, mid_answer: bool) -> None:
        # Building may load a draft model: off the event loop.
        try:
            decoder = self.build(name)
        except SpecchatError as exc:
            self.post_message(DecoderFailed(name, str(exc)))
            return
        except Exception as exc:
            self.post_message(DecoderFailed(name, f"{type(exc).__name__}: {exc}"))
            return
        self.engine.switch(decoder, self.sampling(name))
        self.post_message(DecoderSwitched(name, mid_answer))

    def on_decoder_switched(self, message: DecoderSwitched) -> None:
        self.decoder_name = message.name
        self._chat().decoder_chosen(message.name, pending=message.mid_answer)

    def on_decoder_failed(self, message: DecoderFailed) -> None:
        self.notify(message.error, title=message.name, severity="error")

    def set_decoder_settings(self, name: str, settings: dict[str, object]) -> None:
        """Store a decoder's parameters and sampling and apply them to the next answer."""
        self.settings.decoders[name] = settings
        self.persist_settings()
        if name == self.decoder_name and self.engine is not None:
            self._switch_decoder(name, self.busy)
        self._chat().decoder_chosen(self.decoder_name, pending=False)

    # -- themes and settings ---------------------------------------------------------------
    @property
    def palette(self) -> RunPalette:
        return palette_for(self.current_theme)

    def _on_theme_changed(self, theme) -> None:
        if self.settings.theme != theme.name:
            self.settings.theme = theme.name
            self.persist_settings()
        for screen in self.screen_stack:
            refresh = getattr(screen, "palette_changed", None)
            if refresh:
                self.call_later(refresh)

    def persist_settings(self) -> None:
        if not self._save_settings_file:
            return
        try:
            save_settings(self.settings)
        except OSError as exc:
            self.notify(f"could not save settings: {exc}", severity="error")

    # -- actions shared by screens ------------------------------------------------------------
    def action_help(self) -> None:
        from specchat.app.tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        chat = self._chat()
        for title, help_text, callback in chat.palette_commands():
            yield SystemCommand(title, help_text, callback)
        for info in DECODERS.values():
            yield SystemCommand(
                f"Decoder: {info.name}",
                f"{info.key.upper()} — {info.description}",
                lambda name=info.name: self.action_decoder(name),
            )


def export_dir() -> Path:
    from specchat.locations import data_dir

    path = data_dir() / "exports"
    path.mkdir(parents=True, exist_ok=True)
    return path
