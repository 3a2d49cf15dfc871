"""A user's own text in the prompt: files (`ask -f FILE`, `@path` in the chat) and what was
piped to `ask`.

Copying drafts pay most when the answer reuses text the user brought ("rename this function",
"fix this file"), so that text must reach the prompt whole: each file under its name in a fence
the text cannot close, then the question, as `llm` joins piped text and a prompt (its content
first). A file that is not UTF-8 text (a binary, an image) or cannot be read is one line and
nothing is sent.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from specchat.errors import SpecchatError

STDIN = "-"
# bytes read at most from one file: far beyond any context window, never a whole disk image
_MAX_BYTES = 8 * 2**20


@dataclass(frozen=True)
class Attachment:
    """Text the user brought: its name ("stdin" for piped text) and the text."""

    name: str
    text: str

    def block(self) -> str:
        """The text under its name, fenced by more backticks than any run inside it, the fence
        tagged with the language its name's extension says (a model answers code in kind)."""
        longest, run = 0, 0
        for char in self.text:
            run = run + 1 if char == "`" else 0
            longest = max(longest, run)
        fence = "`" * max(3, longest + 1)
        body = self.text if self.text.endswith("\n") else self.text + "\n"
        return f"{self.name}:\n{fence}{language_of(self.name)}\n{body}{fence}"


# a fence's language tag by file extension, where the tag is not the extension itself
_LANGUAGES = {
    "py": "python", "js": "javascript", "ts": "typescript", "rs": "rust", "rb": "ruby",
    "sh": "bash", "md": "markdown", "yml": "yaml", "h": "c", "hpp": "cpp", "cc": "cpp",
    "kt": "kotlin", "cs": "csharp",
}  # fmt: skip


def language_of(name: str) -> str:
    """The fence tag for a file called `name` ("" for piped text or no extension)."""
    suffix = name.rpartition(".")[2].lower() if "." in name.rpartition("/")[2] else ""
    return _LANGUAGES.get(suffix, suffix if suffix.isalnum() else "")


def decoded(data: bytes, name: str) -> str:
    """`data` as text, or one line: binary (a NUL byte) or not UTF-8."""
    if b"\0" in data:
        raise SpecchatError(f"{name} is a binary file, not text: nothing was sent")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecchatError(
            f"{name} is not UTF-8 text (byte {exc.start} is not valid): nothing was sent"
        ) from None


def read_file(path: str) -> Attachment:
    """A file's text under the name the user gave it."""
    try:
        with open(Path(path).expanduser(), "rb") as handle:
            data = handle.read(_MAX_BYTES + 1)
    except IsADirectoryError:
        raise SpecchatError(f"{path} is a folder, not a file: nothing was sent") from None
    except OSError as exc:
        raise SpecchatError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > _MAX_BYTES:
        raise SpecchatError(f"{path} is over {_MAX_BYTES // 2**20} MiB: nothing was sent")
    return Attachment(path, decoded(data, path))


def piped(stream: TextIO | None = None) -> bool:
    """Whether stdin is a pipe or a file (`cmd | specchat ask`, `< file`), not a terminal or
    /dev/null: only then does it join the prompt unasked."""
    stream = stream or sys.stdin
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError, AttributeError):  # no descriptor: a test's StringIO
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)


def read_stdin(stream: TextIO | None = None) -> Attachment | None:
    """Piped text (None where nothing came)."""
    stream = stream or sys.stdin
    buffer = getattr(stream, "buffer", None)
    data = buffer.read(_MAX_BYTES + 1) if buffer is not None else stream.read().encode()
    if len(data) > _MAX_BYTES:
        raise SpecchatError(f"stdin is over {_MAX_BYTES // 2**20} MiB: nothing was sent")
    text = decoded(data, "stdin")
    return Attachment("stdin", text) if text.strip() else None


def gather(files: list[str], stdin_piped: bool) -> list[Attachment]:
    """The files in order (`-` is stdin), and piped stdin where no `-f -` took it."""
    found = []
    for name in files:
        if name == STDIN:
            text = read_stdin()
            if text is None:
                raise SpecchatError("-f -: nothing came on stdin")
            found.append(text)
        else:
            found.append(read_file(name))
    if stdin_piped and STDIN not in files:
        text = read_stdin()
        if text is not None:
            found.append(text)
    return found


_SEPARATOR = "\n\n"


def question_of(question: str, attachments: list[Attachment]) -> tuple[str, list[Attachment]]:
    """(the question, what joins it) when `ask` may have been given no question: as with
    `echo "…" | llm`, text piped or one file given alone is the question itself; several files
    alone are sent under their names with nothing after them."""
    if question.strip() or not attachments:
        return question, attachments
    if len(attachments) == 1:
        return attachments[0].text.strip(), []  # the newline `echo` ends with is not meant
    return "", attachments


def with_attachments(question: str, attachments: list[Attachment]) -> str:
    """The prompt: each attachment under its name, then the question (where there is one)."""
    return _SEPARATOR.join([*(a.block() for a in attachments), *([question] if question else [])])


def attached_spans(attachments: list[Attachment]) -> list[tuple[str, int]]:
    """(name, characters) of each attachment's block in `with_attachments`'s text, the separator
    after it included: what the chat store keeps to fold them (`StoredMessage.attached`)."""
    return [(a.name, len(a.block()) + len(_SEPARATOR)) for a in attachments]


# `@path` in a chat message: an @ at the start of a word, then the path (no spaces), or
# `@"path with spaces"`
_MENTION = re.compile(r'(?<!\S)@(?:"([^"\n]+)"|(\S+))')


def mention_of(path: str) -> str:
    """How a message names `path`: `@path`, quoted where it holds a space."""
    return f'@"{path}"' if any(c.isspace() for c in path) else f"@{path}"


def _looks_like_path(word: str) -> bool:
    """A mention that names a file for sure: "@notes.txt", "@src/app.py", "@~/x"; "@alice"
    (a name, not a file here) stays text."""
    return "/" in word or "." in word or word.startswith("~")


def _path(word: str, folder: Path) -> Path:
    """A path the user typed, from `folder` unless absolute (or under ~)."""
    path = Path(word).expanduser()
    return path if path.is_absolute() else folder / path


def mentions(text: str, folder: Path | None = None) -> list[str]:
    """The `@path` mentions of a chat message that name files, in order, each once: existing
    files and folders, and words that look like paths (so a mistyped one is an error, not text)."""
    folder = folder or Path.cwd()
    found: list[str] = []
    for match in _MENTION.finditer(text):
        word = match.group(1) or match.group(2).rstrip(",;:!?)")  # "see @a.py, then": a.py
        if not match.group(1) and word.endswith(".") and not _path(word, folder).exists():
            word = word[:-1]  # a sentence's full stop
        if word not in found and (_path(word, folder).exists() or _looks_like_path(word)):
            found.append(word)
    return found


def attach_mentions(text: str, folder: Path | None = None) -> list[Attachment]:
    """The files a chat message names with `@path`, read (relative to `folder`); one line and
    nothing sent for a file that is missing, binary or unreadable."""
    folder = folder or Path.cwd()
    attached = []
    for word in mentions(text, folder):
        path = _path(word, folder)
        if not path.exists():
            raise SpecchatError(f"@{word}: no such file: nothing was sent")
        attachment = read_file(str(path))
        attached.append(Attachment(word, attachment.text))
    return attached


def complete_path(partial: str, folder: Path | None = None) -> tuple[str, list[str]]:
    """Tab after `@partial`: (the longest completion every match shares, the matching names).
    A folder's name ends in "/"; hidden files are offered only when `partial`'s name starts
    with a dot."""
    folder = folder or Path.cwd()
    head, sep, stem = partial.rpartition("/")
    base = _path(head or "/", folder) if sep else folder
    try:
        entries = sorted(base.iterdir(), key=lambda p: p.name)
    except OSError:
        return partial, []
    names = [
        e.name + ("/" if e.is_dir() else "")
        for e in entries
        if e.name.startswith(stem) and (stem.startswith(".") or not e.name.startswith("."))
    ]
    if not names:
        return partial, []
    common = os.path.commonprefix(names)
    return head + sep + common, names
