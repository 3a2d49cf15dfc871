"""An answer that loops: the same span over and over at its end.

Small models loop under greedy decoding ("A: A: A: …", a line of a poem repeated for hundreds of
tokens), and speculation makes a loop fast without making it less noise. The engine checks the
answer's end after every token (a step of several ends where greedy's would) and, where the chat or
`ask` asks for it, ends the answer there ("repeating"), the text kept. A span of up to `MAX_SPAN`
tokens counts as a loop once it has come `MIN_REPEATS` times in a row and the repeats cover
`MIN_TOKENS` tokens: a short span must repeat more often (a table's "| --- " row or a list of ones
is no loop after a few times).

A numbered list loops too ("14. Anaconda... (Anacondas)", "15. Anaconda... (Anacondas)", …): its
lines differ only in the number that starts them, so `LoopWatch` also compares the answer's end with
each number at a line's start read as one and the same token. Only there — a table of sums or a
count changes numbers inside its lines, and a span must hold more than a number and a line break
("1." "2." "3." is a count, not a loop).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

MAX_SPAN = 64
MIN_REPEATS = 3
MIN_TOKENS = 48


def repeating_span(tokens: Sequence[int]) -> int | None:
    """The length of a span that the end of `tokens` repeats as a loop (the shortest), or None.
    Costs a comparison per span length unless the last token recurs at that distance."""
    n = len(tokens)
    if n < MIN_TOKENS:
        return None
    last = tokens[-1]
    for span in range(1, min(MAX_SPAN, n // MIN_REPEATS) + 1):
        if tokens[-1 - span] != last:
            continue
        repeats = max(MIN_REPEATS, -(-MIN_TOKENS // span))
        if repeats * span > n:
            continue
        tail = list(tokens[n - span :])
        if all(list(tokens[n - (k + 1) * span : n - k * span]) == tail for k in range(1, repeats)):
            return span
    return None


_LINE_NUMBER = -1  # a number that starts a line, in the tail `LoopWatch` compares
_MIN_NUMBERED_SPAN = 4  # a numbered line that loops holds more than its number, "." and "\n"


class LoopWatch:
    """Whether an answer's end loops (`repeating_span`), its numbered lines read alike: the
    engine keeps one for an answer's run of steps. `token_bytes` tells a token's text."""

    def __init__(self, token_bytes: Callable[[int], bytes]) -> None:
        self._token_bytes = token_bytes
        self._kinds: dict[int, tuple[bool, bool, bool]] = {}
        self._numbered: list[int] = []  # the answer so far, each line's number one token
        self._seen = 0
        self._last_number = -MAX_SPAN - 1  # where in `_numbered` the last line's number stands
        self._line_start, self._in_number = True, False  # an answer starts a line

    def _kind(self, token: int) -> tuple[bool, bool, bool]:
        """(only digits, maybe after a line break; opens a line; ends one)."""
        kind = self._kinds.get(token)
        if kind is None:
            text = self._token_bytes(token).decode("utf-8", "replace").replace("\r", "")
            digits = text.lstrip(" \n")
            kind = (
                digits.isascii() and digits.isdigit(),
                text.lstrip(" ").startswith("\n"),
                text.rstrip(" ").endswith("\n"),
            )
            self._kinds[token] = kind
        return kind

    def looping(self, tokens: Sequence[int]) -> bool:
        """Whether `tokens`, the answer so far (it only grows), ends in a loop; each call reads
        only the tokens added since the last."""
        if repeating_span(tokens) is not None:
            return True
        for token in tokens[self._seen :]:
            digits, opens_line, ends_line = self._kind(token)
            if digits and (self._line_start or opens_line or self._in_number):
                if not self._in_number:
                    self._last_number = len(self._numbered)
                    self._numbered.append(_LINE_NUMBER)
                self._in_number = True
            else:
                self._numbered.append(token)
                self._in_number = False
            self._line_start = ends_line
        self._seen = len(tokens)
        back = len(self._numbered) - self._last_number  # the last number, this far from the end
        if back > MAX_SPAN:  # no span a loop could have holds one: the check above said all
            return False
        span = repeating_span(self._numbered)
        return span is not None and span >= max(_MIN_NUMBERED_SPAN, back)
