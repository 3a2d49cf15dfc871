"""Your own text in the chat (issue 52): files attached with `@path` (Tab completes it, F12
picks it), folded in the transcript and unfolded with `o`; a system prompt per chat, set from the
command palette, kept with the chat and followed by the next answer; the default for new chats
from the settings. Against the real bundled model and a real SQLite store."""

from __future__ import annotations

import pytest

from specchat.app.tui.app import SpecchatApp
from specchat.app.tui.screens.file_picker import FilePickerScreen
from specchat.app.tui.screens.system_prompt import SystemPromptScreen
from specchat.app.tui.widgets.message import AssistantMessage, UserMessage
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.history import HistoryStore
from specchat.options import RunConfig

from .conftest import wait_until

pytestmark = pytest.mark.anyio

SIZE = (110, 34)
CODE = "def add(a, b):\n    return a + b\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A folder the chat was started in, holding a source file, a binary and a sub-folder."""
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "maths.py").write_text(CODE)
    (folder / "notes.txt").write_text("remember the milk\n")
    (folder / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0")
    monkeypatch.chdir(folder)
    return folder


def _app(backend, **settings) -> SpecchatApp:
    return SpecchatApp(
        settings=RunConfig(max_tokens=8, decoder="greedy", **settings), backend=backend
    )


def _notes(app) -> list[str]:
    return [n.message for n in app._notifications]


async def _answered(pilot, count: int) -> None:
    def done() -> bool:
        answers = pilot.app.screen.query(AssistantMessage)
        return len(answers) == count and all(a.stored is not None for a in answers)

    await wait_until(pilot, lambda: done() and not pilot.app.screen.answering)


async def test_at_path_attaches_the_file_folded_and_o_shows_it(backend, project):
    app = _app(backend)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.screen
        chat.query_one(PromptInput).insert("Rename add to plus in @src/maths.py please")
        await pilot.press("enter")
        await _answered(pilot, 1)
        question = chat.query_one(UserMessage)
        shown = str(question.query_one(".attachment").render())
        assert "src/maths.py" in shown and "2 lines" in shown and "return a + b" not in shown
        assert str(question.query_one(".body").render()) == (
            "Rename add to plus in @src/maths.py please"
        )
        # the model got the file's text before the question, and the store kept it
        prompt = chat.conversation.prompt()[0].content
        assert prompt.index("return a + b") < prompt.index("Rename add to plus")
        stored = HistoryStore(app.session.history.path).messages(chat.chat_id)[0]
        assert stored.attached and stored.attached[0][0] == "src/maths.py"
        assert stored.question == "Rename add to plus in @src/maths.py please"
        assert chat.conversation.title.startswith("Rename add to plus")
        # `o` on the question shows the file; again folds it
        question.focus()
        await pilot.press("o")
        assert "return a + b" in str(question.query_one(".attachment").render())
        await pilot.press("o")
        assert "return a + b" not in str(question.query_one(".attachment").render())
        # search finds the attached text, in this chat's question
        hits = app.session.history.search("return")
        assert [(h.chat_id, h.role) for h in hits] == [(chat.chat_id, "user")]


async def test_a_file_that_cannot_be_attached_sends_nothing(backend, project):
    app = _app(backend)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.screen
        prompt = chat.query_one(PromptInput)
        for text, says in (
            ("What is in @missing.py", "@missing.py: no such file"),
            ("Describe @image.png", "binary file"),
            ("List @src", "is a folder"),
        ):
            prompt.insert(text)
            await pilot.press("enter")
            await wait_until(pilot, lambda says=says: any(says in n for n in _notes(app)))
            assert prompt.text == text  # kept for the user to fix
            assert not chat.query(UserMessage) and chat.chat_id is None
            prompt.clear()
        # "@alice" names no file: plain text, sent as typed
        prompt.insert("Say hi to @alice")
        await pilot.press("enter")
        await _answered(pilot, 1)
        assert not chat.conversation.messages[0].attached


async def test_tab_completes_the_path_and_f12_picks_a_file(backend, project):
    app = _app(backend)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.screen
        prompt = chat.query_one(PromptInput)
        prompt.insert("Explain @s")
        await pilot.press("tab")
        assert prompt.text == "Explain @src/"
        await pilot.press("tab")
        assert prompt.text == "Explain @src/maths.py "
        assert prompt.has_focus  # Tab completed instead of moving the focus
        # a bare @ and Tab: the picker, whose choice lands at the cursor
        prompt.clear()
        prompt.insert("Summarise @")
        await pilot.press("tab")
        await wait_until(pilot, lambda: isinstance(app.screen, FilePickerScreen))
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is chat)
        prompt.clear()
        prompt.insert("Summarise")
        await pilot.press("f12")
        await wait_until(pilot, lambda: isinstance(app.screen, FilePickerScreen))
        tree = app.screen.query_one("#file-tree")
        await wait_until(pilot, lambda: tree.cursor_node is not None and tree.root.children)
        names = [str(node.label) for node in tree.root.children]
        assert "notes.txt" in names and not any(n.startswith(".") for n in names)
        tree.move_cursor(next(n for n in tree.root.children if str(n.label) == "notes.txt"))
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen is chat)
        assert prompt.text == "Summarise @notes.txt "
        await pilot.press("enter")
        await _answered(pilot, 1)
        assert "remember the milk" in chat.conversation.prompt()[0].content


async def _palette(pilot, title: str) -> None:
    await pilot.press("ctrl+p")
    await pilot.pause()
    for char in title:
        await pilot.press(char if char != " " else "space")
    await pilot.pause(0.3)
    await pilot.press("enter")


async def test_a_chats_system_prompt_from_the_palette(backend, project):
    app = _app(backend, system_prompt="You are terse.")
    async with app.run_test(size=SIZE) as pilot:
        chat = app.screen
        # a new chat starts with the default from the settings
        assert chat.conversation.system_prompt == "You are terse."
        chat.query_one(PromptInput).insert("Name a colour.")
        await pilot.press("enter")
        await _answered(pilot, 1)
        first = chat.conversation.prompt()
        assert first[0].role == "system" and first[0].content == "You are terse."
        store = app.session.history
        assert store.system_prompt(chat.chat_id) == "You are terse."

        await _palette(pilot, "System prompt of this chat")
        await wait_until(pilot, lambda: isinstance(app.screen, SystemPromptScreen))
        area = app.screen.query_one("#system-prompt-text")
        assert area.text == "You are terse."
        area.text = "Answer like a pirate."
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.screen is chat)
        assert store.system_prompt(chat.chat_id) == "Answer like a pirate."
        chat.query_one(PromptInput).insert("Name another.")
        await pilot.press("enter")
        await _answered(pilot, 2)
        assert chat.conversation.prompt()[0].content == "Answer like a pirate."

        # Esc leaves it as it was; an empty one clears it
        await _palette(pilot, "System prompt of this chat")
        await wait_until(pilot, lambda: isinstance(app.screen, SystemPromptScreen))
        app.screen.query_one("#system-prompt-text").text = "ignored"
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is chat)
        assert store.system_prompt(chat.chat_id) == "Answer like a pirate."
        chat_id = chat.chat_id

        # the default changes new chats only, and is saved in the settings
        await _palette(pilot, "Default system prompt")
        await wait_until(pilot, lambda: isinstance(app.screen, SystemPromptScreen))
        app.screen.query_one("#system-prompt-text").text = ""
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.screen is chat)
        assert app.session.settings.system_prompt is None
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: chat.chat_id is None)
        assert chat.conversation.system_prompt is None
        await chat.open_chat(chat_id)
        assert chat.conversation.system_prompt == "Answer like a pirate."


async def test_a_file_past_the_context_window_is_one_notice_and_the_question_comes_back(
    backend, project
):
    (project / "long.txt").write_text("word " * 4000)
    app = _app(backend)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.screen
        prompt = chat.query_one(PromptInput)
        prompt.insert("Summarise @long.txt")
        await pilot.press("enter")
        await wait_until(pilot, lambda: any("context window" in n for n in _notes(app)))
        await wait_until(pilot, lambda: prompt.text == "Summarise @long.txt")
        assert not chat.query(UserMessage) and not chat.conversation.messages
