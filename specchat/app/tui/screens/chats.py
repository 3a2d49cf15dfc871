"""Ctrl+L: the stored chats — open, rename, delete (after a yes), new. The chat screen that opens
this list hands it how to open a chat and what to do when one is renamed."""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from specchat.app.tui.screens.confirm import ConfirmScreen
from specchat.errors import HistoryError
from specchat.history import HistoryStore
from specchat.wording import counted


class ChatListScreen(ModalScreen):
    BINDINGS = [
        Binding("escape", "close", "close"),
        Binding("enter", "open", "open", show=False),
        Binding("n", "new", "new"),
        Binding("r", "rename", "rename"),
        Binding("d,delete", "delete", "delete"),
    ]

    def __init__(
        self,
        current: int | None,
        open_chat: Callable[[int | None], Awaitable[None]],
        renamed: Callable[[int, str], None],
    ) -> None:
        super().__init__()
        self.current = current
        self._open_chat = open_chat  # None: a new, empty chat
        self._chat_renamed = renamed

    @property
    def history(self) -> HistoryStore:
        return self.app.session.history

    def compose(self) -> ComposeResult:
        with Vertical(id="chats"):
            yield Label(
                "Chats — Enter open · n new · r rename · d delete · Esc close", id="chats-title"
            )
            yield OptionList(id="chat-list")
            yield Input(id="rename", placeholder="new title, Enter saves, Esc cancels")

    def on_mount(self) -> None:
        self.query_one("#rename").display = False
        self._reload()
        self.query_one(OptionList).focus()

    def _reload(self) -> None:
        options = self.query_one(OptionList)
        options.clear_options()
        chats = self.history.list_chats()
        for chat in chats:
            when = dt.datetime.fromtimestamp(chat.updated).strftime("%Y-%m-%d %H:%M")
            mark = "● " if chat.id == self.current else "  "
            options.add_option(
                Option(
                    f"{mark}{chat.title}  ({counted(chat.messages, 'message')}, {when})",
                    id=str(chat.id),
                )
            )
        if not chats:
            options.add_option(Option("no chats yet — n starts one", id="none", disabled=True))
        else:
            options.highlighted = 0

    def _selected(self) -> int | None:
        options = self.query_one(OptionList)
        if options.highlighted is None:
            return None
        option = options.get_option_at_index(options.highlighted)
        return None if option.id in (None, "none") else int(option.id)

    def action_close(self) -> None:
        rename = self.query_one("#rename", Input)
        if rename.display:
            rename.display = False
            self.query_one(OptionList).focus()
            return
        self.dismiss()

    @on(OptionList.OptionSelected)
    async def action_open(self) -> None:
        chat_id = self._selected()
        if chat_id is None:
            return
        self.dismiss()
        await self._open_chat(chat_id)

    async def action_new(self) -> None:
        self.dismiss()
        await self._open_chat(None)

    def action_rename(self) -> None:
        chat_id = self._selected()
        if chat_id is None:
            return
        rename = self.query_one("#rename", Input)
        rename.value = self.history.chat_title(chat_id) or ""
        rename.display = True
        rename.focus()

    @on(Input.Submitted, "#rename")
    def _renamed(self, event: Input.Submitted) -> None:
        chat_id = self._selected()
        if chat_id is not None and event.value.strip():
            try:
                self.history.rename_chat(chat_id, event.value.strip())
            except HistoryError as exc:
                self.notify(str(exc), severity="error")
            else:
                self._chat_renamed(chat_id, event.value.strip())
        event.input.display = False
        self._reload()
        self.query_one(OptionList).focus()

    def action_delete(self) -> None:
        """Ask first: a deleted chat (every branch of it) cannot come back."""
        chat_id = self._selected()
        if chat_id is None:
            return
        summary = self.history.chat(chat_id)
        if summary is None:
            return
        question = f"Delete “{summary.title}” and its {counted(summary.messages, 'message')}?"

        async def answered(yes: bool | None) -> None:
            if yes:
                await self._delete(chat_id)

        self.app.push_screen(ConfirmScreen(question), answered)

    async def _delete(self, chat_id: int) -> None:
        try:
            self.history.delete_chat(chat_id)
        except HistoryError as exc:
            self.notify(str(exc), severity="error")
            return
        self.notify("chat deleted")
        if chat_id == self.current:
            self.current = None
            await self._open_chat(None)
        self._reload()
