"""The chat: transcript, legend, status line, input. Its workers run what blocks — loading the
model, building a decoder, the answer — through the session and post what happened to this
screen; the conversation (`app/conversation.py`) holds the chat and writes the store; this screen
shows them.

The transcript is the chat's current branch. Up in an empty prompt edits the last question (or
`e` on a focused question edits that one): sending it adds a sibling after the same message, a
new branch; Ctrl+R adds a sibling answer. ←/→ on a focused message switch between its siblings
(marked ‹i/n›). Messages take focus with Ctrl+Up or Shift+Tab; `c` copies one, `y` its code."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Header, Static

from specchat.app.chat_export import chat_markdown
from specchat.app.conversation import Conversation
from specchat.app.session import AnswerEvent, AnswerRecord, ChatSession
from specchat.app.session import TurnsLeftOut as LeftOut
from specchat.app.tui.clipboard import code_blocks, copy_to_clipboard
from specchat.app.tui.figures import Figures
from specchat.app.tui.keys import (
    APP_KEYS,
    CHAT_KEYS,
    PROMPT_KEYS,
    Key,
    bindings,
    decoder_keys,
)
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
from specchat.app.tui.screens.drafts import DraftsScreen
from specchat.app.tui.screens.race import RaceScreen
from specchat.app.tui.screens.search import SearchScreen
from specchat.app.tui.streaming import AnswerStream
from specchat.app.tui.widgets.legend import Legend
from specchat.app.tui.widgets.message import AssistantMessage, Turn, UserMessage
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.app.tui.widgets.status_bar import StatusBar
from specchat.engine.events import DoneEvent
from specchat.errors import HistoryError
from specchat.evaluation.race import error_text
from specchat.history import StoredMessage
from specchat.locations import exports_dir


class ChatScreen(Screen):
    BINDINGS = bindings(CHAT_KEYS)

    @classmethod
    def with_decoder_keys(cls) -> type[ChatScreen]:
        """This screen with one key per decoder in the registry, first in the footer and with
        priority, so they work while the input has focus. Made when the app starts rather than
        at import, so a decoder registered after import has its key too."""

        class ChatScreenWithDecoderKeys(cls, inherit_bindings=False):
            BINDINGS = [*bindings(decoder_keys()), *Screen.BINDINGS, *cls.BINDINGS]

        return ChatScreenWithDecoderKeys

    def __init__(self, chat_id: int | None = None) -> None:
        super().__init__()
        self.initial_chat_id = chat_id
        self.conversation: Conversation | None = None  # made on mount, from the app's store
        self.figures = Figures()
        self._answer_id = 0
        self._answer: AssistantMessage | None = None
        self._answer_cancel: threading.Event | None = None  # the latest answer's stop token
        self._answer_started = 0.0
        self._stream: AnswerStream | None = None  # the running answer's steps, not yet shown
        self._record: AnswerRecord | None = None  # the running answer as its events make it
        self._flush_timer: Timer | None = None
        self._editing: StoredMessage | None = None  # the question being edited (a fork on send)
        self._code_block = 0  # which code block `y` copies next from the focused message

    @property
    def session(self) -> ChatSession:
        return self.app.session

    @property
    def chat_id(self) -> int | None:
        return self.conversation.chat_id if self.conversation is not None else None

    @property
    def messages(self) -> list[StoredMessage]:
        return self.conversation.messages if self.conversation is not None else []

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
        self.conversation = Conversation(session.history)
        if session.needs_loading:
            self.run_worker(
                self._load, name="load model", group="load", exclusive=True, thread=True
            )
        elif not session.ready:
            warning = session.use_model(session.backend)
            if warning:
                self.notify(warning, severity="warning")
        self.query_one("#transcript").anchor()
        self.palette_changed_sync()
        if self.initial_chat_id is not None:
            await self.open_chat(self.initial_chat_id)
        self.query_one(PromptInput).focus()
        if not session.ready:
            self._status_line("loading model…")
        elif self.initial_chat_id is None:
            self._model_ready()
        else:
            self._show_status()

    # -- the model ------------------------------------------------------------------------------
    def _load(self) -> None:
        """A worker: the session loads the model; this screen hears how it went."""
        try:
            seconds, warning = self.session.load(lambda text: self.post_message(LoadProgress(text)))
        except Exception as exc:  # a runtime failing to load is shown, not a crash
            self.post_message(ModelFailed(error_text(exc)))
            return
        self.post_message(ModelLoaded(seconds, warning))

    def on_load_progress(self, message: LoadProgress) -> None:
        self._status_line(f"{message.text}…")

    def on_model_failed(self, message: ModelFailed) -> None:
        self._status_line(f"model not loaded: {message.error}")
        self.notify(message.error, title="model", severity="error", timeout=30)

    def on_model_loaded(self, message: ModelLoaded) -> None:
        if message.warning:
            self.notify(message.warning, severity="warning")
        self._model_ready()
        self.notify(f"model ready in {message.seconds:.2f} s", timeout=3)

    def _model_ready(self) -> None:
        self.figures.decoder = self.session.decoder_name
        self.figures.params = self.session.params_label(self.session.decoder_name)
        self._show_status()

    # -- decoders -------------------------------------------------------------------------------
    def action_decoder(self, name: str) -> None:
        """Switch decoder: mid-answer from the next step on, else for the next answer."""
        session = self.session
        refused = session.choose_decoder(name)
        if refused:
            self.notify(refused, severity="warning")
        elif not session.ready:  # chosen for when the model is loaded
            self.post_message(DecoderSwitched(name, mid_answer=False))
        else:
            self._switch(name)

    def _switch(self, name: str) -> None:
        """Build the decoder off the event loop (it may load a draft model); the newest key wins."""
        ticket = self.session.switch_ticket()
        work = partial(self._build_and_switch, name, ticket, self.session.busy)
        self.run_worker(work, name=f"switch to {name}", group="switch", thread=True)

    def _build_and_switch(self, name: str, ticket: int, mid_answer: bool) -> None:
        try:
            applied = self.session.switch_to(name, ticket)
        except Exception as exc:
            self.post_message(DecoderFailed(name, error_text(exc)))
            return
        if applied:
            self.post_message(DecoderSwitched(name, mid_answer))

    def on_decoder_switched(self, message: DecoderSwitched) -> None:
        session = self.session
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

    def action_decoder_settings(self) -> None:
        self.app.push_screen(DecoderSettingsScreen(self.session.decoder_name), self._settings_saved)

    def _settings_saved(self, name: str | None) -> None:
        """The dialog stored `name`'s settings: the running decoder takes them from the next
        answer on."""
        if name is None:
            return
        if name == self.session.decoder_name and self.session.ready:
            self._switch(name)
        else:
            self.post_message(DecoderSwitched(self.session.decoder_name, mid_answer=False))

    # -- the status line and colours ------------------------------------------------------------
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

    # -- opening chats ----------------------------------------------------------------------
    def _idle(self, doing: str = "stop the answer first (Esc)") -> bool:
        """True when no answer runs; else says so."""
        if self.session.busy or self._answer is not None:
            self.notify(doing, severity="warning")
            return False
        return True

    async def open_chat(self, chat_id: int | None, focus: int | None = None) -> None:
        """Show a stored chat (or an empty one for None) in its current branch; figures of its
        last answer. `focus`: the id of a message to focus (a search hit, a switched branch)."""
        if not self._idle():
            return
        self._stop_editing()
        try:
            self.conversation.open(chat_id)
        except HistoryError as exc:
            self.notify(str(exc), title="chats", severity="error")
            return
        await self._show_conversation(focus)

    async def _show_conversation(self, focus: int | None = None) -> None:
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
        self.sub_title = self.conversation.title if self.chat_id is not None else "new chat"
        last = self.conversation.last("assistant")
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
        if not self._idle("an answer is running: wait, or Esc to stop it"):
            return
        self.query_one(PromptInput).clear()
        if self._editing is not None:
            await self._fork(self._editing, event.text.strip())
        else:
            await self.send(event.text.strip())

    async def send(self, text: str) -> None:
        """Ask `text` after the last message shown and start the answer."""
        cancel = self._new_answer_token()
        try:
            question = self.conversation.ask(text)
        except HistoryError as exc:  # nothing sent: the question goes back to the prompt
            self.notify(str(exc), title="not sent", severity="error", timeout=15)
            self.query_one(PromptInput).insert(text)
            return
        self.sub_title = self.conversation.title
        transcript = self.query_one("#transcript", VerticalScroll)
        await transcript.mount(UserMessage(text, question))
        transcript.anchor()
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
        self._stream = stream = AnswerStream()
        events = session.answer(self.conversation.prompt(), cancel, previous_answer)
        self._record = record = session.record()  # what the worker keeps of the answer
        work = partial(self._generate, self._answer_id, events, stream, record)
        self.run_worker(work, name="answer", group="answer", exclusive=True, thread=True)
        self._flush_timer = self.set_timer(
            stream.pacer.interval, partial(self._paced_flush, self._answer_id)
        )
        self._show_status()

    def _generate(
        self,
        answer_id: int,
        events: Iterator[AnswerEvent],
        stream: AnswerStream,
        record: AnswerRecord,
    ) -> None:
        """A worker: each step is kept in `record` (what the chat stores) and goes into the
        stream, which this screen drains at its own pace (`streaming.py`: no message per step),
        with its rejected draft tokens as text; AnswerDone, with the finished record, or
        AnswerFailed comes after the last step was put."""
        done = None
        try:
            for event in events:
                if isinstance(event, DoneEvent):
                    done = event
                elif isinstance(event, LeftOut):
                    self.post_message(TurnsLeftOut(answer_id, event.left_out, event.n_ctx))
                else:
                    stream.put(event, record.add(event))
            record.finish(done)
        except Exception as exc:  # a bug or a runtime failure: show it, keep the app
            self.post_message(AnswerFailed(answer_id, error_text(exc)))
            return
        self.post_message(AnswerDone(answer_id, done, record))

    async def _paced_flush(self, answer_id: int) -> None:
        """A flush, and the next one at the pacer's interval (see `streaming.py`), while answer
        `answer_id` streams."""
        if self._stream is None or answer_id != self._answer_id:
            return
        await self._flush_steps()
        if self._stream is not None and answer_id == self._answer_id:
            self._flush_timer = self.set_timer(
                self._stream.pacer.next_interval(), partial(self._paced_flush, answer_id)
            )

    async def _flush_steps(self) -> None:
        """Show every step the worker put since the last flush: one repaint of the answer and
        one of the status bar, however many steps came (see `streaming.py`)."""
        if self._stream is None or self._answer is None:
            return
        taken = self._stream.take()
        if not taken:
            return
        events = [event for event, _ in taken]
        await self._answer.add_steps(events, [rejected for _, rejected in taken])
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
        self._stop_flushing()
        await self._flush_steps()  # the worker put every step before it posted this
        self._stream = None
        event = message.event
        answer = self._answer
        await answer.finish(event.text, event.finish_reason)
        elapsed = round(time.monotonic() - self._answer_started, 3)
        decoder = message.record.decoder
        self.figures.finished(decoder, event.finish_reason, elapsed)
        # the engine's own figures: equal to the steps' for a local model, a remote server's
        # totals where it reports only those
        self.figures.stats = event.stats
        self.figures.params = self.session.params_label(decoder)
        if event.error:
            self.notify(event.error, title="answer broke off", severity="error", timeout=15)
        stored = message.record.stored(elapsed_seconds=elapsed, params=self.figures.params)
        error = self.conversation.record_answer(stored)
        if error:
            self.notify(error, title="answer not saved", severity="error", timeout=15)
        self._answer = None
        answer.show_branch(stored)  # the header shows it ended: from now on keys act on it
        self._show_status()

    async def on_answer_failed(self, message: AnswerFailed) -> None:
        if message.answer_id != self._answer_id:
            return
        self._stop_flushing()
        self._stream = None
        if self._answer is not None:
            await self._answer.remove()
            self._answer = None
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
        question unanswered: it leaves the chat and goes back into the input to be edited."""
        question = self.conversation.take_back_question()
        if question is None:
            return
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
        if not self.session.ready or self.session.busy or self._answer is not None:
            self.notify("nothing to regenerate right now", severity="warning")
            return
        if not self.messages:
            self.notify("no answer to regenerate yet", severity="warning")
            return
        cancel = self._new_answer_token()
        # the old answer stays in the store: the new one becomes its sibling (‹2/2›), and a
        # draft source (greedy re-verifies it)
        previous = self.conversation.regenerate()
        if previous is not None:
            answers = self.query(AssistantMessage)
            if answers:
                await answers.last().remove()
        await self._start_answer(cancel, previous)

    def action_copy_answer(self) -> None:
        last = self.conversation.last("assistant")
        if last is None:
            self.notify("no answer to copy yet", severity="warning")
            return
        copy_to_clipboard(self.app, last.content, "the last answer")

    def _title(self) -> str:
        return self.conversation.title or "specchat chat"

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
        if self._idle():
            self.app.push_screen(ChatListScreen(self.chat_id, self.open_chat, self._chat_renamed))

    def _chat_renamed(self, chat_id: int, title: str) -> None:
        if chat_id == self.chat_id:
            self.sub_title = title

    # -- editing and branches -------------------------------------------------------------
    @on(PromptInput.EditLast)
    def action_edit_last(self) -> None:
        """Up in an empty prompt: edit the last question, as in most chat apps."""
        last = self.conversation.last("user")
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
        index = self.conversation.fork(edited)
        if index is not None:
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
        if not self._idle():
            return
        siblings = self.conversation.siblings(turn.stored)
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
        await self._show_branch(siblings[index])

    async def _show_branch(self, message_id: int) -> None:
        """Make the branch through `message_id` current and show it, that message focused."""
        self._stop_editing()
        try:
            self.conversation.switch_branch(message_id)
        except HistoryError as exc:
            self.notify(str(exc), severity="error")
            return
        await self._show_conversation(focus=message_id)

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

    # -- drafts ------------------------------------------------------------------------------
    def action_show_drafts(self) -> None:
        """`d` on an answer (from the palette: the focused answer, else the last): its steps."""
        turn = self.focused
        if not isinstance(turn, AssistantMessage):
            answers = self.query(AssistantMessage)
            turn = answers.last() if answers else None
        if turn is None or turn.stored is None:
            self.notify("no finished answer to show the drafts of", severity="warning")
            return
        try:
            steps = self.conversation.answer_steps(turn.stored)
        except HistoryError as exc:
            self.notify(str(exc), severity="error")
            return
        if steps is None:
            self.notify(
                "this answer was stored without its steps (an older specchat)", severity="warning"
            )
            return
        self.app.push_screen(DraftsScreen(turn.stored, steps))

    # -- search and race ------------------------------------------------------------------------
    def action_search(self) -> None:
        if self._idle():
            self.app.push_screen(SearchScreen(), self._open_hit)

    async def _open_hit(self, hit: tuple[int, int] | None) -> None:
        """Open the chat of a search result in the result's branch, the message focused."""
        if hit is not None and self._idle():
            await self._show_branch(hit[1])

    def action_race(self) -> None:
        if self._idle():
            last = self.conversation.last("user")
            self.app.push_screen(RaceScreen(last.content if last else ""))

    def palette_commands(self) -> list[tuple[str, str, Callable]]:
        """Every action with a palette title, for the command palette (keys.py declares them)."""
        keys: list[Key] = [*CHAT_KEYS, *decoder_keys(), *PROMPT_KEYS, *APP_KEYS]
        return [
            (key.palette, f"{key.display} — {key.help}" if key.keys else key.help,
             partial(self.run_action, key.action))
            for key in keys
            if key.palette
        ]  # fmt: skip
