"""Rows of figures as terminal tables that stay readable at any width, piped or not.

A table wider than the terminal (80 columns when piped) is never squeezed until its figures turn
into ellipses: its columns are split into several tables, each repeating the first (label) column,
and every cell keeps its full text. `compare`, `bench` and `chats` print through `print_table`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

_PADDING = 2  # rich's cell padding, one space each side
_EDGES = 4  # the table's own borders


@dataclass(frozen=True)
class Column:
    header: str
    numeric: bool = True  # right-aligned


def _width(column: Column, cells: Sequence[str]) -> int:
    return max([len(column.header), *(len(cell) for cell in cells)]) + _PADDING + 1


def split_columns(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int
) -> list[list[int]]:
    """Groups of column indices, each led by the label column (index 0), that fit `width`."""
    widths = [_width(column, [row[i] for row in rows]) for i, column in enumerate(columns)]
    groups: list[list[int]] = []
    current: list[int] = [0]
    used = widths[0] + _EDGES
    for index in range(1, len(columns)):
        if len(current) > 1 and used + widths[index] > width:
            groups.append(current)
            current, used = [0], widths[0] + _EDGES
        current.append(index)
        used += widths[index]
    groups.append(current)
    return groups


def tables(
    title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int
) -> list[Table]:
    """The rows as one table, or as several when one would not fit `width` columns."""
    made = []
    whole = list(range(len(columns)))
    groups = [whole] if _fits(_table(title, columns, rows, whole), width) else []
    groups = groups or split_columns(columns, rows, width)
    for number, group in enumerate(groups):
        part = "" if len(groups) == 1 else f" ({number + 1}/{len(groups)})"
        made.append(_table(title + part, columns, rows, group))
    return made


def _table(
    title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], group: Sequence[int]
) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, collapse_padding=True)
    for index in group:
        column = columns[index]
        table.add_column(
            column.header,
            justify="right" if column.numeric else "left",
            no_wrap=True,
            overflow="fold",
        )
    for row in rows:
        table.add_row(*(row[index] for index in group))
    return table


def _fits(table: Table, width: int) -> bool:
    """Whether rich draws `table` within `width` columns without squeezing a cell (measured
    by rich itself: the split's estimate is kept for tables that do not fit)."""
    console = Console(width=10_000)  # room for its natural width: a measure never exceeds it
    return Measurement.get(console, console.options, table).maximum <= width


def print_table(
    console: Console, title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]]
) -> None:
    for table in tables(title, columns, rows, console.width):
        console.print(table)
