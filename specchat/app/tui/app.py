"""The chat app: themes, the chat session and the screens' shared actions.

The session (`app/session.py`) owns the model, the engine, settings, history and the decoder choice;
screens talk to it and never touch a backend. The model loads in a thread worker so the window
(and its progress line) appears at once.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import App, SystemCommand
from textual.screen import Screen

from specchat.app.session import ChatSession
from specchat.app.tui.keys import APP_KEYS, bindings
from specchat.app.tui.screens.chat import ChatScreen
from specchat.app.tui.screens.help import HelpScreen
from specchat.backends.base import Backend
from specchat.history import HistoryStore
from specchat.options import CHAT, DEFAULT_THEME, RunConfig, resolve
from specchat.settings import load_settings
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
        "screens/drafts.tcss",
        "screens/models.tcss",
        "screens/system_prompt.tcss",
        "screens/file_picker.tcss",
    ]
    BINDINGS = bindings(APP_KEYS)

    def __init__(
        self,
        *,
        settings: RunConfig | None = None,
        config: RunConfig | None = None,
        settings_error: str | None = None,
        backend: Backend | None = None,
        history: HistoryStore | None = None,
        chat_id: int | None = None,
        save_settings_file: bool = True,
    ) -> None:
        """`settings`: what the settings file holds (read from it when not given), where the
        chat saves what the user changes; `config`: this run's configuration (the settings with
        the command line applied; the settings alone when not given)."""
        super().__init__()
        if settings is None:
            settings, settings_error = load_settings()
        self.settings_error = settings_error
        self.session = ChatSession(
            settings,
            config or resolve(settings, {}, CHAT),
            history or HistoryStore(),
            backend=backend,
            save_settings_file=save_settings_file,
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
        theme = self.session.config.theme
        if theme not in self.available_themes:
            self.notify(f"unknown theme {theme!r}; using {DEFAULT_THEME}", severity="warning")
            theme = DEFAULT_THEME
        self.theme = theme
        self.theme_changed_signal.subscribe(self, self._on_theme_changed)
        if self.settings_error:
            self.notify(self.settings_error, title="settings", severity="error", timeout=12)

    def on_unmount(self) -> None:
        self.session.close()

    async def action_quit(self) -> None:
        """Ctrl+Q: an answer still running is stopped and stored first, as Esc would keep it."""
        if self.chat is not None:
            await self.chat.stop_answer_and_keep()
        self.exit()

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
