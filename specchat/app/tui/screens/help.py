"""F1: every key, every decoder from the registry (with why one is unavailable), the run colours."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from specchat.app.session import ChatSession
from specchat.app.tui.keys import help_rows
from specchat.app.tui.widgets.legend import legend_text
from specchat.decoding.registry import DECODERS


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
        for key, does in help_rows():
            table.add_row(key, does)
        return table
