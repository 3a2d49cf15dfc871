"""Incremental detokenizing: text is released only once it is final.

Token bytes go through an incremental UTF-8 decoder, so a token that ends inside a character (an
emoji or CJK character split over byte tokens) waits for the bytes that complete it. Released text
then passes a stop-string filter that holds back any tail that could still grow into a stop string.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable


class Detokenizer:
    def __init__(self, token_bytes: Callable[[int], bytes], stop: Iterable[str] = ()) -> None:
        self._token_bytes = token_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = tuple(s for s in stop if s)
        self._held = ""  # decoded text that may be the start of a stop string
        self.text = ""  # everything released so far
        self.stopped_by: str | None = None

    def add(self, token_id: int) -> str:
        """Feed one token; returns the text that became final (possibly empty)."""
        if self.stopped_by is not None:
            return ""
        self._held += self._utf8.decode(self._token_bytes(token_id))
        return self._release()

    def flush(self) -> str:
        """End of the answer: release what was held (an unfinished character becomes U+FFFD)."""
        if self.stopped_by is None:
            self._held += self._utf8.decode(b"", final=True)
            out, self._held = self._held, ""
            self.text += out
            return out
        return ""

    def _release(self) -> str:
        held = self._held
        if not self._stops:
            self._held = ""
            self.text += held
            return held
        hits = [(held.find(s), s) for s in self._stops if s in held]
        if hits:
            at, stop = min(hits)
            self.stopped_by = stop
            self._held = ""
            self.text += held[:at]
            return held[:at]
        keep = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(held)), keep, -1):
                if held.endswith(stop[:size]):
                    keep = size
                    break
        out = held[: len(held) - keep]
        self._held = held[len(held) - keep :]
        self.text += out
        return out
