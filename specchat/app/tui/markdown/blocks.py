"""An answer's text as top-level Markdown blocks, each with its source range.

CommonMark parses line by line and never reopens a block it has closed: once a later top-level
block has begun, every earlier one is final, whatever text follows. So while an answer streams,
all its blocks but the last can be drawn once and kept, and parsing can restart at the last one's
first line — which gives the same blocks as parsing the whole text (link reference definitions
aside, which chat answers do not use).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from specchat.app.tui.markdown.source_map import SourceLines


@lru_cache(maxsize=1)
def parser() -> MarkdownIt:
    """GitHub-flavoured Markdown (tables, strikethrough, bare links), as Textual's Markdown."""
    return MarkdownIt("gfm-like")


@dataclass(frozen=True)
class Block:
    """A top-level block: its syntax tree and the text offsets of its first line's start and of
    the line after its last (blank lines after it belong to nobody)."""

    node: SyntaxTreeNode
    start: int
    end: int


@dataclass(frozen=True)
class ParsedText:
    """`text[start:end]` parsed: its blocks and its lines (to find where drawn text came from)."""

    lines: SourceLines
    blocks: list[Block]


def parse_blocks(text: str, start: int = 0, end: int | None = None) -> ParsedText:
    """The top-level blocks of `text[start:end]`; `start` must be a line's start."""
    end = len(text) if end is None else end
    chunk = text[start:end]
    lines = SourceLines(text, start, end)
    root = SyntaxTreeNode(parser().parse(chunk))
    blocks = []
    for node in root.children:
        if node.map is None:
            continue
        first, after = node.map
        blocks.append(Block(node, lines.offset_of_line(first), lines.offset_of_line(after)))
    return ParsedText(lines, blocks)
