"""Markdown blocks drawn as Rich renderables, each drawn character carrying its run's colour.

Inline text (paragraphs, headings, list items, table cells) is built token by token with the
source offset of every character (`source_map.py`), then painted: prose takes a run's colour as its
foreground. Code blocks are highlighted with Pygments through Textual's highlight theme (its
styles name the app theme's colours, resolved by `MarkdownLook.syntax`), and a run there tints the
background, so the syntax colours stay readable. Lists and quotes hang their bodies beside the
bullet or bar; tables are Rich tables whose cells are painted the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from markdown_it.tree import SyntaxTreeNode
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound
from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.padding import Padding
from rich.rule import Rule
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.highlight import HighlightTheme

from specchat.app.tui.markdown.blocks import Block, ParsedText
from specchat.app.tui.markdown.paint import RunIndex, RunPaint, paint
from specchat.app.tui.markdown.source_map import UNKNOWN, InlineCursor, SourceLines

BULLETS = ("•", "◦", "▪")


def _plain_syntax(name: str) -> Style:
    """A highlight theme's style without an app to resolve its colours: attributes only."""
    return Style(
        bold="bold" in name.split(),
        italic="italic" in name.split(),
        underline="underline" in name.split(),
    )


@dataclass(frozen=True)
class MarkdownLook:
    """How Markdown is drawn: the run paint and the styles of each element (the widget reads
    them from its CSS, so they follow the app theme). `syntax` turns a highlight theme's style
    ("$text-accent", "bold") into a Rich style over the code block's background."""

    paint: RunPaint
    headings: tuple[Style, ...] = (
        Style(bold=True, underline=True),
        Style(bold=True),
        Style(bold=True),
        Style(bold=True, italic=True),
        Style(italic=True),
        Style(italic=True, dim=True),
    )
    code_inline: Style = field(default_factory=lambda: Style(bold=True))
    code_block: Style = field(default_factory=lambda: Style(bgcolor="#202020"))
    link: Style = field(default_factory=lambda: Style(underline=True))
    bullet: Style = field(default_factory=Style)
    quote: Style = field(default_factory=lambda: Style(dim=True))
    table_border: Style = field(default_factory=lambda: Style(dim=True))
    rule: Style = field(default_factory=lambda: Style(dim=True))
    syntax: Callable[[str], Style] = _plain_syntax


class Hanging:
    """A body drawn beside a gutter: `first` before its first line, `rest` before the others
    (a bullet and its indent, a quote's bar on every line)."""

    def __init__(self, body: RenderableType, first: Text, rest: Text) -> None:
        self.body = body
        self.first = first
        self.rest = rest

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        gutter = max(self.first.cell_len, self.rest.cell_len)
        width = max(1, options.max_width - gutter)
        lines = console.render_lines(self.body, options.update_width(width), pad=False)
        first = list(self.first.render(console))
        rest = list(self.rest.render(console))
        for i, line in enumerate(lines):
            yield from first if i == 0 else rest
            yield from line
            yield Segment.line()


@lru_cache(maxsize=32)
def _lexer(language: str) -> Lexer:
    options = {"stripnl": False, "ensurenl": False, "tabsize": 0}
    try:
        return get_lexer_by_name(language or "text", **options)
    except ClassNotFound:
        return get_lexer_by_name("text", **options)


def _syntax_style(token_type, styles: dict) -> str | None:
    while token_type is not None:
        style = styles.get(token_type)
        if style:
            return style
        token_type = token_type.parent
    return None


class BlockRenderer:
    """Draws the blocks of one parsed range of an answer with its runs."""

    def __init__(self, parsed: ParsedText, runs: RunIndex, look: MarkdownLook) -> None:
        self.lines: SourceLines = parsed.lines
        self.runs = runs
        self.look = look

    # -- blocks ---------------------------------------------------------------------------------
    def blocks(self, blocks: Iterable[Block], gap_after: bool = False) -> RenderableType:
        """Blocks one above the other with a blank line between (and after, with `gap_after`:
        a finished piece of a streaming answer, which the next piece follows)."""
        drawn: list[RenderableType] = []
        for block in blocks:
            if drawn:
                drawn.append(Text(""))
            drawn.append(self.block(block.node))
        if gap_after and drawn:
            drawn.append(Text(""))
        return Group(*drawn)

    def block(self, node: SyntaxTreeNode, depth: int = 0) -> RenderableType:
        kind = node.type
        if kind == "paragraph":
            return self.inline(node.children[0]) if node.children else Text("")
        if kind == "heading":
            level = int(node.tag[1:]) if node.tag[1:].isdigit() else 1
            style = self.look.headings[min(level, len(self.look.headings)) - 1]
            return self.inline(node.children[0], base=style) if node.children else Text("")
        if kind in ("bullet_list", "ordered_list"):
            return self.list(node, depth)
        if kind == "blockquote":
            bar = Text("▌ ", style=self.look.quote)
            return Hanging(self.stack(node.children, depth, loose=True), bar, bar)
        if kind in ("fence", "code_block"):
            return self.code(node)
        if kind == "table":
            return self.table(node)
        if kind == "hr":
            return Rule(style=self.look.rule)
        return self.raw(node)

    def stack(self, nodes: list[SyntaxTreeNode], depth: int, loose: bool) -> RenderableType:
        parts: list[RenderableType] = []
        for node in nodes:
            if parts and loose:
                parts.append(Text(""))
            parts.append(self.block(node, depth))
        return Group(*parts)

    def list(self, node: SyntaxTreeNode, depth: int) -> RenderableType:
        ordered = node.type == "ordered_list"
        items = node.children
        # a tight list hides its paragraphs: no blank lines between items or inside them
        loose = any(
            child.type == "paragraph" and not child.hidden
            for item in items
            for child in item.children
        )
        first_number = int(node.attrs.get("start", 1)) if ordered else 1
        markers = (
            [f"{first_number + i}." for i in range(len(items))]
            if ordered
            else [BULLETS[depth % len(BULLETS)]] * len(items)
        )
        width = max(len(marker) for marker in markers) + 1
        drawn: list[RenderableType] = []
        for item, marker in zip(items, markers):
            if drawn and loose:
                drawn.append(Text(""))
            bullet = Text(marker.rjust(width - 1) + " ", style=self.look.bullet)
            self._paint_marker(bullet, item, width - 1 - len(marker))
            body = self.stack(item.children, depth + 1, loose)
            drawn.append(Hanging(body, bullet, Text(" " * width)))
        return Group(*drawn)

    def _paint_marker(self, bullet: Text, item: SyntaxTreeNode, at: int) -> None:
        """A bullet stands for its marker ("-", "1."): it takes the colour of the run that
        wrote the marker."""
        if item.map is None:
            return
        line = self.lines.line(item.map[0])
        marker = (item.info or "") + (item.markup or "")
        column = line.find(marker) if marker else -1
        if column < 0:
            return
        offset = self.lines.offset_of_line(item.map[0]) + column
        paint(bullet, [offset] * len(marker), self.runs, self.look.paint.prose_style, at)

    def code(self, node: SyntaxTreeNode) -> RenderableType:
        code = node.content
        if code.endswith("\n"):
            code = code[:-1]
        first_line = node.map[0] + (1 if node.type == "fence" else 0) if node.map else 0
        offsets = self.lines.locate(code, first_line, suffix=True) if node.map else []
        language = (node.info or "").split(maxsplit=1)[0] if node.info else ""
        text = Text(style=self.look.code_block)
        styles = HighlightTheme.STYLES
        resolve = self.look.syntax
        for token_type, value in _lexer(language).get_tokens(code):
            name = _syntax_style(token_type, styles)
            text.append(value, style=resolve(name) if name else None)
        if offsets and len(offsets) == len(text.plain):
            paint(text, offsets, self.runs, self.look.paint.code_style)
        return Padding(text, (0, 1), style=self.look.code_block, expand=True)

    def table(self, node: SyntaxTreeNode) -> RenderableType:
        table = Table(
            box=box.ROUNDED,
            border_style=self.look.table_border,
            show_edge=True,
            expand=False,
            pad_edge=True,
        )
        rows: list[list[SyntaxTreeNode]] = []
        for section in node.children:
            for row in section.children:
                if section.type == "thead":
                    for cell in row.children:
                        justify = _justify(cell)
                        table.add_column(self._cell(cell, Style(bold=True)), justify=justify)
                else:
                    rows.append(row.children)
        for row in rows:
            table.add_row(*[self._cell(cell) for cell in row])
        return table

    def _cell(self, cell: SyntaxTreeNode, base: Style | None = None) -> Text:
        if not cell.children:
            return Text("")
        return self.inline(cell.children[0], base=base)

    def raw(self, node: SyntaxTreeNode) -> Text:
        """A block drawn as its source (HTML, anything this renderer does not know)."""
        content = node.content.rstrip("\n")
        text = Text(content)
        if node.map:
            offsets = self.lines.locate(content, node.map[0])
            paint(text, offsets, self.runs, self.look.paint.prose_style)
        return text

    # -- inline ---------------------------------------------------------------------------------
    def inline(self, node: SyntaxTreeNode, base: Style | None = None) -> Text:
        """An inline token's children drawn with their markup's styles, then painted."""
        offsets: list[int] = []
        located = self.lines.locate(node.content, node.map[0]) if node.map else []
        if len(located) != len(node.content):
            located = [UNKNOWN] * len(node.content)
        cursor = InlineCursor(node.content, located)
        text = Text(style=base or "")
        self._inline_children(node.children, text, offsets, cursor, Style())
        paint(text, offsets, self.runs, self.look.paint.prose_style)
        return text

    def _inline_children(
        self,
        children: list[SyntaxTreeNode],
        text: Text,
        offsets: list[int],
        cursor: InlineCursor,
        style: Style,
    ) -> None:
        look = self.look
        for child in children:
            kind = child.type
            if kind in ("text", "text_special", "html_inline"):
                text.append(child.content, style=style or None)
                offsets.extend(cursor.take(child.content))
            elif kind == "code_inline":
                text.append(child.content, style=style + look.code_inline)
                offsets.extend(cursor.take(child.content))
            elif kind in ("softbreak", "hardbreak"):
                # a line break in an answer is one the model meant (a poem's lines, an address,
                # "Step 1:" under "Step 2:"), as chat apps draw it: CommonMark's soft break, a
                # space, ran a poem's lines into one paragraph
                text.append("\n")
                offsets.append(cursor.skip_to("\n"))
            else:
                inner = style + _INLINE_STYLES.get(kind, Style())
                if kind == "link":
                    inner += look.link
                if kind == "image":
                    text.append("[", style=inner)
                    offsets.append(UNKNOWN)
                self._inline_children(child.children, text, offsets, cursor, inner)
                if kind == "image":
                    text.append("]", style=inner)
                    offsets.append(UNKNOWN)


_INLINE_STYLES = {
    "strong": Style(bold=True),
    "em": Style(italic=True),
    "s": Style(strike=True),
}


def _justify(cell: SyntaxTreeNode) -> str:
    style = str(cell.attrs.get("style", ""))
    for justify in ("right", "center"):
        if f"text-align:{justify}" in style:
            return justify
    return "left"


def render_blocks(
    parsed: ParsedText,
    blocks: list[Block],
    runs: RunIndex,
    look: MarkdownLook,
    gap_after: bool = False,
) -> RenderableType:
    """`blocks` of `parsed` drawn with their runs (see `BlockRenderer.blocks`)."""
    return BlockRenderer(parsed, runs, look).blocks(blocks, gap_after)
