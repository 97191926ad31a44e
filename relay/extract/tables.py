"""The tables a page reader found (PDF or image) into the document's ``line_items`` and
``tables``.

Contract, shared by the PDF and image readers (``relay.extract.result.Table`` is what they
hand over, in reading order):

* Every table is cleaned: string cells stripped; rows with nothing in them dropped (with
  their confidences, and their cells: ``clean``); rows padded with ``None`` to the table's
  widest row; a table left with no rows is dropped. What is left is the document's
  ``tables``, in reading order.
* ``line_items`` keeps the v1 contract: the first row of the first table is the header. A
  table of one row (a heading or a line of figures read as a table) gives no rows, so the
  first table *with rows under its header* is the one: a document whose first table is a
  lone row is not failed for it while later tables have rows (all are in ``tables``).
  Header names are stripped and their inner whitespace collapsed ("Unit\\nPrice" ->
  "Unit Price": a line wrapped inside a cell is layout, not meaning); blank and repeated
  names are disambiguated as for CSV. Rows shorter or longer than the header are handled as
  for CSV (``build_records``).
* A later table is appended to ``line_items`` only when it **continues** the first: it
  comes right after the first table or after the last table that continued it (reading
  order), it starts on the *next* page (a table split at a page break; two tables on one
  page are two tables), and it has the **same columns**:

  - the same number of columns as the first table, and
  - if its first row is a header row, the same header: a first row whose names equal the
    header is a repeated header and is skipped; a first row that *looks like a header*
    (every cell filled, no cell with a digit) but differs from it starts another table.
    Any other first row is data, and the whole table is appended.

  Every other table is in ``tables`` only. (A continuation whose first row is all text,
  like a list of names, is therefore kept apart: adding a wrong table's rows to
  ``line_items`` is the worse mistake, and ``tables`` still has it.)
* No table at all -> ``no_table_found``; only tables of a header row with no rows under it
  -> ``empty_document``.

For CSV, TSV and JSON documents ``tables`` is :func:`table_of_records`: the ``line_items``
themselves as one grid.

XLSX, DOCX and HTML documents say where their tables and cells are: a sheet, a Word table,
a ``<table>``, and which positions a merged cell covers (:func:`spanned_table`). Their
tables are apart by their author's choice, not split by a page break, so none continues
another: ``line_items`` is the first table with rows under its header alone
(:func:`first_table_records`). A table's leading title rows (one filled cell in a table of
several columns: a merged heading above the header, a sheet's title in A1) are no header;
``line_items`` starts below them, ``tables`` keeps them.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Sequence
from typing import NamedTuple, TypeVar

from relay.extract import geometry
from relay.extract.csv_tsv import build_records
from relay.extract.errors import ExtractionError
from relay.extract.result import Cell, Confidence, Grid, Table

__all__ = [
    "Cells",
    "Extraction",
    "clean",
    "clean_table",
    "first_table_records",
    "spanned_table",
    "split_tables",
    "table_of_records",
]

Cells = list[str | None]
Rows = list[dict[str, object]]
_T = TypeVar("_T")


class Extraction(NamedTuple):
    """What the default extractor returns: the v1 rows and every table apart."""

    line_items: Rows
    tables: list[Table]


def _clean(row: Sequence[str | None]) -> Cells:
    return [cell.strip() if isinstance(cell, str) else None for cell in row]


def _header_names(row: Sequence[str | None]) -> list[str]:
    return [" ".join(cell.split()) if cell else "" for cell in row]


def clean_table(rows: Iterable[Sequence[str | None]]) -> list[Cells]:
    """``rows`` with string cells stripped and blank rows dropped."""
    return [cleaned for cleaned in map(_clean, rows) if any(cleaned)]


def clean(table: Table) -> Table | None:
    """``table`` as the module docstring says (stripped, blank rows dropped, rectangular),
    or ``None`` when nothing is left. Its cells follow the rows (``geometry.keep``: a cell
    anchored in a dropped row starts at its next kept row, a span loses the dropped rows),
    positions added by padding are cells of their own, and the table's box is then the
    one holding its cells' boxes (its own when none has one)."""
    rows: Grid = []
    confidence: Confidence = []
    kept: list[int] = []
    scores = table.confidence
    for index, raw in enumerate(table.rows):
        row = _clean(raw)
        if not any(row):
            continue
        rows.append(row)
        kept.append(index)
        if scores is not None:
            score = _padded(list(scores[index]) if index < len(scores) else [], len(row))
            confidence.append([s if c else None for c, s in zip(row, score, strict=False)])
    if not rows:
        return None
    width = max(len(row) for row in rows)
    rows = [_padded(row, width) for row in rows]
    padded = [_padded(score, width) for score in confidence] if scores is not None else None
    if table.cells is None:
        return Table(table.page, rows, padded, table.bbox)
    if len(kept) == len(table.rows) and all(len(row) == width for row in table.rows):
        return Table(table.page, rows, padded, table.bbox, table.cells)
    old_width = max((len(row) for row in table.rows), default=0)
    cells = geometry.keep(table.cells, kept, range(old_width))
    cells = geometry.banded(geometry.complete(cells, len(rows), width))
    bbox = geometry.enclosing(cell.bbox for cell in cells) or table.bbox
    return Table(table.page, rows, padded, bbox, cells)


def _padded(row: list[_T | None], width: int) -> list[_T | None]:
    return row + [None] * (width - len(row)) if len(row) < width else row


def _looks_like_header(row: Sequence[str | None]) -> bool:
    return all(cell and not any(ch.isdigit() for ch in cell) for cell in row)


def _continues(table: Table, previous: Table, header: list[str]) -> bool:
    """Whether ``table`` continues the first table, ``previous`` being its last piece so
    far (module docstring: next page, same columns)."""
    if table.page != previous.page + 1 or len(table.rows[0]) != len(header):
        return False
    first = table.rows[0]
    return _header_names(first) == header or not _looks_like_header(first)


def split_tables(found: Sequence[Table], where: str) -> Extraction:
    """``line_items`` and ``tables`` from a page reader's tables (module docstring);
    ``where`` names the document in messages ("the PDF", "the image")."""
    tables = [table for table in map(clean, found) if table is not None]
    if not tables:
        raise ExtractionError("no_table_found", f"no table found in {where}")
    start = next((i for i, table in enumerate(tables) if len(table.rows) > 1), 0)
    first = tables[start]
    header = _header_names(first.rows[0])
    body: list[Cells] = list(first.rows[1:])
    previous = first
    for table in tables[start + 1 :]:
        if not _continues(table, previous, header):
            break
        repeats_header = _header_names(table.rows[0]) == header
        body.extend(table.rows[1:] if repeats_header else table.rows)
        previous = table
    records = build_records(header, body)
    if not records:
        raise ExtractionError("empty_document", "the table has a header row but no data rows")
    return Extraction(records, tables)


def spanned_table(
    page: int, rows: Sequence[Sequence[str | None]], owner: Sequence[Sequence[Hashable]] | None
) -> Table | None:
    """A table read from a file that names the cell of every position (a workbook's merged
    ranges, a Word table's merged cells, HTML's colspan and rowspan): ``rows`` the text at
    each position, ``owner`` (of the same shape, every row as long) the name of the cell it
    belongs to, ``None`` when every position is a cell of its own. Each cell is the rectangle
    ``geometry.rectangles`` makes of its name, its text the one at its top-left position
    (what the others hold is dropped, as a spreadsheet shows a merged range). The table is
    then cleaned (``clean``) and the columns empty from top to bottom at its left and right
    edges are dropped (a sheet's used range often reaches past its table). ``None`` when
    nothing is left."""
    if owner is None:
        table = clean(Table(page, [list(row) for row in rows]))
    else:
        cells = tuple(Cell(r, c, h, w) for r, c, h, w in geometry.rectangles(owner))
        grid: Grid = [[None] * len(row) for row in rows]
        for cell in cells:
            grid[cell.row][cell.col] = rows[cell.row][cell.col]
        table = clean(Table(page, grid, None, None, cells))
    return _trimmed(table) if table is not None else None


def _trimmed(table: Table) -> Table:
    """``table`` without the columns empty from top to bottom at its left and right edges."""
    first, last = 0, len(table.rows[0]) - 1
    while first < last and not any(row[first] for row in table.rows):
        first += 1
    while last > first and not any(row[last] for row in table.rows):
        last -= 1
    if first == 0 and last == len(table.rows[0]) - 1:
        return table
    kept = range(first, last + 1)
    rows: Grid = [row[kept.start : kept.stop] for row in table.rows]
    if table.cells is None:
        return Table(table.page, rows)
    cells = geometry.keep(table.cells, range(len(rows)), kept)
    return Table(table.page, rows, None, None, geometry.complete(cells, len(rows), len(kept)))


def _title_row(row: Sequence[str | None]) -> bool:
    return len(row) > 1 and sum(1 for cell in row if cell) == 1


def first_table_records(tables: Sequence[Table], where: str) -> Rows:
    """The ``line_items`` of a document whose tables are apart by nature (module docstring):
    the first table with rows under its header, below its title rows; ``no_table_found``
    without a table, ``empty_document`` when no table has rows under a header."""
    if not tables:
        raise ExtractionError("no_table_found", f"no table found in {where}")
    bodies: list[Table] = []
    for table in tables:
        start = 0
        while start < len(table.rows) - 1 and _title_row(table.rows[start]):
            start += 1
        bodies.append(Table(table.page, table.rows[start:]))
    first = next((body for body in bodies if len(body.rows) > 1), bodies[0])
    return split_tables([first], where).line_items


def _text(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def table_of_records(records: Sequence[dict[str, object]]) -> Table:
    """``records`` (CSV, TSV or JSON ``line_items``) as one table on page 1: a header row of
    their keys (first seen first), then one row per record; values as strings (numbers,
    booleans, lists and objects as their compact JSON text), missing or null ones ``None``."""
    keys: dict[str, None] = {}
    for record in records:
        keys.update(dict.fromkeys(record))
    names = list(keys)
    rows: Grid = [list[str | None](names)]
    rows.extend([_text(record.get(name)) for name in names] for record in records)
    return Table(1, rows, None)  # no geometry: bbox null, every cell plain
