"""The chat: transcript, legend, status line, input. Its workers run what blocks — loading the
model, building a decoder, the answer — through the session and post what happened to this
screen; the conversation (`app/conversation.py`) holds the chat and writes the store; this screen
shows them.

The transcript is the chat's current branch. Up in an empty prompt edits the last question (or
`e` on a focused question edits that one): sending it adds a sibling after the same message, a
new branch; Ctrl+R adds a sibling answer. ←/→ on a focused message switch between its siblings
(marked ‹i/n›). Messages take focus with Ctrl+Up or Shift+Tab; `c` copies one, `y` its code."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header

from specchat.app.conversation import Conversation
from specchat.app.model_thread import run_in_passing_thread, run_on_model_thread
from specchat.app.session import ChatSession, ModelChoice
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
    DecoderFailed,
    DecoderSwitched,
    LoadProgress,
    ModelFailed,
    ModelLoaded,
)
from specchat.app.tui.screens.chat_answering import Answering
from specchat.app.tui.screens.chat_branches import Branches
from specchat.app.tui.screens.chat_copying import Copying
from specchat.app.tui.screens.chats import ChatListScreen
from specchat.app.tui.screens.decoder_settings import DecoderSettingsScreen
from specchat.app.tui.screens.drafts import DraftsScreen
from specchat.app.tui.screens.file_picker import FilePickerScreen
from specchat.app.tui.screens.race import RaceScreen
from specchat.app.tui.screens.search import SearchScreen
from specchat.app.tui.screens.system_prompt import SystemPromptScreen
from specchat.app.tui.widgets.legend import Legend
from specchat.app.tui.widgets.message import AssistantMessage, UserMessage
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.app.tui.widgets.status_bar import StatusBar
from specchat.errors import HistoryError
from specchat.evaluation.race import error_text
from specchat.history import StoredMessage

MODEL_LABEL_EVERY = 1.0  # seconds between looks at the model's part of the status line
# said on the status line while a question sent during the load waits for the model
_WAITS = " (your question is sent once the model is ready)"


class ChatScreen(Answering, Branches, Copying, Screen):
    """The chat by job: its answers (`chat_answering.py`), branches and editing
    (`chat_branches.py`), copying and export (`chat_copying.py`), each owning the state it
    declares and offering the rest its public methods; here the rest — the model loading,
    decoder switching, the status line and colours, opening chats, and the screens it opens."""

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
        self._waiting: str | None = None  # a question sent while the model loads: sent once ready
        self._load_error: str | None = None  # why the model did not load (nothing to answer)

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
        self.conversation = Conversation(
            session.history, default_system=session.config.system_prompt
        )
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
        self.set_interval(MODEL_LABEL_EVERY, self._follow_model_label)
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
            seconds, warning = run_on_model_thread(
                self.session.load, lambda text: self.post_message(LoadProgress(text))
            )
        except Exception as exc:  # a runtime failing to load is shown, not a crash
            self.post_message(ModelFailed(error_text(exc)))
            return
        self.post_message(ModelLoaded(seconds, warning))

    def action_pick_model(self) -> None:
        """F9: the models this machine has; the chosen one loads on the model thread while the
        chat stays open (an answer waits for it). The list is read in a worker: each GGUF's
        header is read for its facts (tens of milliseconds a file, more for the first)."""
        if self.session.busy:
            self.notify("an answer or a race is running: stop it (Esc) first", severity="warning")
            return
        if any(worker.group == "models" and worker.is_running for worker in self.workers):
            return  # F9 pressed again while the list is read: one picker opens
        self.run_worker(self._list_models, name="list models", group="models", thread=True)

    def _list_models(self) -> None:
        try:
            choices = self.session.model_choices()
        except Exception as exc:  # a store that cannot be read is shown, not a crash
            self.app.call_from_thread(self.notify, error_text(exc), severity="error")
            return
        self.app.call_from_thread(self._open_picker, choices)

    def _open_picker(self, choices: list[ModelChoice]) -> None:
        from specchat.app.tui.screens.models import ModelPickerScreen

        self.app.push_screen(ModelPickerScreen(choices), self._model_chosen)

    def _model_chosen(self, spec: str | None) -> None:
        if spec is None:
            return
        self._status_line(f"loading {spec}…")
        work = partial(self._switch_model, spec)
        self.run_worker(work, name="switch model", group="load", exclusive=True, thread=True)

    def _switch_model(self, spec: str) -> None:
        """A worker: the session loads `spec` in place of the model (the old one stays in use if
        the new one fails)."""
        try:
            seconds, warning = run_on_model_thread(
                self.session.switch_model, spec, lambda text: self.post_message(LoadProgress(text))
            )
        except Exception as exc:  # a model that will not load is shown, not a crash
            self.post_message(ModelFailed(error_text(exc)))
            return
        self.post_message(ModelLoaded(seconds, warning))

    def on_load_progress(self, message: LoadProgress) -> None:
        self._status_line(f"{message.text}…{_WAITS if self._waiting else ''}")

    def on_model_failed(self, message: ModelFailed) -> None:
        self.notify(message.error, title="model", severity="error", timeout=30)
        if self.session.ready:  # a switch that failed: the model the chat had runs on
            self._show_status()
            return
        self._load_error = message.error
        self._status_line(f"model not loaded: {message.error}")
        if self._waiting is not None:  # nothing will answer it: back where it was typed
            self.query_one(PromptInput).load_text(self._waiting)
            self._waiting = None

    async def on_model_loaded(self, message: ModelLoaded) -> None:
        if message.warning:
            self.notify(message.warning, severity="warning")
        self._model_ready()
        self.notify(f"model ready in {message.seconds:.2f} s", timeout=3)
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            await self.send_or_fork(waiting)

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
        try:  # never on the model thread: an answer may hold it
            applied = run_in_passing_thread(self.session.switch_to, name, ticket)
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

    def _follow_model_label(self) -> None:
        """Between answers too, the status line says whether the model runs on fewer threads:
        the count follows the machine's load while the chat waits (backends/threads_by_load.py),
        and no answer's figures repaint the line then."""
        if self.session.ready:
            self.query_one(StatusBar).follow_model(self.session.model_label)

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
        if self.session.busy or self.answering:
            self.notify(doing, severity="warning")
            return False
        return True

    async def open_chat(self, chat_id: int | None, focus: int | None = None) -> None:
        """Show a stored chat (or an empty one for None) in its current branch; figures of its
        last answer. `focus`: the id of a message to focus (a search hit, a switched branch)."""
        if not self._idle():
            return
        self.stop_editing()
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
            # once laid out anchored (a short chat sits at the bottom by a negative offset):
            # let go of the anchor before that, and the offset stays the one laid out for what
            # the transcript held before — a chat opened from an empty one showed blank
            def show_target() -> None:
                transcript.anchor(False)
                target.focus()  # scrolls to it

            self.call_after_refresh(show_target)
        else:  # the focused message may be gone with the old chat: typing goes to the prompt
            self.query_one(PromptInput).focus()
        self.sub_title = self.conversation.title if self.chat_id is not None else "new chat"
        last = self.conversation.last("assistant")
        name = self.session.decoder_name
        params = self.session.params_label(name)
        if last is not None:
            self.figures = Figures.stored(last, name, params)
        else:
            self.figures = Figures(decoder=name, params=params)
        if self.session.ready:
            self._show_status()

    def _widget_for(self, message: StoredMessage):
        if message.role == "user":
            return UserMessage(message)
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
            self._send_when_loaded(event.text.strip())
            return
        if not self._idle("an answer is running: wait, or Esc to stop it"):
            return
        self.query_one(PromptInput).clear()
        await self.send_or_fork(event.text.strip())

    def _send_when_loaded(self, text: str) -> None:
        """Enter while the model loads: the question is sent as soon as the model is ready (a
        larger model's load and first pass-cost timing take seconds, and a person types at
        once); where the load failed there is nothing to answer it, and the text stays."""
        if self._load_error is not None:
            self.notify(f"no model to answer: {self._load_error}", severity="error")
            return
        if self._waiting is not None:
            self.notify("a question already waits for the model", severity="warning")
            return
        self._waiting = text
        self.query_one(PromptInput).clear()
        self._status_line(f"loading model…{_WAITS}")

    # -- chats -----------------------------------------------------------------------------------
    async def action_new_chat(self) -> None:
        await self.open_chat(None)

    def action_chats(self) -> None:
        if self._idle():
            self.app.push_screen(ChatListScreen(self.chat_id, self.open_chat, self._chat_renamed))

    def _chat_renamed(self, chat_id: int, title: str) -> None:
        if chat_id == self.chat_id:
            self.sub_title = title

    @on(PromptInput.EditLast)
    def action_edit_last(self) -> None:
        """Up in an empty prompt: edit the last question, as in most chat apps."""
        last = self.conversation.last("user")
        if last is not None:
            self.start_editing(last)

    # -- attachments and the system prompt ------------------------------------------------------
    @on(PromptInput.PickFile)
    def action_attach_file(self) -> None:
        """F12 (or Tab after a bare @): pick a file; `@path` goes into the prompt at the cursor."""
        self.app.push_screen(FilePickerScreen(), self._file_picked)

    def _file_picked(self, path: str | None) -> None:
        prompt = self.query_one(PromptInput)
        if path is not None:
            prompt.attach(path)
        prompt.focus()

    def action_toggle_attachments(self) -> None:
        """`o` on a question: show its attached files' text, or fold it again."""
        turn = self.focused
        if not isinstance(turn, UserMessage) or not turn.toggle_attachments():
            self.notify("this question attached no files", severity="warning")

    def action_system_prompt(self) -> None:
        conversation = self.conversation
        where = (
            f"chat {conversation.chat_id}" if conversation.chat_id is not None else "this new chat"
        )
        self.app.push_screen(
            SystemPromptScreen(
                f"System prompt of {where}",
                conversation.system_prompt,
                "Kept with the chat; the next answer follows it. A model whose template has no "
                "system role gets it before the first question.",
            ),
            self._system_prompt_kept,
        )

    def _system_prompt_kept(self, text: str | None) -> None:
        if text is None:
            return
        try:
            self.conversation.set_system_prompt(text)
        except HistoryError as exc:
            self.notify(str(exc), title="system prompt", severity="error")
            return
        self.notify("system prompt set" if text else "no system prompt", title="this chat")

    def action_default_system_prompt(self) -> None:
        self.app.push_screen(
            SystemPromptScreen(
                "Default system prompt (new chats)",
                self.session.config.system_prompt,
                "New chats start with it (settings.toml's system_prompt); a chat keeps its own.",
            ),
            self._default_system_prompt_kept,
        )

    def _default_system_prompt_kept(self, text: str | None) -> None:
        if text is None:
            return
        error = self.session.set_default_system_prompt(text)
        self.conversation.default_system = self.session.config.system_prompt
        if error:
            self.notify(error, severity="warning")
        else:
            self.notify(
                "new chats start with it" if text else "new chats have none",
                title="default system prompt",
            )

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
