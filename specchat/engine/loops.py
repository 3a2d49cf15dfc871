"""An answer that loops: the same span over and over at its end.

Small models loop under greedy decoding ("A: A: A: …", a line of a poem repeated for hundreds of
tokens), and speculation makes a loop fast without making it less noise. The engine checks the
answer's end after every step and, where the chat or `ask` asks for it, ends the answer there
("repeating"), the text kept. A span of up to `MAX_SPAN` tokens counts as a loop once it has
come `MIN_REPEATS` times in a row and the repeats cover `MIN_TOKENS` tokens: a short span must
repeat more often (a table's "| --- " row or a list of ones is no loop after a few times).
"""

from __future__ import annotations

from collections.abc import Sequence

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
