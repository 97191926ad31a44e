"""A stored table made into what the review page draws: cell boxes over the page, the grid.

A table of a document's result is ``{"page", "rows", "confidence", "bbox", "cells"}``:
``rows`` the grid (a spanning cell's text at its top-left position, the cells it covers
``null``), ``confidence`` of the same shape (0-1, ``null`` for no score: a PDF's text layer)
or ``null``, and the geometry: ``bbox`` ``[x0, y0, x1, y1]`` and ``cells`` ``[{"row", "col",
"row_span", "col_span", "bbox"}]``, coordinates as fractions (0-1) of the page's width and
height, origin top left of the page as displayed, x right, y down. A table without ``cells``
(results stored before geometry, or a plug-in that gives none) shows its grid only.

The result came from an extractor, maybe a plug-in: every value is checked here, and what
is not what it should be (a box outside the page, x1 < x0, a span past the grid) is
dropped or clamped, never trusted. Boxes become percentages of the page (an SVG of
``viewBox="0 0 100 100"`` stretched over the page image), so any size of the image fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# How many rows of one table the page draws (grid and boxes); the rest is counted.
MAX_ROWS = 300
# How many tables of one page the page draws.
MAX_TABLES = 20

# Confidence bands: the class names the stylesheet colours (and the legend's words).
BANDS = (
    ("high", "0.9 or more"),
    ("mid", "0.6 to 0.9"),
    ("low", "below 0.6"),
    ("none", "no score (text layer)"),
)


def band(confidence: float | None) -> str:
    """``high`` (>= 0.9), ``mid`` (0.6-0.9), ``low`` (< 0.6) or ``none`` (no score)."""
    if confidence is None:
        return "none"
    if confidence >= 0.9:
        return "high"
    return "mid" if confidence >= 0.6 else "low"


@dataclass(frozen=True)
class Box:
    """A box in percent of the page: left, top, width, height."""

    x: float
    y: float
    w: float
    h: float


def box(value: Any) -> Box | None:
    """``[x0, y0, x1, y1]`` (fractions) as a Box clamped to the page; None when malformed."""
    if not isinstance(value, list | tuple) or len(value) != 4:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        return None
    x0, y0, x1, y1 = (min(max(float(v), 0.0), 1.0) for v in value)
    if not all(math.isfinite(v) for v in (x0, y0, x1, y1)) or x1 <= x0 or y1 <= y0:
        return None
    return Box(
        round(x0 * 100, 3), round(y0 * 100, 3), round((x1 - x0) * 100, 3), round((y1 - y0) * 100, 3)
    )


@dataclass
class Cell:
    """One cell of the grid: where it starts, its spans, text and score, and its box."""

    key: str  # unique on the page: "t{table}-r{row}-c{col}" (the ids of cell and box)
    row: int
    col: int
    row_span: int
    col_span: int
    text: str
    confidence: float | None
    box: Box | None

    @property
    def band(self) -> str:
        return band(self.confidence)

    @property
    def label(self) -> str:
        score = "no score" if self.confidence is None else f"confidence {self.confidence:.2f}"
        where = f"row {self.row + 1}, column {self.col + 1}"
        return f"{where}: {self.text or '(empty)'} ({score})"


@dataclass
class TableView:
    number: int  # 1-based among the document's tables
    page: int
    box: Box | None
    grid: list[list[Cell]]  # the cells each row starts (covered positions left out)
    geometry: bool  # whether the table came with its cells' boxes
    rows: int
    cols: int
    shown_rows: int
    boxes: list[Cell] = field(default_factory=list)  # the cells with a box, to outline


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _score(confidence: Any, r: int, c: int) -> float | None:
    try:
        value = confidence[r][c]
    except (TypeError, IndexError, KeyError):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return min(max(float(value), 0.0), 1.0)


def _spans(cells: Any, n_rows: int, n_cols: int) -> dict[tuple[int, int], tuple[int, int, Any]]:
    """The valid entries of ``cells`` by (row, col): (row_span, col_span, bbox)."""
    found: dict[tuple[int, int], tuple[int, int, Any]] = {}
    if not isinstance(cells, list):
        return found
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        r, c = cell.get("row"), cell.get("col")
        if not isinstance(r, int) or not isinstance(c, int) or isinstance(r, bool):
            continue
        if not (0 <= r < n_rows and 0 <= c < n_cols) or (r, c) in found:
            continue
        rs, cs = cell.get("row_span", 1), cell.get("col_span", 1)
        rs = rs if isinstance(rs, int) and not isinstance(rs, bool) and rs >= 1 else 1
        cs = cs if isinstance(cs, int) and not isinstance(cs, bool) and cs >= 1 else 1
        found[(r, c)] = (min(rs, n_rows - r), min(cs, n_cols - c), cell.get("bbox"))
    return found


def table_view(number: int, table: Any) -> TableView | None:
    """The table as the page draws it; None when it is no table (no grid of rows)."""
    if not isinstance(table, dict) or not isinstance(table.get("rows"), list):
        return None
    rows = [r if isinstance(r, list) else [] for r in table["rows"]]
    n_rows, n_cols = len(rows), max((len(r) for r in rows), default=0)
    page = table.get("page")
    page = page if isinstance(page, int) and not isinstance(page, bool) and page >= 1 else 1
    spans = _spans(table.get("cells"), n_rows, n_cols)
    shown = min(n_rows, MAX_ROWS)
    covered: set[tuple[int, int]] = set()
    grid: list[list[Cell]] = []
    boxes: list[Cell] = []
    for r in range(shown):
        line: list[Cell] = []
        for c in range(n_cols):
            if (r, c) in covered:
                continue
            rs, cs, bbox = spans.get((r, c), (1, 1, None))
            rs = min(rs, shown - r)
            # A span never runs into a position another span already holds.
            cs = next((k for k in range(1, cs) if (r, c + k) in covered), cs)
            for dr in range(rs):
                for dc in range(cs):
                    if dr or dc:
                        covered.add((r + dr, c + dc))
            text = _text(rows[r][c]) if c < len(rows[r]) else ""
            cell = Cell(
                f"t{number}-r{r}-c{c}",
                r,
                c,
                rs,
                cs,
                text,
                _score(table.get("confidence"), r, c),
                box(bbox),
            )
            line.append(cell)
            if cell.box is not None:
                boxes.append(cell)
        grid.append(line)
    return TableView(
        number=number,
        page=page,
        box=box(table.get("bbox")),
        grid=grid,
        geometry=bool(spans),
        rows=n_rows,
        cols=n_cols,
        shown_rows=shown,
        boxes=boxes,
    )


def table_views(tables: list[Any] | None) -> list[TableView]:
    """Every table of a result, numbered from 1 in result order."""
    views = (table_view(i, t) for i, t in enumerate(tables or [], start=1))
    return [v for v in views if v is not None]
