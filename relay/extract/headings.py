"""A table's heading block kept with its body, where the OCR's reader parted them.

``relay.extract.ocr`` finds a page's tables from where its text is: a heading block (a
line or a few of column headings, a heading over several columns) set apart from its body
by a few lines of white, or by lines that are no row, comes back as a table of its own
above it. ``joined`` puts such a pair back together, from the tables' cells and boxes
alone (``relay.extract.result``: fractions of the page). A PDF's text layer needs none of
it: its finder reads a heading block with its body (``relay.extract.pdf_tables``), and a
ruled box above a table is a box of its own there, not the table's headings.

A table ``upper`` is the heading block of the table ``lower`` that follows it on the page
when:

* ``upper`` has at most ``_MAX_ROWS`` rows, ``lower`` more rows than ``upper``;
* ``upper`` holds headings: no row of it is mostly figures (numbers other than years, as
  body rows are);
* ``upper`` ends above ``lower``, and no further above it than ``_MAX_GAP`` times the
  height of ``lower``'s rows (the median of its one-row cells');
* ``upper``'s cells stand over ``lower``'s columns: a cell covers the columns whose middle
  is within it (the column it overlaps most when none is), the cells of a row cover
  columns left to right without sharing one, and ``upper`` reaches no further out than a
  column of ``lower`` to either side.

The joined table is ``upper``'s rows laid over ``lower``'s columns (a cell over several
columns spans them, its text at the first), then ``lower``'s rows; cells keep their boxes.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import replace

from relay.extract import geometry
from relay.extract.result import Box, Cell, Confidence, Grid, Table

__all__ = ["joined"]

_MAX_ROWS = 3
_MAX_GAP = 3.0
# A figure: a number (signs, separators, a percent) that is not a year or a span of them.
_FIGURE = re.compile(r"[-+\u2212(]?[\d][\d.,\s]*%?\)?")
_YEAR = re.compile(r"(19|20)\d\d([-/\u2013]\d{2,4})?")


def _figure(text: str) -> bool:
    text = text.strip()
    return bool(_FIGURE.fullmatch(text)) and not _YEAR.fullmatch(text)


def _headings(table: Table) -> bool:
    """Whether no row of ``table`` is mostly figures."""
    for row in table.rows:
        filled = [cell for cell in row if cell]
        if filled and 2 * sum(_figure(cell) for cell in filled) >= len(filled):
            return False
    return True


def _columns(table: Table) -> list[tuple[float, float]] | None:
    """Each column's horizontal extent (its one-column cells' boxes), ``None`` when a
    column has none."""
    width = len(table.rows[0])
    extents: list[tuple[float, float] | None] = [None] * width
    for cell in table.grid_cells():
        if cell.bbox is None or cell.col_span != 1:
            continue
        known = extents[cell.col]
        x0, x1 = cell.bbox[0], cell.bbox[2]
        extents[cell.col] = (x0, x1) if known is None else (min(known[0], x0), max(known[1], x1))
    if any(extent is None for extent in extents):
        return None
    return [extent for extent in extents if extent is not None]


def _row_height(table: Table) -> float | None:
    heights = [
        cell.bbox[3] - cell.bbox[1]
        for cell in table.grid_cells()
        if cell.bbox is not None and cell.row_span == 1
    ]
    return statistics.median(heights) if heights else None


def _over(box: Box, columns: Sequence[tuple[float, float]]) -> tuple[int, int]:
    """The first and last of ``columns`` a cell of box ``box`` stands over."""
    inside = [k for k, (a, b) in enumerate(columns) if box[0] <= (a + b) / 2 <= box[2]]
    if inside:
        return inside[0], inside[-1]
    overlaps = [min(box[2], b) - max(box[0], a) for a, b in columns]
    best = max(range(len(columns)), key=lambda k: overlaps[k])
    return best, best


Placed = tuple[Cell, str, float | None]  # a cell on the lower table's columns, its text, score


def _laid_over(upper: Table, lower: Table) -> list[Placed] | None:
    """``upper``'s cells with text on ``lower``'s columns (module docstring), ``None``
    when they do not stand over them."""
    columns = _columns(lower)
    if columns is None or upper.bbox is None:
        return None
    pitch = max(b - a for a, b in columns)
    if upper.bbox[0] < columns[0][0] - pitch or upper.bbox[2] > columns[-1][1] + pitch:
        return None
    placed: list[Placed] = []
    reached: dict[int, int] = {}  # per row: the last column taken so far
    for cell in upper.grid_cells():
        text = upper.rows[cell.row][cell.col]
        if not text:
            continue  # an empty cell: its place is made again
        if cell.bbox is None:
            return None
        first, last = _over(cell.bbox, columns)
        rows = range(cell.row, cell.row + cell.row_span)
        if any(first <= reached.get(row, -1) for row in rows):
            return None  # two cells over one column, or out of order
        reached.update(dict.fromkeys(rows, last))
        score = upper.confidence[cell.row][cell.col] if upper.confidence is not None else None
        placed.append(
            (Cell(cell.row, first, cell.row_span, last - first + 1, cell.bbox), text, score)
        )
    return placed


def _join(upper: Table, lower: Table, placed: Sequence[Placed]) -> Table:
    """``upper``'s ``placed`` cells over ``lower``: one table."""
    width, height = len(lower.rows[0]), len(upper.rows)
    rows: Grid = [[""] * width for _ in range(height)]
    scores: Confidence = [[None] * width for _ in range(height)]
    for cell, text, score in placed:
        for r in range(cell.row, cell.row + cell.row_span):
            for c in range(cell.col, cell.col + cell.col_span):
                rows[r][c] = None
        rows[cell.row][cell.col] = text
        scores[cell.row][cell.col] = score
    confidence: Confidence | None = None
    if upper.confidence is not None and lower.confidence is not None:
        confidence = scores + [list(row) for row in lower.confidence]
    moved = [replace(cell, row=cell.row + height) for cell in lower.grid_cells()]
    cells = geometry.complete(
        [cell for cell, _, _ in placed] + moved, height + len(lower.rows), width
    )
    cells = geometry.banded(cells)
    grid = rows + [list(row) for row in lower.rows]
    return Table(lower.page, grid, confidence, geometry.enclosing(c.bbox for c in cells), cells)


def _heading_of(upper: Table, lower: Table) -> list[Placed] | None:
    """``upper``'s cells over ``lower``'s columns when ``upper`` is its heading block
    (module docstring), else ``None``."""
    if upper.page != lower.page or not upper.rows or not lower.rows:
        return None
    if len(upper.rows) > _MAX_ROWS or len(lower.rows) <= len(upper.rows):
        return None
    if upper.bbox is None or lower.bbox is None or not _headings(upper):
        return None
    pitch = _row_height(lower)
    gap = lower.bbox[1] - upper.bbox[3]
    if pitch is None or not -0.25 * pitch <= gap <= _MAX_GAP * pitch:
        return None
    return _laid_over(upper, lower)


def joined(tables: Sequence[Table]) -> list[Table]:
    """``tables`` (one reader's, in reading order) with each heading block joined to the
    table under it (module docstring)."""
    out: list[Table] = []
    k = 0
    while k < len(tables):
        if k + 1 < len(tables):
            placed = _heading_of(tables[k], tables[k + 1])
            if placed is not None:
                out.append(_join(tables[k], tables[k + 1], placed))
                k += 2
                continue
        out.append(tables[k])
        k += 1
    return out
