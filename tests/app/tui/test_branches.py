"""Editing, branches, copying, search and the chat list, driven as a person uses them, against the
real bundled model and real SQLite files."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from specchat.app.tui.app import SpecchatApp
from specchat.app.tui.screens.confirm import ConfirmScreen
from specchat.app.tui.screens.search import SearchScreen
from specchat.app.tui.widgets.message import AssistantMessage, UserMessage
from specchat.app.tui.widgets.prompt_input import PromptInput
from specchat.history import HistoryStore, StoredMessage
from specchat.options import RunConfig

from .conftest import wait_until

pytestmark = pytest.mark.anyio
SIZE = (110, 34)


def role_line(widget) -> str:
    return str(widget.query_one(".role").render())


def notices(app) -> list[str]:
    return [n.message for n in app._notifications]


async def answered(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


@pytest.mark.slow
async def test_up_edits_the_last_question_and_left_switches_back(backend):
    app = SpecchatApp(settings=RunConfig(max_tokens=8), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.screen
        prompt = chat.query_one(PromptInput)
        prompt.insert("Name a colour.")
        await pilot.press("enter")
        await answered(pilot)
        first_answer = chat.messages[-1].content

        await pilot.press("up")  # the prompt is empty: edit the last question
        assert prompt.text == "Name a colour." and prompt.border_title
        await pilot.press("ctrl+u")  # the cursor is at the end: clear the line
        prompt.insert("Name a fruit.")
        await pilot.press("enter")
        await answered(pilot)
        assert [m.role for m in chat.messages] == ["user", "assistant"]
        assert chat.messages[0].content == "Name a fruit."
        question = chat.query(UserMessage).first()
        assert "‹2/2›" in role_line(question)
        assert len(chat.query(AssistantMessage)) == 1
        stored = app.session.history.messages(chat.chat_id)
        assert [(m.content, m.branch) for m in stored][0] == ("Name a fruit.", (2, 2))

        await pilot.press("ctrl+up")  # the last message (the answer), then the question
        await pilot.press("up")
        assert app.focused is question
        await pilot.press("left")
        await pilot.pause()
        assert [m.content for m in chat.messages] == ["Name a colour.", first_answer]
        focused = app.focused
        assert isinstance(focused, UserMessage) and focused.stored.content == "Name a colour."
        assert "‹1/2›" in role_line(focused)
        await pilot.press("escape")  # back to the prompt
        assert app.focused is prompt


async def test_escape_cancels_an_edit(backend):
    app = SpecchatApp(settings=RunConfig(max_tokens=4), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        prompt = app.screen.query_one(PromptInput)
        prompt.insert("Hi")
        await pilot.press("enter")
        await answered(pilot)
        await pilot.press("up")
        assert prompt.text == "Hi"
        await pilot.press("escape")
        assert prompt.text == "" and not prompt.border_title
        prompt.insert("Hello")
        await pilot.press("enter")
        await answered(pilot)
        # an ordinary send after a cancelled edit continues the chat
        assert [m.content for m in app.screen.messages][::2] == ["Hi", "Hello"]


async def test_regenerate_adds_a_sibling_answer(backend):
    app = SpecchatApp(settings=RunConfig(max_tokens=12), backend=backend)
    async with app.run_test(size=SIZE) as pilot:
        app.screen.query_one(PromptInput).insert("Say hello.")
        await pilot.press("enter")
        await answered(pilot)
        first = app.screen.messages[-1]
        await pilot.press("ctrl+r")
        await answered(pilot)
        messages = app.screen.messages
        assert [m.role for m in messages] == ["user", "assistant"]
        assert messages[-1].content == first.content  # greedy: the same answer again
        assert messages[-1].id != first.id
        answer = app.screen.query(AssistantMessage).last()
        assert len(app.screen.query(AssistantMessage)) == 1 and "‹2/2›" in role_line(answer)
        history = app.session.history
        assert history.siblings(first.id) == [first.id, messages[-1].id]
        await pilot.press("ctrl+up")
        await pilot.press("left")  # the first answer again
        await pilot.pause()
        assert app.screen.messages[-1].id == first.id
        assert "‹1/2›" in role_line(app.screen.query(AssistantMessage).last())


@pytest.fixture
def code_chat(private_dirs) -> tuple[HistoryStore, int]:
    store = HistoryStore(private_dirs / "data" / "code.sqlite3")
    chat = store.new_chat("Code")
    store.add_message(chat, StoredMessage("user", "Two snippets please"))
    answer = "First:\n\n```python\nprint('one')\n```\n\nSecond:\n\n```sh\nls -l\n```\n"
    store.add_message(chat, StoredMessage("assistant", answer, "greedy", "eos"))
    return store, chat


async def test_copy_a_code_block_and_a_message_from_the_keyboard(backend, code_chat):
    store, chat = code_chat
    app = SpecchatApp(settings=RunConfig(), backend=backend, history=store, chat_id=chat)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+up")
        assert isinstance(app.focused, AssistantMessage)
        await pilot.press("y")
        assert app.clipboard == "print('one')"
        await pilot.press("y")
        assert app.clipboard == "ls -l"
        # no real terminal here: the user is told it did not reach the clipboard
        assert any("not copied" in n and "OSC 52" in n for n in notices(app))
        await pilot.press("up")
        await pilot.press("c")
        assert app.clipboard == "Two snippets please"
        await pilot.press("y")
        assert any("no code block" in n for n in notices(app))


@pytest.fixture
def two_chats(private_dirs) -> tuple[HistoryStore, int, int]:
    """A chat whose older branch mentions a lighthouse, and another chat."""
    store = HistoryStore(private_dirs / "data" / "search.sqlite3")
    keeper = store.new_chat("Lighthouse keeper")
    question = store.add_message(keeper, StoredMessage("user", "Describe a lighthouse at night"))
    store.add_message(keeper, StoredMessage("assistant", "A beam sweeps the dark sea."))
    store.add_message(keeper, StoredMessage("user", "Describe a harbour"), parent_id=None)
    store.add_message(keeper, StoredMessage("assistant", "Boats rock at their moorings."))
    other = store.new_chat("Cooking")
    store.add_message(other, StoredMessage("user", "How do I boil an egg?"))
    return store, keeper, question


async def test_search_opens_the_chat_at_the_message_in_its_branch(backend, two_chats):
    store, keeper, question = two_chats
    app = SpecchatApp(settings=RunConfig(), backend=backend, history=store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+k")
        await pilot.pause()
        assert isinstance(app.screen, SearchScreen)
        await pilot.press(*"lightho")  # a word's start finds it
        await pilot.pause()
        search = app.screen
        assert [(h.chat_id, h.message_id) for h in search.hits] == [(keeper, question)]
        await pilot.press("enter")  # to the results
        await pilot.press("enter")  # open
        await wait_until(pilot, lambda: isinstance(app.focused, UserMessage))
        chat = app.screen
        assert chat.chat_id == keeper
        assert [m.content for m in chat.messages][0] == "Describe a lighthouse at night"
        assert isinstance(app.focused, UserMessage) and app.focused.stored.id == question
        assert "‹1/2›" in role_line(app.focused)


@pytest.mark.parametrize("turns", [1, 20])
async def test_search_shows_the_message_it_opens(backend, private_dirs, turns):
    """The message a search opens is on screen: in a short chat opened from an empty one the
    transcript kept the empty chat's offset and showed nothing; in a long one the hit, near its
    start, is scrolled to."""
    store = HistoryStore(private_dirs / "data" / "search.sqlite3")
    chat = store.new_chat("Animals")
    hit = store.add_message(chat, StoredMessage("user", "Tell me about the walrus"))
    store.add_message(chat, StoredMessage("assistant", "A fact.\n\n" * 3))
    for turn in range(1, turns):
        store.add_message(chat, StoredMessage("user", f"And animal number {turn}?"))
        store.add_message(chat, StoredMessage("assistant", "A fact.\n\n" * 3))
    app = SpecchatApp(settings=RunConfig(), backend=backend, history=store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+k")
        await pilot.pause()
        await pilot.press(*"walrus", "enter", "enter")
        await wait_until(pilot, lambda: isinstance(app.focused, UserMessage))
        await pilot.pause(0.3)
        assert app.focused.stored.id == hit
        view = app.screen.query_one("#transcript").content_region
        assert view.contains_region(app.focused.region), (view, app.focused.region)


async def test_search_says_when_nothing_is_found(backend, two_chats):
    store, *_ = two_chats
    app = SpecchatApp(settings=RunConfig(), backend=backend, history=store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+k")
        await pilot.pause()
        app.screen.query_one(Input).value = "zebra"
        await pilot.pause()
        results = app.screen.query_one("#search-results")
        assert "nothing found" in str(results.get_option_at_index(0).prompt)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, SearchScreen)


async def test_chat_list_delete_asks_first(backend, two_chats):
    store, keeper, _ = two_chats
    app = SpecchatApp(settings=RunConfig(), backend=backend, history=store, chat_id=keeper)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+l")
        await pilot.pause()
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert "Cooking" in app.screen.question  # the newest chat is highlighted first
        await pilot.press("n")
        await pilot.pause()
        assert len(store.list_chats()) == 2
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("y")
        await wait_until(pilot, lambda: len(store.list_chats()) == 1)
        assert store.list_chats()[0].id == keeper
        await pilot.press("escape")
