"""The real `specchat` in tmux: ask, edit the question with Up, see the branch marker, switch
back to the first version with Shift+Tab, Up and Left."""

from __future__ import annotations

import time

import pytest

from specchat.decoding.registry import default_decoder

from .tmux import (
    ask,
    capture,
    keys,
    needs_tmux,
    quit_and_close,
    start_specchat,
    wait_for,
    wait_until_usable,
)

pytestmark = needs_tmux


def answered(screen: str, after: str = "you") -> bool:
    """The answer after the last line holding `after` has ended: its header has no "…"."""
    lines = screen.splitlines()
    marks = [i for i, line in enumerate(lines) if after in line]
    if not marks or "ended:" not in screen:
        return False
    return any(
        f"assistant · {default_decoder()}" in line and "…" not in line
        for line in lines[marks[-1] + 1 :]
    )


def switched_with_left(session: str, tries: int = 4) -> bool:
    for _ in range(tries):
        keys(session, "Left")
        try:
            wait_for(session, lambda s: "‹1/2›" in s, limit=2.0)
            return True
        except AssertionError:
            continue
    return False


@pytest.mark.slow
def test_edit_a_question_see_the_branch_and_switch_back(private_dirs):
    session = start_specchat(private_dirs, "threads = 1\nmax_tokens = 12\n", 40, "branch")
    try:
        wait_until_usable(session)
        ask(session, "Name a colour.", shows=f"assistant · {default_decoder()}")
        wait_for(session, answered)

        keys(session, "Up")  # the prompt is empty: edit the last question
        wait_for(session, lambda s: "editing a question" in s)
        keys(session, "End")
        keys(session, "-l", " And a fruit?")
        keys(session, "Enter")
        screen = wait_for(session, lambda s: answered(s, after="you ‹2/2›"))
        assert "Name a colour. And a fruit?" in screen

        # Shift+Tab gives the answer the focus, Up the question, Left its first version. Up
        # moves the focus after the keys already read, so a Left typed at once still reaches the
        # answer: Left is pressed again until the switch shows. If the focus never got to the
        # messages (Up in the prompt edits the question instead), Esc undoes it and we start over.
        for _ in range(5):
            keys(session, "BTab")
            keys(session, "Up")
            if switched_with_left(session):
                break
            keys(session, "Escape")
        screen = wait_for(session, lambda s: "‹1/2›" in s)
        assert "Name a colour." in screen and "And a fruit?" not in screen
    finally:
        quit_and_close(session)


@pytest.mark.slow
def test_search_opens_a_short_chat_on_screen(private_dirs):
    """Ctrl+K, a word, Enter twice in a fresh chat: the short chat found is on screen (it opened
    below the view, the transcript blank, keeping the empty chat's bottom-anchored offset)."""
    from specchat.history import DB_FILE, HistoryStore, StoredMessage

    (private_dirs / "data").mkdir(parents=True, exist_ok=True)
    store = HistoryStore(private_dirs / "data" / DB_FILE)
    chat = store.new_chat("Animals")
    store.add_message(chat, StoredMessage("user", "Tell me about the walrus"))
    store.add_message(chat, StoredMessage("assistant", "It has long tusks."))
    store.close()
    session = start_specchat(private_dirs, "threads = 1\n", 30, "search")
    try:
        wait_until_usable(session)
        keys(session, "C-k")
        wait_for(session, lambda s: "Search all chats" in s)
        keys(session, "-l", "walrus")
        wait_for(session, lambda s: "Animals · you" in s)
        # Down goes to the results, Enter there opens the chat. (Enter in the search field goes
        # there too, but by a message: a second Enter typed at once can still reach the field.)
        # keys typed while the last letters' search still runs can be lost: press them again
        # while the search is still on screen (never in the chat, where Enter edits a question)
        for _ in range(10):
            if "Search all chats" not in capture(session):
                break
            keys(session, "Down")
            keys(session, "Enter")
            time.sleep(1.0)
        screen = wait_for(session, lambda s: "specchat — Animals" in s, limit=20)
        screen = wait_for(session, lambda s: "It has long tusks." in s, limit=5)
        assert "Tell me about the walrus" in screen and "Search all chats" not in screen
    finally:
        quit_and_close(session)
