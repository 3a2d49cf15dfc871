"""Copying to the system clipboard from the keyboard. Textual's `App.copy_to_clipboard` writes the
OSC 52 escape, which the terminal (or tmux with `set-clipboard on`, or ssh's terminal) turns into
a clipboard write; without a real terminal there is nobody to receive it, and the user is told so
instead of being told it worked."""

from __future__ import annotations

import re
import sys

from textual.app import App

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.MULTILINE | re.DOTALL)


def code_blocks(markdown: str) -> list[str]:
    """The fenced code blocks of a Markdown text, in order, without their fences."""
    return [match.group(2).rstrip("\n") for match in _FENCE.finditer(markdown)]


def has_terminal(app: App) -> bool:
    """Whether an OSC 52 write can reach a terminal: not headless, output a TTY."""
    stream = sys.__stdout__
    return not app.is_headless and stream is not None and stream.isatty()


def copy_to_clipboard(app: App, text: str, what: str) -> None:
    """Copy `text` and notify: `what` was copied, or why it could not reach the clipboard."""
    app.copy_to_clipboard(text)  # also kept in app.clipboard for pasting inside specchat
    if has_terminal(app):
        app.notify(f"{what} copied to the clipboard (OSC 52)", timeout=4)
    else:
        app.notify(
            f"{what} not copied: no terminal to reach the clipboard through (OSC 52)",
            severity="warning",
        )
