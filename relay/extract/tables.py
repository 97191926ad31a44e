"""Tables found on pages (PDF or image) into one list of rows.

Contract, shared by the PDF and image readers:

* A table is a list of rows of cells (``str`` or ``None``). Strings are stripped; rows
  with nothing in them are dropped; a table left with no rows is ignored.
* The first row of the first table is the header. Header names are stripped and their
  inner whitespace collapsed ("Unit\\nPrice" -> "Unit Price": a line wrapped inside a cell
  is layout, not meaning); blank and repeated names are disambiguated as for CSV.
* A later table whose first row equals the header continues the table (the header repeated
  on each page): that row is skipped. Any other later table is taken as a continuation
  without a repeated header: all its rows are appended under the same header.
* Rows shorter or longer than the header are handled as for CSV (``build_records``).
* No table at all -> ``no_table_found``; a header with no rows under it -> ``empty_document``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from relay.extract.csv_tsv import build_records
from relay.extract.errors import ExtractionError

__all__ = ["Cells", "clean_table", "rows_from_tables"]

Cells = list[str | None]


def _clean(row: Sequence[str | None]) -> Cells:
    return [cell.strip() if isinstance(cell, str) else None for cell in row]


def _header_names(row: Sequence[str | None]) -> list[str]:
    return [" ".join(cell.split()) if cell else "" for cell in row]


def clean_table(rows: Iterable[Sequence[str | None]]) -> list[Cells]:
    """``rows`` with string cells stripped and blank rows dropped."""
    return [cleaned for cleaned in map(_clean, rows) if any(cleaned)]


def rows_from_tables(tables: Sequence[list[Cells]], where: str) -> list[dict[str, object]]:
    """One list of rows from ``tables`` (cleaned, non-empty), as the module docstring says;
    ``where`` names the document in messages ("the PDF", "the image")."""
    if not tables:
        raise ExtractionError("no_table_found", f"no table found in {where}")
    header = _header_names(tables[0][0])
    body: list[Cells] = list(tables[0][1:])
    for table in tables[1:]:
        repeats_header = _header_names(table[0]) == header
        body.extend(table[1:] if repeats_header else table)
    records = build_records(header, body)
    if not records:
        raise ExtractionError("empty_document", "the table has a header row but no data rows")
    return records
