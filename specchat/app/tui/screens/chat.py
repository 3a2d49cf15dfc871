"""The chat: transcript, legend, status line, input. The session runs the answer in a worker that
only posts messages; this screen turns them into widgets, figures and history rows.

The transcript is the chat's current branch. Up in an empty prompt edits the last question (or
`e` on a focused question edits that one): sending it adds a sibling after the same message, a
new branch; Ctrl+R adds a sibling answer. ←/→ on a focused message switch between its siblings
(marked ‹i/n›). Messages take focus with Ctrl+Up or Shift+Tab; `c` copies one, `y` its code."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Header, Static

from specchat.app.chat_export import chat_markdown
from specchat.app.tui.clipboard import code_blocks, copy_to_clipboard
from specchat.app.tui.figures import Figures
from specchat.app.tui.messages import (
    AnswerDone,
    AnswerFailed,
    DecoderFailed,
    DecoderSwitched,
    LoadProgress,
    ModelFailed,
    ModelLoaded,
    TurnsLeftOut,
)
from specchat.app.tui.screens.chats import ChatListScreen
from specchat.app.tui.screens.decoder_settings import DecoderSettingsScreen
from specchat.app.tui.screens.race import RaceScreen
from specchat.app.tui.screens.search import SearchScreen
from specchat.app.tui.session import ChatSession
from specchat.app.tui.streaming import FlushPacer, StepBuffer
from specchat.app.tui.widgets.legend import Legend
from specchat.app.tui.widgets.message import AssistantMessage, Turn, UserMessage
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.app.tui.widgets.status_bar import StatusBar
from specchat.decoding.registry import DECODERS
from specchat.errors import HistoryError
from specchat.history import StoredMessage
from specchat.locations import exports_dir


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
        Binding("ctrl+k", "search", "search", priority=True, show=False),
        Binding("ctrl+up", "focus_message(-1)", "messages", priority=True, show=False),
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
        self._pacer = FlushPacer()  # a new one per answer
        self._editing: StoredMessage | None = None  # the question being edited (a fork on send)
        self._code_block = 0  # which code block `y` copies next from the focused message

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
    async def open_chat(self, chat_id: int | None, focus: int | None = None) -> None:
        """Show a stored chat (or an empty one for None) in its current branch; figures of its
        last answer. `focus`: the id of a message to focus (a search hit, a switched branch)."""
        if self.session.busy:
            self.notify("stop the answer first (Esc)", severity="warning")
            return
        self._stop_editing()
        history = self.session.history
        try:
            messages = history.messages(chat_id) if chat_id is not None else []
        except HistoryError as exc:
            self.notify(str(exc), title="chats", severity="error")
            return
        self.chat_id = chat_id
        self.messages = messages
        transcript = self.query_one("#transcript", VerticalScroll)
        await transcript.remove_children()
        widgets = [self._widget_for(m) for m in self.messages]
        if widgets:
            await transcript.mount_all(widgets)
        transcript.anchor()
        target = next((w for w in widgets if w.stored is not None and w.stored.id == focus), None)
        if target is not None:
            transcript.anchor(False)
            target.focus()
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
            return UserMessage(message.content, message)
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
        if self._editing is not None:
            await self._fork(self._editing, event.text.strip())
        else:
            await self.send(event.text.strip())

    async def send(self, text: str) -> None:
        """Add the user's turn after the last message shown and start the answer."""
        cancel = self._new_answer_token()
        history = self.session.history
        message = StoredMessage("user", text)
        try:
            if self.chat_id is None:
                title = " ".join(text.split())[:48] or "New chat"
                self.chat_id = history.new_chat(title)
                self.sub_title = title
            self._question_id = history.add_message(
                self.chat_id, message, parent_id=self._last_id()
            )
        except HistoryError as exc:  # nothing sent: the question goes back to the prompt
            self.notify(str(exc), title="not sent", severity="error", timeout=15)
            self.query_one(PromptInput).insert(text)
            return
        self.messages.append(message)
        transcript = self.query_one("#transcript", VerticalScroll)
        await transcript.mount(UserMessage(text, message))
        transcript.anchor()
        await self._start_answer(cancel)

    def _last_id(self) -> int | None:
        """The message a new one follows: the last one shown (None: the chat's first)."""
        return self.messages[-1].id if self.messages else None

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
        self._pacer = FlushPacer()
        self._flush_timer = self.set_timer(
            self._pacer.interval, partial(self._paced_flush, self._answer_id)
        )
        self._show_status()

    async def _paced_flush(self, answer_id: int) -> None:
        """A flush, and the next one at the pacer's interval (see `streaming.py`), while answer
        `answer_id` streams."""
        if self._steps is None or answer_id != self._answer_id:
            return
        await self._flush_steps()
        if self._steps is not None and answer_id == self._answer_id:
            self._flush_timer = self.set_timer(
                self._pacer.next_interval(), partial(self._paced_flush, answer_id)
            )

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
            try:
                self.session.history.add_message(self.chat_id, stored, parent_id=self._last_id())
            except HistoryError as exc:
                self.notify(str(exc), title="answer not saved", severity="error", timeout=15)
        self.messages.append(stored)
        self.session.answer_ended()
        answer.show_branch(stored)  # the header shows it ended: from now on keys act on it
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
        if self.chat_id is not None:  # what the store holds (a regenerated answer comes back)
            await self.open_chat(self.chat_id)

    async def on_turns_left_out(self, message: TurnsLeftOut) -> None:
        """A long chat: say, above the answer, that its prompt starts later than the chat."""
        if message.answer_id != self._answer_id or self._answer is None:
            return
        text = (
            f"⋯ the {message.left_out} earliest messages were left out of this answer's prompt: "
            f"the chat outgrew the model's {message.n_ctx}-token context window"
        )
        notice = Static(text, classes="notice")
        await self.query_one("#transcript").mount(notice, before=self._answer)
        self.notify(text, severity="warning", timeout=8)

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
        yet; what was generated stays, marked as stopped. Without an answer running: stop
        editing a question, or leave the focused message for the prompt."""
        if self._answer is not None or self.session.busy:
            if self._answer_cancel is not None:
                self._answer_cancel.set()
        elif self._editing is not None:
            self._stop_editing()
            self.query_one(PromptInput).clear()
        elif isinstance(self.focused, Turn):
            self.query_one(PromptInput).focus()

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
            # the old answer stays in the store: the new one becomes its sibling (‹2/2›)
            previous = self.messages.pop().content  # a draft source: greedy re-verifies it
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
        copy_to_clipboard(self.app, text, "the last answer")

    def _title(self) -> str:
        if self.chat_id is None:
            return "specchat chat"
        return self.session.history.chat_title(self.chat_id) or "specchat chat"

    def action_copy_chat(self) -> None:
        copy_to_clipboard(self.app, chat_markdown(self._title(), self.messages), "the chat")

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

    # -- editing and branches -------------------------------------------------------------
    @on(PromptInput.EditLast)
    def _edit_last(self) -> None:
        """Up in an empty prompt: edit the last question, as in most chat apps."""
        last = next((m for m in reversed(self.messages) if m.role == "user"), None)
        if last is not None:
            self._start_editing(last)

    def action_edit_message(self) -> None:
        """`e` (or Enter) on a focused question: edit it."""
        turn = self.focused
        if isinstance(turn, UserMessage) and turn.stored is not None:
            self._start_editing(turn.stored)

    def _start_editing(self, message: StoredMessage) -> None:
        if message.id is None:
            return
        self._editing = message
        prompt = self.query_one(PromptInput)
        prompt.text = message.content
        prompt.move_cursor(prompt.document.end)
        prompt.border_title = "editing a question — Enter sends it as a new branch, Esc cancels"
        prompt.focus()

    def _stop_editing(self) -> None:
        self._editing = None
        self.query_one(PromptInput).border_title = None

    async def _fork(self, edited: StoredMessage, text: str) -> None:
        """Send `text` in place of `edited`: a sibling after the same message, a new branch;
        the old branch stays (←/→ on the question switch back)."""
        self._stop_editing()
        index = next((i for i, m in enumerate(self.messages) if m.id == edited.id), None)
        if index is not None:
            self.messages = self.messages[:index]
            for turn in list(self.query(Turn))[index:]:
                await turn.remove()
            for notice in self.query(".notice"):  # they spoke of answers no longer shown
                await notice.remove()
        await self.send(text)

    def _turns(self) -> list[Turn]:
        return list(self.query(Turn))

    def action_focus_message(self, delta: int) -> None:
        """Move the focus between messages (from the prompt: to the last one); past the last
        message, back to the prompt."""
        turns = self._turns()
        if not turns:
            return
        focused = self.focused
        current = turns.index(focused) if isinstance(focused, Turn) else len(turns)
        target = current + delta
        if target >= len(turns):
            self.query_one(PromptInput).focus()
            return
        self.query_one("#transcript", VerticalScroll).anchor(False)
        turns[max(0, target)].focus()
        self._code_block = 0

    async def action_switch_branch(self, delta: int) -> None:
        """←/→ on a focused message: show its previous or next sibling's branch."""
        turn = self.focused
        if not isinstance(turn, Turn) or turn.stored is None or turn.stored.id is None:
            return
        if self.session.busy:
            self.notify("stop the answer first (Esc)", severity="warning")
            return
        history = self.session.history
        siblings = history.siblings(turn.stored.id)
        if len(siblings) < 2:
            self.notify(
                "this message has no other version: edit a question (e) or regenerate an "
                "answer (Ctrl+R) to make one",
                timeout=4,
            )
            return
        index = siblings.index(turn.stored.id) + delta
        if not 0 <= index < len(siblings):
            return
        try:
            history.switch_branch(siblings[index])
        except HistoryError as exc:
            self.notify(str(exc), severity="error")
            return
        await self.open_chat(self.chat_id, focus=siblings[index])

    # -- copying -------------------------------------------------------------------------------
    def action_copy_message(self) -> None:
        """`c` on a focused message: copy its text."""
        turn = self.focused
        if isinstance(turn, Turn) and turn.stored is not None:
            who = "the question" if turn.stored.role == "user" else "the answer"
            copy_to_clipboard(self.app, turn.stored.content, who)

    def action_copy_code(self) -> None:
        """`y` on a focused message: copy its code block; pressed again, the next one."""
        turn = self.focused
        if not isinstance(turn, Turn) or turn.stored is None:
            return
        blocks = code_blocks(turn.stored.content)
        if not blocks:
            self.notify("no code block in this message (c copies all of it)", severity="warning")
            return
        index = self._code_block % len(blocks)
        self._code_block += 1
        what = "the code block" if len(blocks) == 1 else f"code block {index + 1}/{len(blocks)}"
        copy_to_clipboard(self.app, blocks[index], what)

    # -- search -----------------------------------------------------------------------------
    def action_search(self) -> None:
        if self.session.busy:
            self.notify("stop the answer first (Esc)", severity="warning")
            return
        self.app.push_screen(SearchScreen(), self._open_hit)

    async def _open_hit(self, hit: tuple[int, int] | None) -> None:
        """Open the chat of a search result in the result's branch, the message focused."""
        if hit is None:
            return
        chat_id, message_id = hit
        try:
            self.session.history.switch_branch(message_id)
        except HistoryError as exc:
            self.notify(str(exc), severity="error")
            return
        await self.open_chat(chat_id, focus=message_id)

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
            ("Search all chats", "Ctrl+K — full text, opens the chat there", self.action_search),
            (
                "Edit the last question",
                "Up in an empty prompt — sending it starts a new branch",
                self._edit_last,
            ),
            ("New chat", "Ctrl+N", self.action_new_chat),
            ("Help", "F1 — keys and decoders", self.app.action_help),
        ]
