"""SVG snapshots of an answer rendered as Markdown with its runs laid over it: a heading, a list,
a highlighted code fence and a table, with runs of every length and from every draft source
(`conftest.MARKDOWN_STEPS`), coloured by length and by source, in the three themes; and its
drafts view. Prose takes a run's colour as its foreground, code a tint of it as its background.

(That a streamed answer draws exactly as the finished one is `test_chat.py`'s
`test_streamed_answer_looks_as_the_finished_one`.)"""

from __future__ import annotations

import pytest

from .conftest import app_on_chat
from .test_snapshots import still_cursor

SIZE = (100, 40)
THEMES = ("specchat-safe", "specchat-dark", "specchat-light")


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("colour_by", ["length", "source"])
def test_markdown_answer_with_runs(snap_compare, backend, markdown_chat, theme, colour_by):
    app = app_on_chat(backend, markdown_chat, theme=theme, colour_by=colour_by)
    assert snap_compare(app, terminal_size=SIZE, run_before=still_cursor)


def test_markdown_answer_without_runs(snap_compare, backend, markdown_chat):
    """Ctrl+T: the runs hidden, the Markdown the same."""
    app = app_on_chat(backend, markdown_chat)
    assert snap_compare(app, press=["ctrl+t"], terminal_size=SIZE, run_before=still_cursor)


@pytest.mark.parametrize("theme", ["specchat-safe", "specchat-light"])
def test_drafts_view(snap_compare, backend, markdown_chat, theme):
    """`d` on the answer: figures, oracle, tokens per step, and each step's draft with its
    rejected tail struck through."""
    app = app_on_chat(backend, markdown_chat, theme=theme)
    assert snap_compare(
        app, press=["ctrl+up", "d"], terminal_size=(110, 36), run_before=still_cursor
    )
