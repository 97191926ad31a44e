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
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Confidence", "Grid", "Table"]

Grid = list[list[str | None]]
Confidence = list[list[float | None]]


@dataclass(frozen=True)
class Table:
    """One table found on one page (module docstring)."""

    page: int
    rows: Grid
    confidence: Confidence | None = None

    def to_json(self) -> dict[str, object]:
        """The shape of one entry of a document's ``tables`` in the API."""
        return {"page": self.page, "rows": self.rows, "confidence": self.confidence}
