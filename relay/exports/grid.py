"""A stored table read as a grid to render: its rows, its spans, its size; and the bounds
every export is held to.

A document's ``tables`` entry is ``{"page": N, "rows": [[cell | null, ...], ...],
"confidence": ..., "bbox": ..., "cells": [...]}``; ``bbox`` and ``cells`` may be absent
(results stored before tables carried their geometry, plug-ins that report none). ``cells``
holds one entry per cell anchor, ``{"row": r, "col": c, "row_span": n, "col_span": m,
...}``; a spanning cell's text sits at its top-left position in ``rows`` and the positions it
covers are null. :func:`spans_of` reads the spans, trusting them only where they fit: a span
is kept when it is larger than one cell, its anchor lies in the grid, it does not overlap a
span kept before it, and no position it covers holds text (the text wins over the geometry:
merging would hide it). A span running past the grid's edge is cut at the edge. Without
``cells`` every span is 1.

Nothing here reads Redis or knows HTTP: :mod:`relay.api.exports` hands the stored tables in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from relay.text import scrub_surrogates

__all__ = [
    "ExportLimits",
    "ExportTooLarge",
    "Grid",
    "Meter",
    "Span",
    "read_table",
    "spans_of",
]

Cell = str | None
Span = tuple[int, int]  # (row_span, col_span), each >= 1


def _whole(value: object) -> int | None:
    """``value`` when it is a plain int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _free(
    rows: Sequence[Sequence[Cell]], taken: set[tuple[int, int]], r: int, c: int, span: Span
) -> tuple[bool, int]:
    """Whether the area of ``span`` anchored at (r, c) is free (no position taken, no text
    at a position other than the anchor), and how many positions were looked at."""
    looked = 0
    for i in range(r, r + span[0]):
        for j in range(c, c + span[1]):
            looked += 1
            if (i, j) in taken or ((i, j) != (r, c) and rows[i][j]):
                return False, looked
    return True, looked


def spans_of(
    table: Mapping[str, object], rows: Sequence[Sequence[Cell]]
) -> dict[tuple[int, int], Span]:
    """The spans larger than one cell of ``table`` over the grid ``rows`` (rectangular), by
    anchor ``(row, col)`` (module docstring: which are kept). Empty without ``cells``.

    Bounded by the grid, whatever ``cells`` holds: an anchor is considered once, and once
    the positions looked at pass four times the grid's, the remaining entries are ignored
    (a well-formed ``cells`` looks at each position about once)."""
    cells = table.get("cells")
    if not isinstance(cells, list) or not rows or not rows[0]:
        return {}
    height, width = len(rows), len(rows[0])
    budget = 4 * height * width
    taken: set[tuple[int, int]] = set()
    seen: set[tuple[int, int]] = set()
    spans: dict[tuple[int, int], Span] = {}
    for entry in cells:
        if budget <= 0:
            break
        if not isinstance(entry, Mapping):
            continue
        r, c = _whole(entry.get("row")), _whole(entry.get("col"))
        rs, cs = _whole(entry.get("row_span", 1)), _whole(entry.get("col_span", 1))
        if r is None or c is None or rs is None or cs is None or rs < 1 or cs < 1:
            continue
        if not (0 <= r < height and 0 <= c < width) or (r, c) in seen:
            continue
        seen.add((r, c))
        span = (min(rs, height - r), min(cs, width - c))
        if span == (1, 1):
            continue
        free, looked = _free(rows, taken, r, c, span)
        budget -= looked
        if free:
            taken.update((i, j) for i in range(r, r + span[0]) for j in range(c, c + span[1]))
            spans[(r, c)] = span
    return spans


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


@dataclass(frozen=True)
class Grid:
    """One table ready to render: ``rows`` rectangular (``width`` cells each, strings or
    None), ``spans`` by anchor, the positions the spans cover (anchors excluded) in
    ``covered``, and the UTF-8 bytes of its text in ``text_bytes``."""

    page: int
    rows: list[list[Cell]]
    width: int
    spans: dict[tuple[int, int], Span] = field(default_factory=dict)
    covered: frozenset[tuple[int, int]] = frozenset()
    text_bytes: int = 0

    @property
    def height(self) -> int:
        return len(self.rows)

    @property
    def cells(self) -> int:
        return self.height * self.width

    def span(self, row: int, col: int) -> Span:
        return self.spans.get((row, col), (1, 1))


def read_table(table: Mapping[str, object]) -> Grid:
    """The stored ``table`` as a :class:`Grid`: rows padded with None to the widest, any
    cell that is not a string taken as None (the contract has only strings and nulls), a
    lone surrogate replaced by U+FFFD (no UTF-8 can carry it), spans as :func:`spans_of`
    reads them."""
    raw = table.get("rows")
    page = _whole(table.get("page")) or 1
    rows: list[list[Cell]] = []
    size = 0
    if isinstance(raw, list):
        for row in raw:
            cells: list[Cell] = []
            if isinstance(row, list):
                for cell in row:
                    if isinstance(cell, str):
                        cell = scrub_surrogates(cell)
                        size += _utf8_size(cell)
                        cells.append(cell)
                    else:
                        cells.append(None)
            rows.append(cells)
    width = max((len(row) for row in rows), default=0)
    for row in rows:
        row.extend([None] * (width - len(row)))
    spans = spans_of(table, rows)
    covered = frozenset(
        (i, j)
        for (r, c), (rs, cs) in spans.items()
        for i in range(r, r + rs)
        for j in range(c, c + cs)
        if (i, j) != (r, c)
    )
    return Grid(page, rows, width, spans, covered, size)


@dataclass(frozen=True)
class ExportLimits:
    """What one export may hold (``RELAY_EXPORT_MAX_TABLES``, ``..._CELLS``, ``..._BYTES``)."""

    max_tables: int
    max_cells: int
    max_bytes: int


class ExportTooLarge(Exception):
    """The export would pass one of its :class:`ExportLimits`; nothing of it is sent."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Meter:
    """Counts the tables, cells (grid positions, empty ones included) and bytes of text an
    export takes in; :meth:`charge` raises :class:`ExportTooLarge` at the first table that
    would pass a bound."""

    def __init__(self, limits: ExportLimits) -> None:
        self.limits = limits
        self.tables = 0
        self.cells = 0
        self.bytes = 0

    def charge(self, grid: Grid) -> None:
        limits = self.limits
        if self.tables + 1 > limits.max_tables:
            raise ExportTooLarge(
                f"the export holds more than {limits.max_tables:,} tables "
                "(RELAY_EXPORT_MAX_TABLES); export fewer documents or single tables"
            )
        if self.cells + grid.cells > limits.max_cells:
            raise ExportTooLarge(
                f"the export holds more than {limits.max_cells:,} cells "
                "(RELAY_EXPORT_MAX_CELLS); export fewer documents or single tables"
            )
        if self.bytes + grid.text_bytes > limits.max_bytes:
            raise ExportTooLarge(
                f"the export's text is larger than {limits.max_bytes:,} bytes "
                "(RELAY_EXPORT_MAX_BYTES); export fewer documents or single tables"
            )
        self.tables += 1
        self.cells += grid.cells
        self.bytes += grid.text_bytes
