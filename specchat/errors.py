"""One exception type for every error a user caused and can fix.

The CLI turns it into a single line on stderr and exit code 2; anything else is a bug.
"""


class SpecchatError(Exception):
    """Bad input (model, draft, prompt, decoder, config) explained in one line."""


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type when it has none): what a user is shown of
    a failure inside a library."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


class HistoryError(SpecchatError):
    """The chat database cannot be used: corrupt, locked by another process past the timeout, or
    written by a newer specchat. One line; the CLI exits with 2, the TUI shows a notification."""


class FolderError(SpecchatError, OSError):
    """A folder specchat keeps files in cannot be made (locations.py). An OSError too: where a
    write is optional (a cost table, after an answer) the callers that already let an unwritable
    cache stop nothing catch it as one."""
