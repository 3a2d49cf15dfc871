"""Ctrl+K: search every chat (SQLite FTS5 through the history store). Results update as you type;
Enter (or Down) goes to the results, Enter there opens the chat at that message — in its branch.
The screen hands the chosen (chat id, message id) back to whoever pushed it."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from specchat.errors import HistoryError
from specchat.history import HistoryStore, SearchHit

_MARKS = ("\x02", "\x03")  # around each match in a snippet; never typed by anyone


def hit_text(hit: SearchHit) -> Text:
    """One result: the chat's title and who spoke, then the snippet with its matches bold."""
    text = Text()
    text.append(hit.title, style="bold")
    text.append(f" · {'you' if hit.role == 'user' else 'assistant'}\n", style="dim")
    snippet = " ".join(hit.snippet.split())
    for i, part in enumerate(snippet.replace(_MARKS[1], _MARKS[0]).split(_MARKS[0])):
        text.append(part, style="bold reverse" if i % 2 else "")
    return text


class SearchScreen(ModalScreen[tuple[int, int] | None]):
    BINDINGS = [
        Binding("escape", "close", "close"),
        Binding("down", "results", "results", show=False),
    ]

    def __init__(self, query: str = "") -> None:
        super().__init__()
        self._initial = query
        self.hits: list[SearchHit] = []

    @property
    def history(self) -> HistoryStore:
        return self.app.session.history

    def compose(self) -> ComposeResult:
        with Vertical(id="search"):
            yield Label(
                "Search all chats — type words · Enter/↓ results · Enter opens · Esc closes",
                id="search-title",
            )
            yield Input(value=self._initial, placeholder="words to find", id="search-input")
            yield OptionList(id="search-results")

    def on_mount(self) -> None:
        self.query_one(Input).focus()
        if self._initial:
            self._search(self._initial)

    @on(Input.Changed, "#search-input")
    def _changed(self, event: Input.Changed) -> None:
        self._search(event.value)

    def _search(self, text: str) -> None:
        results = self.query_one(OptionList)
        results.clear_options()
        try:
            self.hits = self.history.search(text, marks=_MARKS) if text.strip() else []
        except HistoryError as exc:
            self.hits = []
            self.notify(str(exc), severity="error")
        for index, hit in enumerate(self.hits):
            results.add_option(Option(hit_text(hit), id=str(index)))
        if text.strip() and not self.hits:
            results.add_option(Option(f"nothing found for {text.strip()!r}", disabled=True))
        if self.hits:
            results.highlighted = 0

    @on(Input.Submitted, "#search-input")
    def action_results(self) -> None:
        if self.hits:
            self.query_one(OptionList).focus()

    @on(OptionList.OptionSelected, "#search-results")
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is None:
            return
        hit = self.hits[int(event.option.id)]
        self.dismiss((hit.chat_id, hit.message_id))

    def action_close(self) -> None:
        if self.query_one(OptionList).has_focus:
            self.query_one(Input).focus()
            return
        self.dismiss(None)
