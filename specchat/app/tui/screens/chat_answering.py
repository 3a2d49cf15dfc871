"""The chat's answers: sending a question, the answer's worker and its paced drawing, how an
answer ends (stored, failed, stopped) and regenerating one. A part of `ChatScreen` (a mixin: it
uses the screen's session, conversation and widgets)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from functools import partial

from textual.actions import SkipAction
from textual.containers import VerticalScroll
from textual.timer import Timer
from textual.widgets import Static

from specchat.app.model_thread import run_on_model_thread
from specchat.app.session import AnswerEvent, AnswerRecord
from specchat.app.session import TurnsLeftOut as LeftOut
from specchat.app.tui.figures import Figures
from specchat.app.tui.messages import AnswerDone, AnswerFailed, TurnsLeftOut
from specchat.app.tui.streaming import AnswerStream
from specchat.app.tui.widgets.message import AssistantMessage, Turn, UserMessage
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.attachments import attach_mentions, attached_spans, with_attachments
from specchat.engine.events import DoneEvent
from specchat.errors import SpecchatError
from specchat.evaluation.race import error_text

# How long an answer's worker waits for the screen to take its end in before it goes on (to a
# slice of a pass-cost sweep): the screen stores and draws the answer in milliseconds; a screen
# that never takes it (the app quitting) holds the model thread no longer than this.
_TAKE_IN_SECONDS = 2.0


class Answering:
    """Asking, streaming and ending answers. The state below is this part's own: only its
    methods write it; the rest of the screen asks `answering`."""

    _answer_id = 0
    _answer: AssistantMessage | None = None
    _answer_cancel: threading.Event | None = None  # the latest answer's stop token
    _answer_started = 0.0
    _stream: AnswerStream | None = None  # the running answer's steps, not yet shown
    _record: AnswerRecord | None = None  # the running answer as its events make it
    _flush_timer: Timer | None = None

    @property
    def answering(self) -> bool:
        """Whether an answer is on screen and not yet ended."""
        return self._answer is not None

    async def send(self, text: str) -> None:
        """Ask `text` after the last message shown, with the files it names (`@path`) before
        it, and start the answer. A file that cannot be attached, or a store that refuses:
        one line, nothing sent, the text back in the prompt."""
        cancel = self._new_answer_token()
        try:
            attached = attach_mentions(text)
            question = self.conversation.ask(
                with_attachments(text, attached), attached_spans(attached)
            )
        except SpecchatError as exc:  # a HistoryError too
            self.notify(str(exc), title="not sent", severity="error", timeout=15)
            self.query_one(PromptInput).insert(text)
            return
        self.sub_title = self.conversation.title
        transcript = self.query_one("#transcript", VerticalScroll)
        await transcript.mount(UserMessage(question))
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
        self._answer.decoders = (name,)
        transcript = self.query_one("#transcript", VerticalScroll)
        await transcript.mount(self._answer)
        self.figures = Figures(decoder=name, params=session.params_label(name), streaming=True)
        self._answer_started = time.monotonic()
        self._stream = stream = AnswerStream()
        events = session.answer(self.conversation.prompt(), cancel, previous_answer)
        self._record = record = session.record()  # what the worker keeps of the answer
        work = partial(run_on_model_thread, self._generate, self._answer_id, events, stream, record)
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
        """A worker: each step is kept in `record` (what the chat stores, its rejected drafts as
        text: the worker asks the model, never the UI thread) and goes into the stream, which
        this screen drains at its own pace (`streaming.py`: no message per step); AnswerDone,
        with the finished record, or AnswerFailed comes after the last step was put.

        AnswerDone is posted as the done event comes, not when the events end: what the engine
        does after an answer (a slice of a pass-cost sweep, up to 0.2 s) then runs while the
        person reads, not before the answer shows it ended. It waits for the screen to have
        taken the answer in (stored, drawn), so the screen's work does not share the cores
        with the passes the slice times."""
        done = None
        try:
            for event in events:
                if isinstance(event, DoneEvent):
                    record.finish(event)
                    done = AnswerDone(answer_id, event, record)
                    self.post_message(done)
                    done.taken.wait(_TAKE_IN_SECONDS)
                elif isinstance(event, LeftOut):
                    self.post_message(TurnsLeftOut(answer_id, event.left_out, event.n_ctx))
                else:
                    record.add(event)
                    stream.put(event)
        except Exception as exc:  # a bug or a runtime failure: show it, keep the app
            if done is None:
                self.post_message(AnswerFailed(answer_id, error_text(exc)))
            else:  # after the answer ended, and was stored: a notice, the answer stays
                self.notify(error_text(exc), title="after the answer", severity="error")

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
        events = self._stream.take()
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
        try:
            await self._take_in_answer(message)
        finally:
            message.taken.set()  # the worker goes on to what follows an answer

    async def _take_in_answer(self, message: AnswerDone) -> None:
        if message.answer_id != self._answer_id or self._answer is None:
            return
        self._stop_flushing()
        await self._flush_steps()  # the worker put every step before it posted this
        self._stream = None
        event = message.event
        answer = self._answer
        await answer.finish(event.text, event.finish_reason)
        elapsed = round(time.monotonic() - self._answer_started, 3)
        active = self.session.decoder_name
        self.figures.finished(
            active, self.session.params_label(active), event.finish_reason, elapsed
        )
        # the engine's own figures: equal to the steps' for a local model, a remote server's
        # totals where it reports only those
        self.figures.stats = event.stats
        if event.error:
            self.notify(event.error, title="answer broke off", severity="error", timeout=15)
        params = self.session.params_label(message.record.decoder)
        stored = message.record.stored(elapsed_seconds=elapsed, params=params)
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
            prompt.insert(question.question)  # as typed: its @path mentions attach the files anew

    def action_cancel(self) -> None:
        """Stop the answer at its next step boundary — also when the engine has not started it
        yet; what was generated stays, marked as stopped. Without an answer running: stop
        editing a question, or leave the focused message for the prompt."""
        if self._answer is not None or self.session.busy:
            if self._answer_cancel is not None:
                self._answer_cancel.set()
        elif self.editing:
            self.stop_editing()
            self.query_one(PromptInput).clear()
        elif isinstance(self.focused, Turn):
            self.query_one(PromptInput).focus()

    def action_interrupt(self) -> None:
        """Ctrl+C, a terminal's interrupt key, stops a running answer as Esc does; without one
        the key keeps its usual meaning (copy a selection, Textual's quit hint)."""
        if self._answer is None and not self.session.busy:
            raise SkipAction()
        self.action_cancel()

    async def stop_answer_and_keep(self, wait_seconds: float = 10.0) -> None:
        """Stop a running answer and wait (at most `wait_seconds`) until what it generated is
        stored: the engine stops at its next step boundary and the answer ends as Esc ends it."""
        if self._answer is None:
            return
        self.action_cancel()
        deadline = time.monotonic() + wait_seconds
        while self._answer is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

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
