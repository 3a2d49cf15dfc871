"""The chat app: themes, the chat session and the screens' shared actions.

The session (session.py) owns the model, the engine, settings, history and the decoder choice;
screens talk to it and never touch a backend. The model loads in a thread worker so the window
(and its progress line) appears at once.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from specchat.app.tui.screens.chat import ChatScreen
from specchat.app.tui.screens.help import HelpScreen
from specchat.app.tui.session import ChatSession
from specchat.backends.base import Backend
from specchat.decoding.registry import DECODERS
from specchat.history import HistoryStore
from specchat.settings import DEFAULT_THEME, Settings, load_settings
from specchat.themes.app_themes import APP_THEMES, palette_for
from specchat.themes.palette import RunPalette


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
        "screens/search.tcss",
        "screens/confirm.tcss",
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
        base_url: str | None = None,
        api_key_env: str | None = None,
        race_servers: list[str] | None = None,
        allow_pickle: bool = False,
        trust_remote_code: bool = False,
        backend: Backend | None = None,
        history: HistoryStore | None = None,
        chat_id: int | None = None,
        save_settings_file: bool = True,
    ) -> None:
        super().__init__()
        if settings is None:
            settings, settings_error = load_settings()
        self.settings_error = settings_error
        self.session = ChatSession(
            settings.with_overrides(
                model=model,
                backend=backend_name,
                device=device,
                base_url=base_url,
                api_key_env=api_key_env,
                race_servers=race_servers,
            ),
            history or HistoryStore(),
            draft=draft,
            backend=backend,
            save_settings_file=save_settings_file,
            allow_pickle=allow_pickle,
            trust_remote_code=trust_remote_code,
        )
        self.initial_chat_id = chat_id
        self.chat: ChatScreen | None = None
        for app_theme in APP_THEMES.values():
            self.register_theme(app_theme.theme)

    # -- lifecycle --------------------------------------------------------------------------
    def get_default_screen(self) -> Screen:
        # the decoder keys are read from the registry now, not when the module was imported
        self.chat = ChatScreen.with_decoder_keys()(chat_id=self.initial_chat_id)
        return self.chat

    def on_mount(self) -> None:
        theme = self.session.settings.theme
        if theme not in self.available_themes:
            self.notify(f"unknown theme {theme!r}; using {DEFAULT_THEME}", severity="warning")
            theme = DEFAULT_THEME
        self.theme = theme
        self.theme_changed_signal.subscribe(self, self._on_theme_changed)
        if self.settings_error:
            self.notify(self.settings_error, title="settings", severity="error", timeout=12)

    def on_unmount(self) -> None:
        self.session.close()

    # -- themes ----------------------------------------------------------------------------------
    @property
    def palette(self) -> RunPalette:
        return palette_for(self.current_theme)

    def _on_theme_changed(self, theme) -> None:
        error = self.session.set_theme(theme.name)
        if error:
            self.notify(error, severity="error")
        for screen in self.screen_stack:
            refresh = getattr(screen, "palette_changed", None)
            if refresh:
                self.call_later(refresh)

    # -- actions shared by screens ------------------------------------------------------------
    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        chat = self.chat
        if chat is None:
            return
        for title, help_text, callback in chat.palette_commands():
            yield SystemCommand(title, help_text, callback)
        for info in DECODERS.values():
            yield SystemCommand(
                f"Decoder: {info.name}",
                f"{info.key.upper()} — {info.description}",
                lambda name=info.name: chat.action_decoder(name),
            )
