"""The chat: transcript, legend, status line, input. The session runs the answer in a worker that
only posts messages; this screen turns them into widgets, figures and history rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Header

from specchat.app.tui.figures import Figures
from specchat.app.tui.messages import (
    AnswerDone,
    AnswerFailed,
    DecoderFailed,
    DecoderSwitched,
    LoadProgress,
    ModelFailed,
    ModelLoaded,
)
from specchat.app.tui.screens.chats import ChatListScreen
from specchat.app.tui.screens.decoder_settings import DecoderSettingsScreen
from specchat.app.tui.screens.race import RaceScreen
from specchat.app.tui.session import ChatSession
from specchat.app.tui.streaming import FLUSH_SECONDS, StepBuffer
from specchat.app.tui.widgets.legend import Legend
from specchat.app.tui.widgets.message import AssistantMessage, UserMessage
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.app.tui.widgets.status_bar import StatusBar
from specchat.decoding.registry import DECODERS
from specchat.history import StoredMessage
from specchat.locations import exports_dir


def chat_markdown(title: str, messages: list[StoredMessage]) -> str:
    """The chat as a Markdown document (export and copy)."""
    lines = [f"# {title}", ""]
    for message in messages:
        heading = "You" if message.role == "user" else f"Assistant ({message.decoder or '?'})"
        lines += [f"## {heading}", "", message.content.rstrip(), ""]
        if message.finish_reason == "cancelled":
            lines += ["*(stopped)*", ""]
    return "\n".join(lines)


def decoder_bindings() -> list[Binding]:
    """A key per decoder in the registry, switching to it (see `ChatScreen.with_decoder_keys`)."""
    return [
        Binding(
            info.key,
            f"decoder('{info.name}')",
            info.name,
            key_display=info.key.upper(),
            priority=True,
            show=not info.needs_server,  # a remote server's method: shown by the status line
        )
        for info in DECODERS.values()
    ]


class ChatScreen(Screen):
    BINDINGS = [
        Binding("escape", "cancel", "stop", priority=True),
        Binding("ctrl+r", "regenerate", "regenerate", priority=True, show=False),
        Binding("ctrl+t", "toggle_colour", "colours", priority=True),
        Binding("ctrl+f", "toggle_colour_by", "by source", priority=True, show=False),
        Binding("ctrl+o", "copy_answer", "copy answer", priority=True, show=False),
        Binding("ctrl+s", "export", "export", priority=True, show=False),
        Binding("ctrl+g", "decoder_settings", "settings", priority=True, show=False),
        Binding("ctrl+b", "race", "race", priority=True),
        Binding("ctrl+l", "chats", "chats", priority=True, show=False),
        Binding("ctrl+n", "new_chat", "new chat", priority=True, show=False),
        Binding("question_mark", "app.help", "help", show=False),
    ]

    @classmethod
    def with_decoder_keys(cls) -> type[ChatScreen]:
        """This screen with one key per decoder in the registry, first in the footer and with
        priority, so they work while the input has focus. Made when the app starts rather than
        at import, so a decoder registered after import has its key too."""

        class ChatScreenWithDecoderKeys(cls, inherit_bindings=False):
            BINDINGS = [*decoder_bindings(), *Screen.BINDINGS, *cls.BINDINGS]

        return ChatScreenWithDecoderKeys

    def __init__(self, chat_id: int | None = None) -> None:
        super().__init__()
        self.chat_id = chat_id
        self.messages: list[StoredMessage] = []
        self.figures = Figures()
        self._answer_id = 0
        self._answer: AssistantMessage | None = None
        self._answer_cancel: threading.Event | None = None  # the latest answer's stop token
        self._question_id: int | None = None  # the stored question the running answer answers
        self._answer_started = 0.0
        self._steps: StepBuffer | None = None  # the running answer's steps, not yet shown
        self._flush_timer: Timer | None = None

    @property
    def session(self) -> ChatSession:
        return self.app.session

    def compose(self) -> ComposeResult:
        yield Header(icon="≫")
        yield VerticalScroll(id="transcript")
        yield Legend(id="legend")
        yield StatusBar(id="status")
        yield PromptInput(id="prompt", placeholder="Ask something — Enter sends, Ctrl+J newline")
        # the palette key (Ctrl+P) is in F1's list: the footer keeps its room for the decoders
        yield Footer(compact=True, show_command_palette=False)

    async def on_mount(self) -> None:
        session = self.session
        session.attach(self)
        warning = session.start()
        if warning:
            self.notify(warning, severity="warning")
        self.query_one("#transcript").anchor()
        self.palette_changed_sync()
        if self.chat_id is not None:
            await self.open_chat(self.chat_id)
        self.query_one(PromptInput).focus()
        if not session.ready:
            self._status_line("loading model…")
        elif self.chat_id is None:
            self._model_ready()
        else:
            self._show_status()

    # -- the session's messages ---------------------------------------------------------------
    def on_load_progress(self, message: LoadProgress) -> None:
        self._status_line(f"{message.text}…")

    def on_model_failed(self, message: ModelFailed) -> None:
        self._status_line(f"model not loaded: {message.error}")
        self.notify(message.error, title="model", severity="error", timeout=30)

    def on_model_loaded(self, message: ModelLoaded) -> None:
        warning = self.session.use_model(message.backend)
        if warning:
            self.notify(warning, severity="warning")
        self._model_ready()
        self.notify(f"model ready in {message.seconds:.2f} s", timeout=3)

    def on_decoder_switched(self, message: DecoderSwitched) -> None:
        session = self.session
        session.decoder_switched(message.name)
        if message.mid_answer and session.busy:
            self.figures.pending = message.name
        else:
            self.figures.pending = None
            if not session.busy:
                self.figures.decoder = message.name
        self.figures.params = session.params_label(message.name)
        self._show_status()

    def on_decoder_failed(self, message: DecoderFailed) -> None:
        self.notify(message.error, title=message.name, severity="error")

    def _model_ready(self) -> None:
        self.figures.decoder = self.session.decoder_name
        self.figures.params = self.session.params_label(self.session.decoder_name)
        self._show_status()

    def _status_line(self, text: str) -> None:
        self.query_one(StatusBar).message(text)

    def _show_status(self) -> None:
        self.query_one(StatusBar).show(self.figures, self.session.model_label)

    def palette_changed_sync(self) -> None:
        session = self.session
        self.query_one(Legend).show(self.app.palette, session.colour_runs, session.colour_by)

    async def palette_changed(self) -> None:
        self.palette_changed_sync()
        session = self.session
        for message in self.query(AssistantMessage):
            await message.set_colour(session.colour_runs, self.app.palette, session.colour_by)

    # -- opening chats ----------------------------------------------------------------------
    async def open_chat(self, chat_id: int | None) -> None:
        """Show a stored chat (or an empty one for None); figures of its last answer."""
        if self.session.busy:
            self.notify("stop the answer first (Esc)", severity="warning")
            return
        self.chat_id = chat_id
        transcript = self.query_one("#transcript", VerticalScroll)
        await transcript.remove_children()
        history = self.session.history
        self.messages = history.messages(chat_id) if chat_id is not None else []
        widgets = [self._widget_for(m) for m in self.messages]
        if widgets:
            await transcript.mount_all(widgets)
        transcript.anchor()
        self.sub_title = (history.chat_title(chat_id) or "") if chat_id else "new chat"
        last = next((m for m in reversed(self.messages) if m.role == "assistant"), None)
        if last is not None:
            self.figures = Figures.stored(last)
        else:
            name = self.session.decoder_name
            self.figures = Figures(decoder=name, params=self.session.params_label(name))
        if self.session.ready:
            self._show_status()

    def _widget_for(self, message: StoredMessage):
        if message.role == "user":
            return UserMessage(message.content)
        return AssistantMessage(
            palette=self.app.palette,
            colour=self.session.colour_runs,
            stored=message,
            colour_by=self.session.colour_by,
        )

    # -- sending and streaming -----------------------------------------------------------------
    @on(PromptInput.Submitted)
    async def _submitted(self, event: PromptInput.Submitted) -> None:
        if not self.session.ready:
            self.notify("the model is still loading", severity="warning")
            return
        if self.session.busy:
            self.notify("an answer is running: wait, or Esc to stop it", severity="warning")
            return
        self.query_one(PromptInput).clear()
        await self.send(event.text.strip())

    async def send(self, text: str) -> None:
        """Add the user's turn and start the answer."""
        cancel = self._new_answer_token()
        if self.chat_id is None:
            title = " ".join(text.split())[:48] or "New chat"
            self.chat_id = self.session.history.new_chat(title)
            self.sub_title = title
        message = StoredMessage("user", text)
        self._question_id = self.session.history.add_message(self.chat_id, message)
        self.messages.append(message)
        await self.query_one("#transcript").mount(UserMessage(text))
        await self._start_answer(cancel)

    def _new_answer_token(self) -> threading.Event:
        """The next answer's stop token, made before anything awaits: Esc sets it, and the
        engine reads it between steps however late the worker starts, so no Esc is lost."""
        self._answer_cancel = threading.Event()
        return self._answer_cancel

    async def _start_answer(
        self, cancel: threading.Event, previous_answer: str | None = None
    ) -> None:
        session = self.session
        name = session.decoder_name
        self._answer_id += 1
        self._answer = AssistantMessage(
            palette=self.app.palette, colour=session.colour_runs, colour_by=session.colour_by
        )
        self._answer.decoder = name
        transcript = self.query_one("#transcript", VerticalScroll)
        await transcript.mount(self._answer)
        self.figures = Figures(decoder=name, params=session.params_label(name), streaming=True)
        self._answer_started = time.monotonic()
        self._steps = session.answer(self._answer_id, self.messages, cancel, previous_answer)
        self._flush_timer = self.set_interval(FLUSH_SECONDS, self._flush_steps)
        self._show_status()

    async def _flush_steps(self) -> None:
        """Show every step the worker buffered since the last flush: one repaint of the answer
        and one of the status bar, however many steps came (see `streaming.py`)."""
        if self._steps is None or self._answer is None:
            return
        events = self._steps.take()
        if not events:
            return
        await self._answer.add_steps(events)
        for event in events:
            self.figures.add(event)
        self.figures.elapsed = time.monotonic() - self._answer_started
        self._show_status()

    def _stop_flushing(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.stop()
            self._flush_timer = None

    async def on_answer_done(self, message: AnswerDone) -> None:
        if message.answer_id != self._answer_id or self._answer is None:
            return
        self._question_id = None  # answered: it stays
        self._stop_flushing()
        await self._flush_steps()  # the worker put every step before it posted this
        self._steps = None
        event = message.event
        answer, self._answer = self._answer, None
        await answer.finish(event.text, event.finish_reason)
        elapsed = round(time.monotonic() - self._answer_started, 3)
        decoder = answer.decoder or self.figures.decoder
        self.figures.finished(decoder, event.finish_reason, elapsed)
        # the engine's own figures: equal to the steps' for a local model, a remote server's
        # totals where it reports only those
        self.figures.stats = event.stats
        self.figures.params = self.session.params_label(decoder)
        if event.error:
            self.notify(event.error, title="answer broke off", severity="error", timeout=15)
        stored = StoredMessage(
            "assistant",
            answer.text,
            decoder=decoder,
            finish_reason=event.finish_reason,
            stats=event.stats,
            runs=list(answer.runs.runs),
            elapsed_seconds=elapsed,
            params=self.figures.params,
        )
        if self.chat_id is not None:
            self.session.history.add_message(self.chat_id, stored)
        answer.stored = stored
        self.messages.append(stored)
        self.session.answer_ended()
        self._show_status()

    async def on_answer_failed(self, message: AnswerFailed) -> None:
        if message.answer_id != self._answer_id:
            return
        self._stop_flushing()
        self._steps = None
        if self._answer is not None:
            await self._answer.remove()
            self._answer = None
        self.session.answer_ended()
        self.figures.streaming = False
        self._show_status()
        self._take_back_question()
        self.notify(message.error, title="answer failed", severity="error", timeout=15)

    def _take_back_question(self) -> None:
        """An answer that failed before it began (a prompt past the context window) leaves its
        question unanswered: kept, it would be part of every later prompt and fail each of them.
        The question leaves the chat and the store and goes back into the input to be edited."""
        question_id, self._question_id = self._question_id, None
        if question_id is None or not self.messages or self.messages[-1].role != "user":
            return  # a regenerated answer failed: its question was answered before
        question = self.messages.pop()
        self.session.history.delete_message(question_id)
        users = self.query(UserMessage)
        if users:
            users.last().remove()
        prompt = self.query_one(PromptInput)
        if not prompt.text.strip():
            prompt.insert(question.content)

    # -- actions ---------------------------------------------------------------------------------
    def action_cancel(self) -> None:
        """Stop the answer at its next step boundary — also when the engine has not started it
        yet; what was generated stays, marked as stopped. Once it ended, this does nothing."""
        if self._answer_cancel is not None:
            self._answer_cancel.set()

    async def action_regenerate(self) -> None:
        if not self.session.ready or self.session.busy:
            self.notify("nothing to regenerate right now", severity="warning")
            return
        if not self.messages:
            self.notify("no answer to regenerate yet", severity="warning")
            return
        cancel = self._new_answer_token()
        previous = None
        if self.messages[-1].role == "assistant":
            last = self.messages.pop()
            previous = last.content  # a draft source: greedy re-verifies it in long passes
            if last.id is not None:
                self.session.history.delete_message(last.id)
            answers = self.query(AssistantMessage)
            if answers:
                await answers.last().remove()
        await self._start_answer(cancel, previous)

    async def action_toggle_colour(self) -> None:
        error = self.session.toggle_colour_runs()
        if error:
            self.notify(error, severity="error")
        await self.palette_changed()

    async def action_toggle_colour_by(self) -> None:
        """Colour runs by tokens per step or by where their drafts came from (turning the
        colours on if they were off)."""
        error = self.session.toggle_colour_by()
        if not self.session.colour_runs:
            error = self.session.toggle_colour_runs() or error
        if error:
            self.notify(error, severity="error")
        await self.palette_changed()

    def _last_answer(self) -> str | None:
        for message in reversed(self.messages):
            if message.role == "assistant":
                return message.content
        return None

    def action_copy_answer(self) -> None:
        text = self._last_answer()
        if text is None:
            self.notify("no answer to copy yet", severity="warning")
            return
        self.app.copy_to_clipboard(text)
        self.notify("last answer copied to the clipboard")

    def _title(self) -> str:
        if self.chat_id is None:
            return "specchat chat"
        return self.session.history.chat_title(self.chat_id) or "specchat chat"

    def action_copy_chat(self) -> None:
        self.app.copy_to_clipboard(chat_markdown(self._title(), self.messages))
        self.notify("the whole chat copied to the clipboard (Markdown)")

    def action_export(self) -> Path | None:
        if not self.messages:
            self.notify("nothing to export yet", severity="warning")
            return None
        stem = "".join(c if c.isalnum() else "-" for c in self._title().lower()).strip("-")[:40]
        path = exports_dir() / f"{self.chat_id or 0:04d}-{stem or 'chat'}.md"
        path.write_text(chat_markdown(self._title(), self.messages), encoding="utf-8")
        self.notify(f"exported to {path}", timeout=8)
        return path

    async def action_new_chat(self) -> None:
        await self.open_chat(None)

    def action_chats(self) -> None:
        if self.session.busy:
            self.notify("stop the answer first (Esc)", severity="warning")
            return
        self.app.push_screen(ChatListScreen(self.chat_id, self.open_chat, self._chat_renamed))

    def _chat_renamed(self, chat_id: int, title: str) -> None:
        if chat_id == self.chat_id:
            self.sub_title = title

    def action_decoder_settings(self) -> None:
        self.app.push_screen(DecoderSettingsScreen(self.session.decoder_name))

    def action_decoder(self, name: str) -> None:
        """Switch decoder: mid-answer from the next step on, else for the next answer."""
        refused = self.session.choose_decoder(name)
        if refused:
            self.notify(refused, severity="warning")

    def action_race(self) -> None:
        if self.session.busy:
            self.notify("stop the answer first (Esc)", severity="warning")
            return
        last_prompt = next((m.content for m in reversed(self.messages) if m.role == "user"), "")
        self.app.push_screen(RaceScreen(last_prompt))

    def palette_commands(self) -> list[tuple[str, str, Callable]]:
        """Every action of this screen, for the command palette."""
        return [
            ("Stop the answer", "Esc — keep what was generated", self.action_cancel),
            ("Regenerate the last answer", "Ctrl+R", self.action_regenerate),
            ("Toggle run colours", "Ctrl+T — colour multi-token steps", self.action_toggle_colour),
            (
                "Colour runs by length or source",
                "Ctrl+F — tokens per step, or where the drafts came from",
                self.action_toggle_colour_by,
            ),
            ("Copy the last answer", "Ctrl+O — to the clipboard", self.action_copy_answer),
            ("Copy the whole chat", "as Markdown, to the clipboard", self.action_copy_chat),
            (
                "Export the chat to Markdown",
                "Ctrl+S — a file under the data dir",
                self.action_export,
            ),
            ("Decoder settings", "Ctrl+G — parameters and sampling", self.action_decoder_settings),
            ("Race decoders", "Ctrl+B — one prompt through 2–4 decoders", self.action_race),
            ("Chats", "Ctrl+L — open, rename, delete", self.action_chats),
            ("New chat", "Ctrl+N", self.action_new_chat),
            ("Help", "F1 — keys and decoders", self.app.action_help),
        ]
