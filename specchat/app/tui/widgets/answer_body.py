"""An answer's body: its Markdown drawn with the runs laid over it (`app/tui/markdown`), streamed
without drawing anything twice.

Every top-level block but the last is final (`markdown/blocks.py`), so a batch of steps parses
the text from the first block not yet final, moves the blocks that became final into one static
piece — drawn once, never again — and redraws the last block, the live tail, alone; the
transcript is laid out again only when the tail's height changed. The work per batch follows the
last block's size, not the answer's, and a batch of steps is one repaint. A finished answer
(or one opened from the store) takes the same path in one go: all blocks but the last in a
piece, the last in the tail — so a streamed answer looks exactly as the stored one.

Changing the colours (Ctrl+T, Ctrl+F, a theme) redraws every piece: runs on or off, the text is
always Markdown. The element styles come from this widget's CSS component classes, so they follow
the app theme.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.style import Style
from textual.app import ComposeResult
from textual.color import Color
from textual.containers import Vertical
from textual.geometry import Size
from textual.markup import parse_style
from textual.widgets import Static

from specchat.app.tui.markdown.blocks import parse_blocks
from specchat.app.tui.markdown.paint import RunIndex, RunPaint
from specchat.app.tui.markdown.render import MarkdownLook, render_blocks
from specchat.history import RunSpan
from specchat.themes.palette import RunPalette


class Piece(Static):
    """Finished blocks of an answer, `text[start:end]`, drawn once."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__("", classes="piece")
        self.start = start
        self.end = end


class AnswerBody(Vertical):
    """The Markdown of one answer with its runs; `show` after the text grew."""

    COMPONENT_CLASSES = {
        "answer--h1",
        "answer--h2",
        "answer--h3",
        "answer--h4",
        "answer--code",
        "answer--code-inline",
        "answer--link",
        "answer--bullet",
        "answer--quote",
        "answer--table",
        "answer--rule",
    }
    DEFAULT_CSS = """
    AnswerBody {
        height: auto;
        & > .piece, & > #tail { height: auto; }
        & > .answer--h1 { color: $text-primary; text-style: bold underline; }
        & > .answer--h2 { color: $text-primary; text-style: bold; }
        & > .answer--h3 { color: $text-secondary; text-style: bold; }
        & > .answer--h4 { text-style: bold italic; }
        & > .answer--code { color: $foreground; background: $foreground 7%; }
        & > .answer--code-inline { color: $text-warning; background: $warning 12%; }
        & > .answer--link { color: $text-accent; text-style: underline; }
        & > .answer--bullet { color: $text-primary; }
        & > .answer--quote { color: $primary 60%; }
        & > .answer--table { color: $foreground 40%; }
        & > .answer--rule { color: $foreground 30%; }
    }
    """

    def __init__(self, palette: RunPalette | None, by: str = "length") -> None:
        super().__init__()
        self.palette = palette
        self.by = by
        self.text = ""
        self.runs: Sequence[RunSpan] = ()
        self._settled = 0  # text offset where the live tail begins: all before it is in pieces
        self._look: MarkdownLook | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="tail")

    # -- drawing --------------------------------------------------------------------------------
    async def show(self, text: str, runs: Sequence[RunSpan]) -> None:
        """The answer is now `text` with `runs` (it grew, or ended): blocks that became final
        move into a piece, and the tail is redrawn."""
        self.text, self.runs = text, runs
        parsed = parse_blocks(text, self._settled)
        index = RunIndex(runs)
        blocks = parsed.blocks
        if len(blocks) > 1:
            start, end = self._settled, blocks[-1].start
            piece = Piece(start, end)
            piece.update(render_blocks(parsed, blocks[:-1], index, self.look, gap_after=True))
            self._settled = end
            await self.mount(piece, before=self.query_one("#tail"))
            blocks = blocks[-1:]
        self._draw_tail(render_blocks(parsed, blocks, index, self.look))

    def _draw_tail(self, renderable) -> None:
        """Redraw the tail; lay the transcript out only when its height changed."""
        tail = self.query_one("#tail", Static)
        width, before = tail.content_size
        tail.update(renderable, layout=False)
        if not width or tail.get_content_height(Size(width, 0), Size(width, 0), width) != before:
            tail.refresh(layout=True)

    async def recolour(self, palette: RunPalette | None, by: str) -> None:
        """Runs shown in another palette, by another measure, or not at all (None), or the
        theme changed: every piece is drawn again."""
        self.palette, self.by = palette, by
        self._look = None
        index = RunIndex(self.runs)
        with self.app.batch_update():
            for piece in self.query(Piece):
                parsed = parse_blocks(self.text, piece.start, piece.end)
                piece.update(render_blocks(parsed, parsed.blocks, index, self.look, True))
            parsed = parse_blocks(self.text, self._settled)
            self._draw_tail(render_blocks(parsed, parsed.blocks, index, self.look))

    # -- the look -------------------------------------------------------------------------------
    @property
    def look(self) -> MarkdownLook:
        """The element styles from CSS (in the current theme) and the run paint, made once per
        colour change."""
        if self._look is None:
            self._look = self._make_look()
        return self._look

    def _make_look(self) -> MarkdownLook:
        style = self.get_component_rich_style
        code = style("answer--code")
        code_background = (
            code.bgcolor.triplet.hex if code.bgcolor and code.bgcolor.triplet else None
        )
        paint = RunPaint(
            self.palette,
            self.by,
            code_background or "#000000",
            tint_strength=0.45 if self.app.current_theme.dark else 0.3,
        )
        heading = (style("answer--h1"), style("answer--h2"), style("answer--h3"))
        return MarkdownLook(
            paint=paint,
            headings=(*heading, style("answer--h4"), style("answer--h4"), style("answer--h4")),
            code_inline=style("answer--code-inline"),
            code_block=code,
            link=style("answer--link"),
            bullet=style("answer--bullet"),
            quote=style("answer--quote"),
            table_border=style("answer--table"),
            rule=style("answer--rule"),
            syntax=_SyntaxStyles(self.app.theme_variables, code),
        )


class _SyntaxStyles:
    """Textual's highlight theme styles ("$text-accent", "$text 60%") as Rich styles over a code
    block's background: variables from the app theme, translucent colours mixed over it."""

    def __init__(self, variables: dict[str, str], code: Style) -> None:
        self._variables = variables
        background = code.bgcolor.triplet if code.bgcolor and code.bgcolor.triplet else None
        self._background = Color(*background) if background else Color(0, 0, 0)
        self._cache: dict[str, Style] = {}

    def __call__(self, name: str) -> Style:
        found = self._cache.get(name)
        if found is None:
            parsed = parse_style(name, self._variables)
            colour = parsed.foreground
            if colour is not None and colour.a < 1:
                colour = self._background + colour
            found = Style(
                color=colour.rich_color if colour is not None else None,
                bold=parsed.bold,
                italic=parsed.italic,
                underline=parsed.underline,
            )
            self._cache[name] = found
        return found
