"""The cells of a table and their boxes, as the engines build them and cleaning keeps them.

The contract (coordinates, anchors, spans) is ``relay.extract.result``'s. Here:

* ``Frame``: the page as displayed, in an engine's own units (PDF points, pixels), and
  ``Frame.box``: a box in those units as fractions of it, clamped to the page, rounded.
* ``rectangles``: the cells of a grid whose positions name the cell they belong to (merged
  ruled cells, a heading across columns, SLANet-plus's spans), each cell a rectangle.
* ``keep``: the cells once rows or columns are dropped (blank rows, empty columns): a cell
  anchored in a dropped row moves to its first kept row, a span loses the dropped rows it
  crossed, a cell left with no row or column goes; boxes stay (the region on the page).
* ``complete``: a cell for every position no cell covers (rows padded, holes).
* ``banded``: a box for cells without one, from their row's and column's band.
* ``tiling_problem``: why cells do not cover a grid exactly once (a plug-in's, a test's).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, replace

from relay.extract.result import Box, Cell

__all__ = ["Frame", "banded", "complete", "enclosing", "keep", "rectangles", "tiling_problem"]

_PLACES = 4


@dataclass(frozen=True)
class Frame:
    """The page as displayed, in an engine's units: left, top, right, bottom."""

    x0: float
    top: float
    x1: float
    bottom: float

    def box(self, x0: float, top: float, x1: float, bottom: float) -> Box | None:
        """``(x0, top, x1, bottom)`` as fractions of the frame, clamped to it and rounded to
        4 decimals; ``None`` when nothing of it is left on the page."""
        width, height = self.x1 - self.x0, self.bottom - self.top
        if not (width > 0 and height > 0) or not math.isfinite(x0 + top + x1 + bottom):
            return None

        def fraction(value: float, start: float, size: float) -> float:
            return round(min(max((value - start) / size, 0.0), 1.0), _PLACES)

        a, b = fraction(x0, self.x0, width), fraction(x1, self.x0, width)
        c, d = fraction(top, self.top, height), fraction(bottom, self.top, height)
        return (a, c, b, d) if a < b and c < d else None


def enclosing(boxes: Iterable[Box | None]) -> Box | None:
    """The smallest box holding every box of ``boxes`` (``None`` ones skipped)."""
    known = [box for box in boxes if box is not None]
    if not known:
        return None
    return (
        min(b[0] for b in known),
        min(b[1] for b in known),
        max(b[2] for b in known),
        max(b[3] for b in known),
    )


def rectangles(owner: Sequence[Sequence[Hashable]]) -> list[tuple[int, int, int, int]]:
    """The cells of a grid in which each position holds the name of the cell it belongs to,
    as ``(row, col, row_span, col_span)`` in row-major order. A cell starts at the first
    position of its name (row-major: its top-left, where its text is) and takes the widest
    run of that name along its row, then every row below where that whole run has the name.
    What a name holds beyond that rectangle (an L-shaped merge) starts cells of its own."""
    taken: set[tuple[int, int]] = set()
    found: list[tuple[int, int, int, int]] = []
    for r, row in enumerate(owner):
        for c, name in enumerate(row):
            if (r, c) in taken:
                continue
            width = 1
            while c + width < len(row) and (r, c + width) not in taken:
                if row[c + width] != name:
                    break
                width += 1
            height = 1
            while r + height < len(owner) and all(
                c + k < len(owner[r + height])
                and owner[r + height][c + k] == name
                and (r + height, c + k) not in taken
                for k in range(width)
            ):
                height += 1
            taken.update((r + i, c + k) for i in range(height) for k in range(width))
            found.append((r, c, height, width))
    return found


def _kept(start: int, span: int, index: dict[int, int]) -> tuple[int, int] | None:
    """The new start and span of ``start``/``span`` once only the positions in ``index``
    (old to new) are left; ``None`` when none of them is."""
    kept = [index[k] for k in range(start, start + span) if k in index]
    return (kept[0], len(kept)) if kept else None


def keep(cells: Iterable[Cell], rows: Sequence[int], cols: Sequence[int]) -> tuple[Cell, ...]:
    """``cells`` once the grid is cut down to ``rows`` and ``cols`` (old indices, in
    ascending order): re-indexed, spans shortened, cells left empty dropped (module
    docstring)."""
    row_index = {old: new for new, old in enumerate(rows)}
    col_index = {old: new for new, old in enumerate(cols)}
    out: list[Cell] = []
    for cell in cells:
        r = _kept(cell.row, cell.row_span, row_index)
        c = _kept(cell.col, cell.col_span, col_index)
        if r is not None and c is not None:
            out.append(Cell(r[0], c[0], r[1], c[1], cell.bbox))
    return tuple(sorted(out, key=lambda cell: (cell.row, cell.col)))


def complete(cells: Iterable[Cell], n_rows: int, n_cols: int) -> tuple[Cell, ...]:
    """``cells`` and a plain cell for every position of an ``n_rows`` x ``n_cols`` grid that
    none of them covers, in row-major order."""
    out = list(cells)
    covered = {
        (r, c)
        for cell in out
        for r in range(cell.row, cell.row + cell.row_span)
        for c in range(cell.col, cell.col + cell.col_span)
    }
    out += [Cell(r, c) for r in range(n_rows) for c in range(n_cols) if (r, c) not in covered]
    return tuple(sorted(out, key=lambda cell: (cell.row, cell.col)))


def banded(cells: Sequence[Cell]) -> tuple[Cell, ...]:
    """``cells``, each one without a box given the crossing of its rows' band and its
    columns' band when both are known: a row's band is the vertical extent of the boxes of
    the one-row cells in it, a column's the horizontal extent of the one-column cells'."""
    rows: dict[int, list[Box]] = {}
    cols: dict[int, list[Box]] = {}
    for cell in cells:
        if cell.bbox is None:
            continue
        if cell.row_span == 1:
            rows.setdefault(cell.row, []).append(cell.bbox)
        if cell.col_span == 1:
            cols.setdefault(cell.col, []).append(cell.bbox)
    out: list[Cell] = []
    for cell in cells:
        if cell.bbox is None:
            across = [b for k in range(cell.row, cell.row + cell.row_span) for b in rows.get(k, [])]
            down = [b for k in range(cell.col, cell.col + cell.col_span) for b in cols.get(k, [])]
            if across and down:
                x0, x1 = min(b[0] for b in down), max(b[2] for b in down)
                y0, y1 = min(b[1] for b in across), max(b[3] for b in across)
                if x0 < x1 and y0 < y1:
                    cell = replace(cell, bbox=(x0, y0, x1, y1))
        out.append(cell)
    return tuple(out)


def tiling_problem(cells: Sequence[Cell], rows: Sequence[Sequence[object]]) -> str | None:
    """Why ``cells`` are not the cells of the grid ``rows`` (``None`` when they are): one
    per anchor in row-major order, each within the grid, none overlapping another, together
    covering every position, and every position a cell covers beyond its anchor ``None``."""
    n_rows, n_cols = len(rows), max((len(row) for row in rows), default=0)
    seen: set[tuple[int, int]] = set()
    previous = (-1, -1)
    for cell in cells:
        where = f"the cell at row {cell.row}, column {cell.col}"
        if cell.row_span < 1 or cell.col_span < 1:
            return f"{where} spans less than one row or column"
        if cell.row < 0 or cell.col < 0 or (cell.row, cell.col) <= previous:
            return "the cells are not one per position in row-major order"
        if cell.row + cell.row_span > n_rows or cell.col + cell.col_span > n_cols:
            return f"{where} goes past the grid"
        previous = (cell.row, cell.col)
        for r in range(cell.row, cell.row + cell.row_span):
            for c in range(cell.col, cell.col + cell.col_span):
                if (r, c) in seen:
                    return f"two cells cover row {r}, column {c}"
                if (r, c) != previous and c < len(rows[r]) and rows[r][c] is not None:
                    return f"{where} covers row {r}, column {c}, which has text"
                seen.add((r, c))
    if len(seen) != sum(len(row) for row in rows):
        return "the cells do not cover every position of the grid"
    return None
