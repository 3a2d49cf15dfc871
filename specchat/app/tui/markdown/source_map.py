"""Where each drawn character came from in the Markdown source.

markdown-it gives block tokens their source lines (`map`) and inline tokens their source text with
the containers' prefixes (`> `, a list item's indent) taken off (`content`), but no character
offsets. Every line of that content is a piece of its own source line, so `SourceLines.locate`
finds it there; the drawn text of an inline token (text, code, a link's words) is then a run of
its content, found in order by `InlineCursor`. A character that cannot be found (an entity drawn
as its character, a tab the parser expanded) gets UNKNOWN and is never coloured.
"""

from __future__ import annotations

UNKNOWN = -1


class SourceLines:
    """`text[base:limit]` split into lines, answering "where in the whole text is this line's
    piece". Line numbers are markdown-it's: 0 is the line starting at `base`."""

    def __init__(self, text: str, base: int = 0, limit: int | None = None) -> None:
        self.text = text
        self.base = base
        self.limit = len(text) if limit is None else limit
        starts = [base]
        at = text.find("\n", base, self.limit)
        while at >= 0:
            starts.append(at + 1)
            at = text.find("\n", at + 1, self.limit)
        self.starts = starts
        self._columns: dict[int, int] = {}  # per line: where the last located piece ended

    def line(self, number: int) -> str:
        """Source line `number` without its line break ("" past the end)."""
        if number >= len(self.starts):
            return ""
        start = self.starts[number]
        end = self.starts[number + 1] - 1 if number + 1 < len(self.starts) else self.limit
        return self.text[start:end]

    def offset_of_line(self, number: int) -> int:
        """The text offset where line `number` starts (the text's end past its last line)."""
        return self.starts[number] if number < len(self.starts) else self.limit

    def locate(self, content: str, first_line: int, *, suffix: bool = False) -> list[int]:
        """The text offset of every character of `content`, whose lines are pieces of the source
        lines from `first_line` on, in order ("\\n" maps to the line break). Pieces of one line
        are found left to right across calls (table cells); `suffix`: each piece ends its line
        (code, whose lines lose only a prefix)."""
        offsets: list[int] = []
        for i, piece in enumerate(content.split("\n")):
            number = first_line + i
            if i:
                start = self.offset_of_line(number)
                offsets.append(start - 1 if start > 0 else UNKNOWN)  # the line break before
            source = self.line(number)
            column = -1
            if suffix and source.endswith(piece):
                column = len(source) - len(piece)
            elif piece:
                column = source.find(piece, self._columns.get(number, 0))
            if column < 0:
                offsets.extend([UNKNOWN] * len(piece))
                continue
            self._columns[number] = column + len(piece)
            start = self.offset_of_line(number) + column
            offsets.extend(range(start, start + len(piece)))
        return offsets


class InlineCursor:
    """Walks an inline token's content (with its offsets) in drawing order: each drawn string is
    looked for after the previous one, whole first, else character by character."""

    def __init__(self, content: str, offsets: list[int]) -> None:
        self.content = content
        self.offsets = offsets
        self.at = 0

    def take(self, drawn: str) -> list[int]:
        """The source offsets of `drawn`, the next text the renderer draws."""
        if not drawn:
            return []
        found = self.content.find(drawn, self.at)
        if found >= 0:
            self.at = found + len(drawn)
            return self.offsets[found : self.at]
        result = []
        for char in drawn:
            found = self.content.find(char, self.at)
            if found < 0 or (char == " " and found > self.at + 1):
                # a space the parser made (a line break, collapsed whitespace): near, not far
                result.append(self.offsets[self.at] if self.at < len(self.offsets) else UNKNOWN)
                continue
            result.append(self.offsets[found])
            self.at = found + 1
        return result

    def skip_to(self, char: str) -> int:
        """The offset of the next `char` in the content (a soft break's newline), or UNKNOWN."""
        found = self.content.find(char, self.at)
        if found < 0:
            return UNKNOWN
        self.at = found + 1
        return self.offsets[found]
