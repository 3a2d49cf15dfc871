"""How a count reads in a sentence: "1 line", "2 lines" — one place, so every screen and
command says it the same way."""

from __future__ import annotations


def counted(count: int, noun: str) -> str:
    """`count` and `noun`, the noun plural (an added "s") unless the count is one."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
