"""The chat against the real bundled model: streaming, live status, decoder keys, Esc, restart."""

from __future__ import annotations

import threading

import pytest

from specchat.app.tui.app import SpecchatApp
from specchat.app.tui.widgets.answer_body import Piece
from specchat.app.tui.widgets.message import AssistantMessage, UserMessage
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.app.tui.widgets.status_bar import StatusBar
from specchat.decoding.base import Decoder
from specchat.decoding.registry import DECODERS, default_decoder
from specchat.engine.events import StepEvent
from specchat.options import RunConfig

from .conftest import StepGate, wait_until

pytestmark = pytest.mark.anyio

SIZE = (110, 34)
LONG_PROMPT = "Write a long story about a dragon who learns to bake bread. Use many details."


def status_of(app) -> str:
    return str(app.screen.query_one(StatusBar).render())


def count_updates(widget) -> list[str]:
    """Every content `widget` is updated with from now on, in order."""
    seen: list[str] = []
    original = widget.update

    def update(content="", **kwargs):
        seen.append(str(content))
        return original(content, **kwargs)

    widget.update = update
    return seen


async def type_and_send(pilot, text: str) -> None:
    pilot.app.screen.query_one("#prompt").insert(text)
    await pilot.press("enter")


async def test_answer_streams_and_status_updates(backend):
    app = SpecchatApp(settings=RunConfig(max_tokens=40, decoder="greedy"), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.screen
        with StepGate(app.session.engine, after=2) as gate:
            await type_and_send(pilot, "Name three colours.")
            await wait_until(pilot, gate.held.is_set)
            # the first steps reach the screen while the worker waits for the next one
            await wait_until(pilot, lambda: chat.figures.stats.steps == 2)
            live = status_of(app)
            assert "generating" in live and "tok/s" in live and "greedy" in live
            assert "2 tokens" in live
            streaming = chat.query(AssistantMessage).last()
            assert streaming.text and streaming.body.text == streaming.text
            gate.release()
            await app.workers.wait_for_complete()
            await pilot.pause()
        assert [m.role for m in chat.messages] == ["user", "assistant"]
        answer = chat.messages[-1]
        assert answer.content.strip()
        assert answer.finish_reason in ("eos", "max_tokens")
        final = status_of(app)
        assert "ended:" in final and "tokens" in final
        # the figures grown from the step events are the engine's own
        shown = chat.figures.stats
        assert (shown.steps, shown.generated_tokens) == (
            answer.stats.steps,
            answer.stats.generated_tokens,
        )
        widget = chat.query(AssistantMessage).last()
        assert widget.text == answer.content
        assert len(chat.query(UserMessage)) == 1


async def test_between_answers_the_status_line_follows_the_machines_load(backend):
    """The thread count follows the load while the chat waits for the next question
    (backends/threads_by_load.py): the status line says so then, not only while answering."""
    from specchat.backends.threads_by_load import ThreadsByLoad

    others = {"cores": 0.05}  # what other processes use, as the test sets it
    backend.threads_by_load = by_load = ThreadsByLoad(2, lambda: others["cores"], cores=2)
    by_load.watch_while_idle(every=0.01)
    app = SpecchatApp(settings=RunConfig(max_tokens=8, decoder="greedy"), backend=backend)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: "tokens" in status_of(app) or "ready" in status_of(app))
            assert "threads" not in status_of(app)
            others["cores"] = 1.0  # a busy process starts beside the idle chat
            await wait_until(pilot, lambda: "1 of 2 threads: the machine is busy" in status_of(app))
            others["cores"] = 0.05  # and ends
            await wait_until(pilot, lambda: "threads" not in status_of(app))
    finally:
        by_load.close()
        backend.threads_by_load = None


async def test_a_burst_of_steps_costs_one_repaint(backend):
    """However many steps the engine made since the last flush, the answer and the status bar
    repaint once for all of them: the UI's work follows the clock, not the model's pace."""
    app = SpecchatApp(settings=RunConfig(max_tokens=40), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.screen
        with StepGate(app.session.engine, after=0) as gate:
            await type_and_send(pilot, "Hi")
            await wait_until(pilot, gate.held.is_set)
            answer = chat.query(AssistantMessage).last()
            repaints = count_updates(answer.query_one("#tail"))
            status_repaints = count_updates(chat.query_one(StatusBar))
            words = [f" w{i}" for i in range(200)]
            for word in words:  # as a fast decoder would, between two flushes
                chat._stream.put(StepEvent((7,), word, 0, 0, "greedy", 0.001))
            await chat._flush_steps()
            assert len(repaints) == 1 and len(status_repaints) == 1
            assert answer.text == "".join(words)
            assert chat.figures.tokens == 200 and "200 tokens" in status_of(app)
            await pilot.press("escape")
            gate.release()
            await app.workers.wait_for_complete()
            await pilot.pause()


STREAMED_MARKDOWN = """## A plan

Some **bold** prose, then a list:

- first item with `code`
- second item
  1. nested

| name | value |
|------|------:|
| cat  | 3     |
| mat  | 12    |

```python
def f(x):
    return x + 1
```

Done: the end.
"""


async def test_streamed_answer_looks_as_the_finished_one(backend, monkeypatch):
    """While streaming, finished blocks move out of the live tail into static pieces drawn once
    (never again); the streamed answer shows the same lines and colours as after it ends, and as
    the same answer reopened from the store (drawn in one go)."""
    drawn: dict[int, int] = {}  # piece → how many times it was drawn
    draw = Piece.update

    def counted(piece, *args, **kwargs):
        drawn[id(piece)] = drawn.get(id(piece), 0) + 1
        return draw(piece, *args, **kwargs)

    monkeypatch.setattr(Piece, "update", counted)
    app = SpecchatApp(settings=RunConfig(max_tokens=40), backend=backend)
    async with app.run_test(size=(100, 60)) as pilot:
        chat = app.screen
        with StepGate(app.session.engine, after=0) as gate:
            await type_and_send(pilot, "Hi")
            await wait_until(pilot, gate.held.is_set)
            answer = chat.query(AssistantMessage).last()
            text, at, step = STREAMED_MARKDOWN, 0, 0
            while at < len(text):  # uneven steps, every third one a run of 3 tokens
                size = 3 + step % 7
                n_tokens = 3 if step % 3 == 0 else 1
                step_event = StepEvent((7,) * n_tokens, text[at : at + size], 2, 2, "pld", 0)
                chat._record.add(step_event)  # as the worker does
                chat._stream.put(step_event)
                at, step = at + size, step + 1
                if step % 4 == 0:
                    await chat._flush_steps()
                    await pilot.pause()
            await chat._flush_steps()
            await pilot.pause()
            assert len(answer.body.query(Piece)) >= 2, "finished blocks were settled"
            streamed = body_lines(app, answer)
            await pilot.press("escape")
            gate.release()
            await app.workers.wait_for_complete()
            await pilot.pause()
        assert body_lines(app, answer) == streamed
        assert len(drawn) >= 2 and set(drawn.values()) == {1}, "every piece drawn once"
        assert answer.text == STREAMED_MARKDOWN
        shown = ["".join(char for char, _ in line) for line in streamed]
        assert "A plan" in shown[0] and not any("**" in line or "```" in line for line in shown)
        await chat.open_chat(chat.chat_id)  # the stored answer, drawn at once
        await pilot.pause()
        reopened = chat.query(AssistantMessage).last()
        assert body_lines(app, reopened) == streamed


def body_lines(app, widget) -> list[list[tuple[str, object]]]:
    """The screen's rows under the widget's header line, cell by cell: character and style
    (without Textual's per-widget offsets, which say which piece a cell came from)."""
    strips = app.screen._compositor.render_strips()
    region = widget.region
    return [
        [
            (char, segment.style and segment.style.clear_meta_and_links())
            for segment in strips[y]
            for char in segment.text
        ]
        for y in range(region.y + 1, region.bottom)
    ]


async def test_decoder_key_mid_answer_switches(backend):
    """The key lands while the worker is parked between steps 2 and 3, so the switch is in the
    engine before step 3 on any machine; steps 3 on must all come from the new decoder."""
    target = (
        next((i for i in DECODERS.values() if i.name != "greedy" and i.greedy_family), None)
        or DECODERS["sample"]
    )
    app = SpecchatApp(settings=RunConfig(max_tokens=40, decoder="greedy"), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        with StepGate(app.session.engine, after=2) as gate:
            await type_and_send(pilot, LONG_PROMPT)
            await wait_until(pilot, gate.held.is_set)
            await pilot.press(target.key)
            # the switch worker handed the decoder to the engine and the bar shows it pending
            await wait_until(pilot, lambda: app.screen.figures.pending == target.name)
            assert app.session.busy
            gate.release()
            await app.workers.wait_for_complete()
            await pilot.pause()
        answer = app.screen.messages[-1]
        assert answer.finish_reason in ("eos", "max_tokens")
        assert gate.decoders[:2] == ["greedy", "greedy"]
        assert len(gate.decoders) > 2 and set(gate.decoders[2:]) == {target.name}, gate.decoders
        assert list(answer.stats.decoders) == ["greedy", target.name]
        assert app.session.decoder_name == target.name
        assert f" {target.name} " in status_of(app)


async def test_two_quick_decoder_keys_land_in_the_order_pressed(backend, monkeypatch):
    """The first key's decoder is still being built (a draft model loading, say) when the second
    key is pressed and its decoder is ready: the second key wins, whenever the first build ends."""
    app = SpecchatApp(settings=RunConfig(max_tokens=8), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        session = app.session
        build, slow_started, release = session._build, threading.Event(), threading.Event()

        def build_slowly_for_beam(name: str) -> Decoder:
            if name == "beam":
                slow_started.set()
                release.wait(timeout=60)
            return build(name)

        monkeypatch.setattr(session, "_build", build_slowly_for_beam)
        await pilot.press(DECODERS["beam"].key)
        await wait_until(pilot, slow_started.is_set)
        await pilot.press(DECODERS["sample"].key)
        await wait_until(pilot, lambda: session.decoder_name == "sample")
        release.set()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert session.decoder_name == "sample"
        assert " sample " in status_of(app)
        await type_and_send(pilot, "Hi")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert list(app.screen.messages[-1].stats.decoders) == ["sample"]


async def test_decoder_key_when_idle_sets_next_answer(backend):
    app = SpecchatApp(settings=RunConfig(max_tokens=8), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(DECODERS["beam"].key)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session.decoder_name == "beam"
        assert " beam " in status_of(app)
        await type_and_send(pilot, "Hi")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert list(app.screen.messages[-1].stats.decoders) == ["beam"]


async def test_unavailable_decoder_says_why(backend, monkeypatch):
    class NeedsGpu(Decoder):
        name, key, description = "needs-gpu", "f12", "test entry"

        @classmethod
        def unavailable(cls, backend, values):
            return "needs a GPU"

    monkeypatch.setitem(DECODERS, NeedsGpu.name, NeedsGpu)
    app = SpecchatApp(settings=RunConfig(), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        before = app.session.decoder_name
        await pilot.press("f12")
        await pilot.pause()
        assert app.session.decoder_name == before == default_decoder(backend)
        assert any("needs a GPU" in n.message for n in app._notifications)


@pytest.mark.parametrize("key", ["escape", "ctrl+c"])
async def test_escape_cancels_and_keeps_text(backend, key):
    """Esc (or Ctrl+C, a terminal's interrupt key) while the worker is parked after step 3: the
    engine stops before step 4."""
    app = SpecchatApp(settings=RunConfig(max_tokens=400), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        with StepGate(app.session.engine, after=3) as gate:
            await type_and_send(pilot, LONG_PROMPT)
            await wait_until(pilot, gate.held.is_set)
            await pilot.press(key)
            gate.release()
            await app.workers.wait_for_complete()
            await pilot.pause()
        answer = app.screen.messages[-1]
        assert answer.finish_reason == "cancelled"
        assert answer.content.strip()
        assert answer.stats.generated_tokens == 3 and len(gate.decoders) == 3
        widget = app.screen.query(AssistantMessage).last()
        assert "stopped" in str(widget.query_one(".role").render())
        assert widget.text == answer.content
        assert "cancelled" in status_of(app)
        assert not app.session.busy


async def test_ctrl_c_without_an_answer_copies_the_selection(backend):
    """Ctrl+C stops an answer only while one runs: otherwise it copies what is selected in the
    prompt, and nothing is sent or stopped."""
    app = SpecchatApp(settings=RunConfig(), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        prompt = app.screen.query_one(PromptInput)
        prompt.insert("a line to copy")
        prompt.select_all()
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.clipboard == "a line to copy"
        assert prompt.text == "a line to copy" and not app.screen.messages


@pytest.mark.slow
async def test_escape_before_the_engine_starts_stops_the_answer(backend):
    """Esc while the worker has built the prompt but not yet called the engine is kept: the
    answer stops before its first step (it used to be lost and the answer ran to the end)."""
    app = SpecchatApp(settings=RunConfig(max_tokens=400), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        with StepGate(app.session.engine, after=0) as gate:
            await type_and_send(pilot, LONG_PROMPT)
            await wait_until(pilot, gate.held.is_set)
            assert app.session.busy
            await pilot.press("escape")
            gate.release()
            await app.workers.wait_for_complete()
            await pilot.pause()
        answer = app.screen.messages[-1]
        assert answer.role == "assistant" and answer.finish_reason == "cancelled"
        assert answer.stats.generated_tokens == 0 and gate.decoders == []
        widget = app.screen.query(AssistantMessage).last()
        assert "stopped" in str(widget.query_one(".role").render())
        assert "cancelled" in status_of(app)
        assert not app.session.busy

        # the next question's prompt keeps the first question but no empty answer to it
        prompts = []
        generate = app.session.engine.generate
        app.session.engine.generate = lambda request, cancel=None: (
            prompts.append(request.prompt_ids) or generate(request, cancel)
        )
        await type_and_send(pilot, "Say yes.")
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = b"".join(backend.token_bytes(t) for t in prompts[0]).decode()
        assert LONG_PROMPT in text and "Say yes." in text
        assert text.count("<|im_start|>assistant") == 1, text  # only the one being answered
        assert app.screen.messages[-1].content.strip()


async def test_regenerate_shows_the_new_version_in_place_of_the_old(backend):
    """The transcript shows one answer, the new version (the old one is its sibling: see
    test_branches.py); greedy regenerates the same text."""
    app = SpecchatApp(settings=RunConfig(max_tokens=12), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "Say hello.")
        await app.workers.wait_for_complete()
        await pilot.pause()
        first = app.screen.messages[-1].content
        await pilot.press("ctrl+r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        messages = app.screen.messages
        assert [m.role for m in messages] == ["user", "assistant"]
        assert messages[-1].content == first  # greedy: the same answer again
        stored = app.session.history.messages(app.screen.chat_id)
        assert [m.role for m in stored] == ["user", "assistant"]
        assert len(app.screen.query(AssistantMessage)) == 1


async def test_chat_persists_across_restart(backend, private_dirs):
    app = SpecchatApp(settings=RunConfig(max_tokens=16), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "Say hi.")
        await app.workers.wait_for_complete()
        await pilot.pause()
        before = [(m.role, m.content, m.runs) for m in app.screen.messages]
    again = SpecchatApp(settings=RunConfig(), backend=backend)
    async with again.run_test(size=SIZE) as pilot:
        assert again.screen.messages == []
        await pilot.press("ctrl+l")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        after = [(m.role, m.content, m.runs) for m in again.screen.messages]
        assert after == before
        texts = [w.text for w in again.screen.query(AssistantMessage)]
        assert texts == [before[1][1]]
        assert again.screen.sub_title == "Say hi."


async def test_colour_toggle_hides_the_runs_keeps_the_markdown_and_persists(backend, fixed_chat):
    store, chat = fixed_chat
    app = SpecchatApp(settings=RunConfig(), backend=backend, history=store, chat_id=chat)
    async with app.run_test(size=SIZE) as pilot:
        first, last = app.screen.query(AssistantMessage)
        coloured = body_lines(app, first)
        markdown = ["".join(char for char, _ in line) for line in body_lines(app, last)]
        assert first.body.palette is not None and any("• the cat" in line for line in markdown)
        await pilot.press("ctrl+t")
        await pilot.pause()
        plain = body_lines(app, first)
        assert first.body.palette is None and plain != coloured
        assert [[c for c, _ in line] for line in plain] == [
            [c for c, _ in line] for line in coloured
        ]
        shown = ["".join(char for char, _ in line) for line in body_lines(app, last)]
        assert shown == markdown, "still Markdown"
        assert not app.session.settings.colour_runs
    from specchat.settings import load_settings

    saved, error = load_settings()
    assert error is None and saved.colour_runs is False


async def test_export_and_copy(backend, fixed_chat, private_dirs):
    store, chat = fixed_chat
    app = SpecchatApp(settings=RunConfig(), backend=backend, history=store, chat_id=chat)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+o")
        assert app.clipboard.startswith("Sure:")
        path = app.screen.action_export()
        assert path is not None and path.is_relative_to(private_dirs / "data")
        text = path.read_text()
        assert "## You" in text and "*(stopped)*" in text


async def test_the_chat_opens_on_the_backends_own_default(hf_bundled, private_dirs):
    """No decoder chosen: on transformers with the bundled model the chat opens on the draft
    model (which copies too), the backend's default, not the one named before it loaded."""
    app = SpecchatApp(settings=RunConfig(max_tokens=4), backend=hf_bundled)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.session.engine is not None)
        assert app.session.decoder_name == default_decoder(hf_bundled) == "draft"
        assert default_decoder() != "draft"


@pytest.mark.parametrize("content", ["decoder = [oops", "max_tokens = 'many'"])
async def test_broken_settings_file_gives_message(backend, private_dirs, content):
    (private_dirs / "config").mkdir(exist_ok=True)
    (private_dirs / "config" / "settings.toml").write_text(content)
    app = SpecchatApp(backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.settings_error and "broken" in app.settings_error
        assert any("broken" in n.message for n in app._notifications)
        assert app.session.decoder_name == default_decoder(backend)  # the defaults


async def test_model_loads_in_the_background_with_progress():
    app = SpecchatApp(settings=RunConfig(max_tokens=4))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.session.engine is not None)
        await pilot.pause()
        assert app.session.ready_seconds is not None
        assert "SmolLM2" in status_of(app)
        assert any("model ready in" in n.message for n in app._notifications)


async def test_streams_markdown_when_colours_are_off(backend):
    app = SpecchatApp(settings=RunConfig(max_tokens=40, colour_runs=False), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "Give a short list of two fruits.")
        await app.workers.wait_for_complete()
        await pilot.pause()
        widget = app.screen.query(AssistantMessage).last()
        assert widget.body.palette is None
        assert widget.body.text == app.screen.messages[-1].content


@pytest.mark.slow
async def test_transcript_follows_the_bottom_until_the_user_scrolls_up(backend):
    """While an answer streams the transcript follows its end, until the user scrolls up: then
    it stays where they scrolled to. The second answer's worker is parked before its first step
    and its text is handed to the screen by the test, so the answer is still streaming whatever
    the machine's speed."""
    from textual.containers import VerticalScroll

    app = SpecchatApp(settings=RunConfig(max_tokens=160), backend=backend)
    async with app.run_test(size=(60, 16)) as pilot:
        chat = app.screen
        transcript = chat.query_one("#transcript", VerticalScroll)
        await type_and_send(pilot, LONG_PROMPT)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert transcript.max_scroll_y > 0
        assert transcript.scroll_y == transcript.max_scroll_y, "followed the answer down"

        first_answer_end = transcript.max_scroll_y
        with StepGate(app.session.engine, after=0) as gate:
            await type_and_send(pilot, LONG_PROMPT)
            await wait_until(pilot, gate.held.is_set)

            async def stream(lines: int) -> None:
                for line in range(lines):
                    chat._stream.put(
                        StepEvent((7,), f"line {line} of the story\n\n", 0, 0, "greedy", 0)
                    )
                await chat._flush_steps()
                await pilot.pause()

            await stream(12)
            assert transcript.max_scroll_y > first_answer_end + 4
            assert transcript.scroll_y == transcript.max_scroll_y, "followed the new lines"
            for _ in range(6):  # what six notches of a mouse wheel do
                transcript._scroll_up_for_pointer(animate=False)
            await pilot.pause()
            held = transcript.scroll_y
            await stream(12)
            assert transcript.max_scroll_y > held
            assert transcript.scroll_y == held, "stayed where the user scrolled to"
            assert app.session.busy, "the answer is still streaming"
            await pilot.press("escape")
            gate.release()
            await app.workers.wait_for_complete()
            await pilot.pause()


async def test_regenerate_drafts_from_the_old_answer(backend):
    """Ctrl+R offers the answer it replaces as a draft source: greedy verifies it again in long
    passes, and the runs say where their drafts came from."""
    app = SpecchatApp(settings=RunConfig(max_tokens=40, decoder="suffix"), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "Name three colours of the rainbow.")
        await app.workers.wait_for_complete()
        await pilot.pause()
        first = app.screen.messages[-1]
        await pilot.press("ctrl+r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        again = app.screen.messages[-1]
        assert again.content == first.content
        assert "previous" in {source for *_, source in again.runs}
        assert again.stats.steps < first.stats.steps


async def test_colour_by_source_key_switches_the_legend_and_persists(backend, fixed_chat):
    store, chat = fixed_chat
    app = SpecchatApp(settings=RunConfig(), backend=backend, history=store, chat_id=chat)
    async with app.run_test(size=SIZE) as pilot:
        legend = app.screen.query_one("#legend")
        assert "tokens per step" in str(legend.render())
        await pilot.press("ctrl+f")
        await pilot.pause()
        assert app.session.settings.colour_by == "source"
        assert "saved" in str(legend.render()) and "recycled" in str(legend.render())
        first = app.screen.query(AssistantMessage).first()
        assert first.colour_by == "source"
    from specchat.settings import load_settings

    saved, error = load_settings()
    assert error is None and saved.colour_by == "source"


@pytest.mark.slow
async def test_answers_draft_from_saved_chats_unless_the_setting_is_off(backend):
    """The same question in a new chat: with the saved chats as a source, suffix copies the
    earlier answer; with the setting off it never reads them."""
    for allowed in (True, False):
        settings = RunConfig(max_tokens=40, decoder="suffix", draft_from_saved_chats=allowed)
        app = SpecchatApp(settings=settings, backend=backend)
        async with app.run_test(size=SIZE) as pilot:
            await type_and_send(pilot, "Name three colours of the rainbow.")
            await app.workers.wait_for_complete()
            await pilot.pause()
            await pilot.press("ctrl+n")
            await pilot.pause()
            assert (app.session.saved_chats is not None) == allowed
            if allowed:
                app.session.saved_chats.wait_idle()  # the chat just saved is indexed
            await type_and_send(pilot, "Name three colours of the rainbow.")
            await app.workers.wait_for_complete()
            await pilot.pause()
            sources = {source for *_, source in app.screen.messages[-1].runs}
            assert ("saved" in sources) == allowed
