"""PDF tables into rows, with pdfplumber.

Contract:

* Every page is read with ``page.extract_tables()`` (pdfplumber's default, ruling-line based
  detection), in page order and, within a page, in pdfplumber's order.
* The first non-blank row of the first table is the header. Header names are stripped and
  their inner whitespace collapsed ("Unit\\nPrice" -> "Unit Price": a line wrapped inside a
  cell is layout, not meaning); blank and repeated names are disambiguated as for CSV.
* A later table whose first row equals the header continues the table (the header repeated
  on each page): that row is skipped. Any other later table is taken as a continuation
  without a repeated header: all its rows are appended under the same header.
* Cells pdfplumber reports as ``None`` (merged or missing) stay ``None``; strings are
  stripped. Rows shorter or longer than the header are handled as for CSV; blank rows are
  skipped.
* Errors: bytes pdfplumber cannot open or read -> ``invalid_pdf``; no table anywhere ->
  ``no_table_found``; a header with no rows under it -> ``empty_document``. Running out of
  memory (a decompression bomb under the sandbox's limit) is re-raised as ``MemoryError``,
  never disguised as ``invalid_pdf``.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import pdfplumber

from relay.extract.csv_tsv import build_records
from relay.extract.errors import ExtractionError, shorten

__all__ = ["extract_pdf"]

Cells = list[str | None]


def _clean(row: Sequence[str | None]) -> Cells:
    return [cell.strip() if isinstance(cell, str) else None for cell in row]


def _header_names(row: Sequence[str | None]) -> list[str]:
    return [" ".join(cell.split()) if cell else "" for cell in row]


def _is_blank(row: Sequence[str | None]) -> bool:
    return not any(row)


def _reason(exc: Exception) -> str:
    """pdfminer's exceptions are often bare (``PSEOF()``); the type name is then the reason."""
    text = str(exc).strip()
    return shorten(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, 160)


def _out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was caused by, a MemoryError (pdfplumber wraps pdfminer's
    errors, so a decompression bomb stopped by the memory limit arrives as a
    ``PdfminerException``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, MemoryError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _raise_for_memory(exc: Exception) -> None:
    if _out_of_memory(exc):
        raise MemoryError("the PDF needs more memory than allowed") from exc


def _tables(content: bytes) -> list[list[Cells]]:
    """Every non-empty table of every page, rows cleaned and blank rows dropped."""
    try:
        document = pdfplumber.open(io.BytesIO(content))
    except Exception as exc:  # pdfminer raises many unrelated types for broken files
        _raise_for_memory(exc)
        raise ExtractionError("invalid_pdf", f"could not open the PDF ({_reason(exc)})") from None
    tables: list[list[Cells]] = []
    with document:
        try:
            pages = document.pages
        except Exception as exc:
            _raise_for_memory(exc)
            raise ExtractionError(
                "invalid_pdf", f"could not read the PDF ({_reason(exc)})"
            ) from None
        if not pages:
            raise ExtractionError("invalid_pdf", "the PDF has no pages")
        for number, page in enumerate(pages, start=1):
            try:
                found = page.extract_tables()
            except Exception as exc:
                _raise_for_memory(exc)
                message = f"could not read page {number} of the PDF ({_reason(exc)})"
                raise ExtractionError("invalid_pdf", message) from None
            finally:
                page.close()  # drop the page's parsed objects: long PDFs would pile them up
            for table in found:
                rows = [cleaned for cleaned in map(_clean, table) if not _is_blank(cleaned)]
                if rows:
                    tables.append(rows)
    return tables


def extract_pdf(content: bytes) -> list[dict[str, object]]:
    """Read the PDF's tables as one table of rows (module docstring)."""
    tables = _tables(content)
    if not tables:
        raise ExtractionError("no_table_found", "no table found in the PDF")
    header = _header_names(tables[0][0])
    body: list[Cells] = list(tables[0][1:])
    for table in tables[1:]:
        repeats_header = _header_names(table[0]) == header
        body.extend(table[1:] if repeats_header else table)
    records = build_records(header, body)
    if not records:
        raise ExtractionError("empty_document", "the table has a header row but no data rows")
    return records
