"""SVG snapshots of branches and search, on the fixed chat of the other snapshots with versions
added: the branch markers ‹i/n› on an edited question and a regenerated answer, and the search
screen with its results."""

from __future__ import annotations

from specchat.app.tui.screens.search import SearchScreen
from specchat.history import StoredMessage

from .conftest import app_on_chat
from .test_snapshots import SIZE, still_cursor


def with_branches(fixed_chat):
    """The fixed chat's second question edited, and the edited one's answer regenerated."""
    store, chat = fixed_chat
    first_answer = store.messages(chat)[1]
    store.add_message(chat, StoredMessage("user", "And as a table?"), parent_id=first_answer.id)
    question = store.messages(chat)[-1]
    store.add_message(chat, StoredMessage("assistant", "| who | where |\n|---|---|\n| cat | mat |"))
    store.add_message(
        chat,
        StoredMessage(
            "assistant", "A table:\n\ncat | mat", "pld", "eos", runs=[(0, 7, 3, "previous")]
        ),
        parent_id=question.id,
    )
    return store, chat


def test_branch_markers(snap_compare, backend, fixed_chat):
    assert snap_compare(
        app_on_chat(backend, with_branches(fixed_chat)),
        terminal_size=SIZE,
        run_before=still_cursor,
    )


def test_search_screen(snap_compare, backend, fixed_chat):
    async def search(pilot) -> None:
        await still_cursor(pilot)
        pilot.app.push_screen(SearchScreen("cat"))
        await pilot.pause()
        pilot.app.screen.query_one("#search-input").cursor_blink = False
        await pilot.pause()

    assert snap_compare(
        app_on_chat(backend, with_branches(fixed_chat)), terminal_size=SIZE, run_before=search
    )


def with_attached_file(fixed_chat):
    """A question that attached a file, after the fixed chat, and the chat's system prompt."""
    from specchat.attachments import Attachment, attached_spans, with_attachments

    store, chat = fixed_chat
    files = [Attachment("src/maths.py", "def add(a, b):\n    return a + b\n")]
    question = "Rename add to plus in @src/maths.py"
    store.add_message(
        chat,
        StoredMessage("user", with_attachments(question, files), attached=attached_spans(files)),
    )
    store.add_message(
        chat,
        StoredMessage(
            "assistant", "def plus(a, b):\n    return a + b", "suffix", "eos",
            runs=[(0, 30, 9, "prompt")],
        ),
    )  # fmt: skip
    store.set_system_prompt(chat, "You review Python.")
    return store, chat


def test_an_attached_file_folded_and_shown(snap_compare, backend, fixed_chat):
    """The question shows its file folded to one line; `o` on it shows the file's text."""

    async def unfold(pilot) -> None:
        await still_cursor(pilot)
        from specchat.app.tui.widgets.message import UserMessage

        pilot.app.screen.query(UserMessage).last().focus()
        await pilot.press("o")
        await pilot.pause()

    assert snap_compare(
        app_on_chat(backend, with_attached_file(fixed_chat)), terminal_size=SIZE, run_before=unfold
    )
