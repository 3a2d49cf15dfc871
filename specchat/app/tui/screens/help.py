"""F1: every key, every decoder from the registry (with why one is unavailable), the run colours."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from specchat.app.tui.session import ChatSession
from specchat.app.tui.widgets.legend import legend_text
from specchat.decoding.registry import DECODERS

KEYS = [
    ("Enter", "send"),
    ("Ctrl+J / Shift+Enter", "new line in the message"),
    ("Esc", "stop the answer now (what was generated stays, marked stopped); cancel an edit"),
    ("↑ (empty prompt)", "edit the last question: sending it starts a new branch"),
    ("Ctrl+↑ / Shift+Tab", "focus the messages; ↑/↓ move between them, Esc back to the prompt"),
    ("e (on a question)", "edit that question: sending it starts a new branch"),
    ("← / → (on a message)", "switch between its versions, marked ‹2/3›"),
    ("c / y (on a message)", "copy the message / its code block (again: the next block)"),
    ("Ctrl+R", "regenerate the last answer as a new version (‹2/2›); the old one stays"),
    ("Ctrl+K", "search all chats; Enter opens the chat at the message"),
    ("Ctrl+T", "run colours on/off (off: answers render as Markdown)"),
    ("Ctrl+F", "colour runs by tokens per step or by where their drafts came from"),
    ("Ctrl+O", "copy the last answer"),
    ("Ctrl+S", "export the chat to a Markdown file"),
    ("Ctrl+G", "decoder settings: parameters, temperature, top-k, top-p, seed"),
    ("Ctrl+B", "race: one prompt through 2–4 decoders or variants (pld:fixed_draft=10), replayed"),
    ("Ctrl+L / Ctrl+N", "chats: open, rename (r), delete (d, asks first) / new chat"),
    ("Ctrl+P", "command palette (every action, themes)"),
    ("F1", "this help"),
    ("Ctrl+Q", "quit"),
]


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,f1,q", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(self._decoders(), id="help-decoders")
            yield Static(self._keys(), id="help-keys")
            yield Static(id="help-legend")
            yield Static(Text("Esc closes", style="dim"), id="help-close")

    def on_mount(self) -> None:
        legend = Text("Run colours — ", style="bold")
        legend.append_text(legend_text(self.app.palette, True))
        legend.append("\n")
        legend.append_text(legend_text(self.app.palette, True, by="source"))
        self.query_one("#help-legend", Static).update(legend)

    def _decoders(self) -> Table:
        table = Table(title="Decoders", title_justify="left", expand=True, box=None)
        table.add_column("key", style="bold", no_wrap=True)
        table.add_column("decoder", no_wrap=True)
        table.add_column("what it does")
        session: ChatSession = self.app.session
        active = session.decoder_name
        for info in DECODERS.values():
            reason = session.unavailable_reason(info.name)
            what = Text(info.description)
            if reason:
                what.append(f" — unavailable: {reason}", style="italic")
            name = Text(info.name + (" ●" if info.name == active else ""))
            table.add_row(info.key.upper(), name, what)
        return table

    def _keys(self) -> Table:
        table = Table(title="Keys", title_justify="left", expand=True, box=None)
        table.add_column("key", style="bold", no_wrap=True)
        table.add_column("does")
        for key, does in KEYS:
            table.add_row(key, does)
        return table
