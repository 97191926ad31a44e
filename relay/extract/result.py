"""What a reader of pages (PDF or image) hands back: the tables it found, kept apart.

This is the seam between the table engines (``pdf``, ``image``, ``ocr``) and the rest of
relay. An engine returns ``list[Table]`` in reading order (page order, then top to bottom,
left to right within a page); ``relay.extract.tables`` turns that list into the document's
``line_items`` (v1 contract) and its ``tables`` (every table, kept apart).

* ``page`` is 1-based: the PDF page, or the frame of a multi-page TIFF (1 for an image).
* ``rows`` is a grid: every row has the same length; a cell is a stripped string or
  ``None``; a spanning cell's text sits at its top-left position, the cells it covers are
  ``None``.
* ``confidence`` has the shape of ``rows``: 0-1 per cell for text read by OCR (``None`` for
  an empty cell), or is ``None`` as a whole when the text comes from a PDF's text layer.

Geometry (where the table and its cells are on the page):

* Coordinates are fractions of the page's width and height, 0 to 1, the origin at the
  top-left corner of the page as displayed (a PDF page's CropBox with its ``/Rotate``
  applied; an image after its EXIF orientation), x to the right, y down; a box is
  ``(x0, y0, x1, y1)`` with ``x0 < x1`` and ``y0 < y1``, rounded to 4 decimals. The same for
  a PDF's text layer, an image and a scanned page read by OCR, so a box can be laid over the
  rendered page with percentages.
* ``cells`` has one ``Cell`` per *anchor*: every grid position that no spanning cell
  covers, empty ones included, in row-major order. ``row`` and ``col`` index ``rows``;
  ``row_span`` and ``col_span`` (1 or more) say how many rows and columns it covers: its
  text is at ``rows[row][col]`` and every other position it covers is ``None``. Together the
  cells cover every position of the grid exactly once. A cell's ``bbox`` is its region on
  the page: the ruled box of a ruled table, the crossing of its row's band and its column's
  band in an unruled one (an empty cell has one too); ``None`` when nothing is known.
* ``bbox`` is the table's box, holding every cell's box; ``None`` when nothing is known.
* ``cells`` left ``None`` (a plug-in's table, a CSV's) means every position is a cell of its
  own with no box: ``grid_cells`` gives them. The geometry takes no part in ``==``: two
  tables are equal when their page, text and confidences are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Box", "Cell", "Confidence", "Grid", "Table"]

Grid = list[list[str | None]]
Confidence = list[list[float | None]]
Box = tuple[float, float, float, float]  # x0, y0, x1, y1: fractions of the page (above)


@dataclass(frozen=True)
class Cell:
    """One cell of a table's grid (module docstring): where it starts, what it spans, its box."""

    row: int
    col: int
    row_span: int = 1
    col_span: int = 1
    bbox: Box | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "row": self.row,
            "col": self.col,
            "row_span": self.row_span,
            "col_span": self.col_span,
            "bbox": list(self.bbox) if self.bbox is not None else None,
        }

    @property
    def plain(self) -> bool:
        """Whether the cell says nothing its position does not: no span, no box."""
        return self.row_span == 1 and self.col_span == 1 and self.bbox is None


@dataclass(frozen=True)
class Table:
    """One table found on one page (module docstring)."""

    page: int
    rows: Grid
    confidence: Confidence | None = None
    bbox: Box | None = field(default=None, compare=False)
    cells: tuple[Cell, ...] | None = field(default=None, compare=False)

    def grid_cells(self) -> tuple[Cell, ...]:
        """``cells``, or one plain cell per position when the table has none."""
        if self.cells is not None:
            return self.cells
        return tuple(Cell(r, c) for r, row in enumerate(self.rows) for c in range(len(row)))

    def to_json(self) -> dict[str, object]:
        """The shape of one entry of a document's ``tables`` in the API."""
        return {
            **self.stored_json(),
            "cells": [cell.to_json() for cell in self.grid_cells()],
        }

    def stored_json(self) -> dict[str, object]:
        """``to_json`` as a result is stored: ``cells`` left out when every cell is plain
        (``grid_cells`` of the rows alone gives them back), so a CSV of a million values does
        not store a million cells that say nothing; ``relay.state.store`` puts them back on read."""
        value: dict[str, object] = {
            "page": self.page,
            "rows": self.rows,
            "confidence": self.confidence,
            "bbox": list(self.bbox) if self.bbox is not None else None,
        }
        if self.cells is not None and not all(cell.plain for cell in self.cells):
            value["cells"] = [cell.to_json() for cell in self.cells]
        return value
