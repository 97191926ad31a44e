"""relay's default extractor on one document, and the tables it found.

The document goes through ``relay.extract.extract`` in this process (the function the
worker's extraction child calls, with the worker's default ``max_image_pixels``) and is
named as an upload would be (``eu-001.pdf``, ``PMC….png``, ``eu-001.tif``). How the tables
are read back depends on what relay on this checkout offers, the first that works:

1. ``tables``: the extractor's result carries the document's tables (``[{page, rows,
   confidence}]``, or ``Table`` records): those, as a customer gets them;
2. ``engine``: the engines' own tables (``relay.extract.pdf._tables``; for images
   ``relay.extract.image._pages`` and ``relay.extract.ocr.read_tables``), then the same
   checks ``extract`` makes (``rows_from_tables``): a document ``extract`` fails has no
   tables;
3. ``line_items``: the rows of ``line_items`` under their keys as the header row: one
   table per document.

A failure is the ``ExtractionError`` code ``extract`` raises; ``MemoryError`` is
``extraction_memory`` and any other exception ``extraction_error`` (as
``relay.extract.loader`` maps them). A failed document has no tables.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from relay.extract import extract
from relay.extract.errors import ExtractionError, shorten
from relay.extract.image import DEFAULT_MAX_IMAGE_PIXELS

__all__ = ["RelayResult", "mode", "run_relay"]

Grid = list[list[str | None]]

_CONTENT_TYPES = {"pdf": "application/pdf", "tif": "image/tiff", "png": "image/png"}


@dataclass
class RelayResult:
    tables: list[Grid] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    message: str = ""


def _grid(rows: object) -> Grid:
    if not isinstance(rows, Sequence):
        return []
    out: Grid = []
    for row in rows:
        if isinstance(row, Sequence) and not isinstance(row, str):
            out.append([None if cell is None else str(cell) for cell in row])
    return out


def _tables_of(result: object) -> list[Grid] | None:
    """The tables in an extractor's result, when it carries any (mode 1)."""
    tables: object = None
    if isinstance(result, Mapping):
        tables = result.get("tables")
    elif hasattr(result, "tables"):
        tables = result.tables
    if not isinstance(tables, Sequence):
        return None
    grids: list[Grid] = []
    for table in tables:
        rows = table.get("rows") if isinstance(table, Mapping) else getattr(table, "rows", None)
        grids.append(_grid(rows))
    return grids


def _line_item_table(rows: Sequence[Mapping[str, object]]) -> list[Grid]:
    if not rows:
        return []
    header = list(rows[0].keys())
    grid: Grid = [[str(k) for k in header]]
    for row in rows:
        grid.append([None if row.get(k) is None else str(row.get(k)) for k in header])
    return [grid]


def _engine(content: bytes, kind: str) -> list[Grid]:
    """Mode 2: the engines' tables, failing as ``extract`` would."""
    from relay.extract.tables import clean_table, rows_from_tables

    found: list[Any]
    if kind == "pdf":
        from relay.extract import pdf

        found = list(pdf._tables(content, DEFAULT_MAX_IMAGE_PIXELS))
    else:
        from relay.extract import image
        from relay.extract.ocr import read_tables

        found = []
        for page in image._pages(content, DEFAULT_MAX_IMAGE_PIXELS):
            for table in read_tables(page):
                rows = clean_table(table)
                if rows:
                    found.append(rows)
    grids = [_grid(getattr(t, "rows", t)) for t in found]
    rows_from_tables([g for g in grids if g], "the document")  # extract's own checks
    return grids


def _engine_available() -> bool:
    try:
        from relay.extract import image, ocr, pdf
    except ImportError:
        return False
    return all(
        callable(getattr(module, name, None))
        for module, name in ((pdf, "_tables"), (image, "_pages"), (ocr, "read_tables"))
    )


_MODE: str | None = None


def mode() -> str:
    """Which of the module docstring's ways this checkout allows: ``tables``, ``engine`` or
    ``line_items`` (decided on a tiny CSV-free probe: the result type of ``extract``)."""
    global _MODE
    if _MODE is None:
        probe = extract(b"a,b\n1,2\n", filename="probe.csv", content_type="text/csv", fields=[])
        if _tables_of(probe) is not None:
            _MODE = "tables"
        elif _engine_available():
            _MODE = "engine"
        else:
            _MODE = "line_items"
    return _MODE


def _call(how: Callable[[], list[Grid]]) -> RelayResult:
    t0 = time.perf_counter()
    try:
        tables = how()
    except ExtractionError as exc:
        return RelayResult([], time.perf_counter() - t0, exc.code, shorten(exc.message, 200))
    except MemoryError:
        return RelayResult([], time.perf_counter() - t0, "extraction_memory", "MemoryError")
    except Exception as exc:
        message = shorten(f"{type(exc).__name__}: {exc}", 200)
        return RelayResult([], time.perf_counter() - t0, "extraction_error", message)
    return RelayResult(tables, time.perf_counter() - t0)


def run_relay(content: bytes, filename: str, kind: str) -> RelayResult:
    """relay's tables of one document (module docstring); ``kind`` is ``pdf`` or ``image``."""
    how = mode()
    content_type = _CONTENT_TYPES.get(filename.rsplit(".", 1)[-1].lower(), "")

    def via_extract() -> list[Grid]:
        result: object = extract(content, filename=filename, content_type=content_type, fields=[])
        if how == "tables":
            return _tables_of(result) or []
        assert isinstance(result, list)
        return _line_item_table(result)

    if how == "engine":
        return _call(lambda: _engine(content, kind))
    return _call(via_extract)
