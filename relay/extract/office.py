"""XLSX workbooks and DOCX documents into tables.

Both are ZIP archives of XML parts, opened only once ``relay.extract.archive`` has passed
them (the ZIP directory within its bounds, no part declaring a DTD). Which one a document
is, its parts say (``xl/workbook.xml``, ``word/document.xml``), whatever it was declared as;
a ZIP archive that is neither is ``unsupported_format``.

* XLSX (openpyxl, read-only): every worksheet that holds a value is a table, in the
  workbook's order; a table's ``page`` is its sheet's position in the workbook (1 for the
  first sheet, hidden ones counted). A merged range is one cell spanning its rows and
  columns (its text the top-left cell's). Values are the ones last computed (a formula's
  cached result: a workbook saved by a program that computes nothing has none), as text:
  numbers with at most 15 significant digits (as Excel shows them), dates and times in ISO
  8601 (``2024-01-31``, ``2024-01-31 14:30:00``), booleans ``TRUE``/``FALSE``.
* DOCX (python-docx): every table in document order, those nested in a cell included
  (after the table holding them; the cell holding one keeps only its own paragraphs), all on
  ``page`` 1 (a Word document has no fixed pages). A merged cell (``gridSpan``, ``vMerge``)
  is one cell spanning its columns and rows; a cell's paragraphs are lines of its text.

Every position of every table is charged to the document's cells (``CellBudget``,
``RELAY_EXTRACT_MAX_CELLS``) as it is read, before the next row is: openpyxl's sheet
dimension is not trusted (a file may declare a small one and hold millions of cells, or the
reverse), nor a Word cell's span.
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Hashable, Iterable, Iterator
from typing import Any
from xml.etree.ElementTree import XMLParser

from defusedxml import DefusedXmlException

from relay.extract.archive import open_package, part_names, vet_parts
from relay.extract.bounds import CellBudget
from relay.extract.errors import ExtractionError, shorten
from relay.extract.result import Grid, Table
from relay.extract.tables import spanned_table

__all__ = ["OFFICE", "read_office"]

# detect_format's kinds read here: declared as one of the two, or a ZIP declared as neither.
OFFICE = ("xlsx", "docx", "zip")
WHERE = {"xlsx": "the XLSX workbook", "docx": "the DOCX document"}

_WORKBOOK, _WORD = "xl/workbook.xml", "word/document.xml"
_MERGE_CELL = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}mergeCell"
_CHUNK = 64 * 1024
_MESSAGE = 200


def read_office(content: bytes, declared: str) -> tuple[str, list[Table]]:
    """The kind (``"xlsx"`` or ``"docx"``) and the tables of an XLSX or DOCX (module
    docstring). ``declared``: what the upload said it is (``"xlsx"``, ``"docx"``, or
    ``"zip"`` when its bytes alone said ZIP), which names the failure of bytes that are no
    readable archive."""
    if declared == "xlsx":
        code, what = "invalid_xlsx", WHERE["xlsx"]
    elif declared == "docx":
        code, what = "invalid_docx", WHERE["docx"]
    else:
        code, what = "unsupported_format", "the ZIP archive"
    with open_package(content, what, code) as package:
        names = part_names(package)
        if _WORKBOOK in names:
            kind = "xlsx"
        elif _WORD in names:
            kind = "docx"
        else:
            raise ExtractionError(
                "unsupported_format",
                "a ZIP archive that is neither an XLSX workbook nor a DOCX document",
            )
        vet_parts(package, WHERE[kind], f"invalid_{kind}")
    return kind, read_xlsx(content) if kind == "xlsx" else read_docx(content)


def _reason(exc: BaseException) -> str:
    return shorten(f"{type(exc).__name__}: {exc}", _MESSAGE)


# -- XLSX ----------------------------------------------------------------------------------


def _cell_text(value: object) -> str | None:
    """A cell's value as text (module docstring)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return format(value, ".15g")
    if isinstance(value, dt.datetime):
        if value.time() == dt.time() and value.tzinfo is None:
            return value.date().isoformat()
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return str(value)  # int, timedelta


class _MergeCells:
    """An XML parser target that keeps the ``ref`` of every ``mergeCell`` of a sheet and
    builds no tree (a sheet is mostly cells, read already)."""

    def __init__(self, limit: int) -> None:
        self.refs: list[str] = []
        self._limit = limit

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        if tag == _MERGE_CELL:
            self.refs.append(attrib.get("ref", ""))
            if len(self.refs) > self._limit:
                message = "a sheet has more merged ranges than cells"
                raise ExtractionError("invalid_xlsx", message)

    def close(self) -> None:
        return None


def _merged_ranges(source: Iterable[bytes], limit: int) -> list[str]:
    """The merged ranges (``"A1:C1"``) of the sheet XML read from ``source`` in chunks, no
    tree built. The C parser, not defusedxml's (pure Python, four times slower): the part
    was vetted for a DTD already (``relay.extract.archive``), and without one nothing
    expands."""
    target = _MergeCells(limit)
    parser = XMLParser(target=target)  # noqa: S314 (vetted: no DTD, so no entity)
    for chunk in source:
        parser.feed(chunk)
    parser.close()
    return target.refs


def _chunks(stream: io.BufferedIOBase) -> Iterator[bytes]:
    while chunk := stream.read(_CHUNK):
        yield chunk


def _merge_owner(refs: list[str], n_rows: int, width: int) -> list[list[Hashable]] | None:
    """The owner grid of a sheet (``relay.extract.tables.spanned_table``) from its merged
    ranges, clipped to the cells read; ``None`` when none falls on them. Ranges that overlap
    are ``invalid_xlsx`` (Excel never writes them), which also bounds the work to the grid."""
    from openpyxl.utils.cell import range_boundaries

    owner: list[list[Hashable]] | None = None
    covered = 0
    for index, ref in enumerate(refs):
        try:
            first_col, first_row, last_col, last_row = range_boundaries(ref)
        except (ValueError, TypeError, KeyError):
            continue  # not a range: nothing to merge
        if None in (first_col, first_row, last_col, last_row):
            continue  # whole rows or columns: no merged cell Excel would write
        rows = range(first_row - 1, min(last_row, n_rows))
        cols = range(first_col - 1, min(last_col, width))
        if len(rows) * len(cols) <= 1:
            continue  # off the grid, or one cell left of it
        covered += len(rows) * len(cols)
        if covered > n_rows * width:
            raise ExtractionError("invalid_xlsx", "a sheet's merged ranges overlap")
        if owner is None:
            owner = [[(r, c) for c in range(width)] for r in range(n_rows)]
        for r in rows:
            for c in cols:
                owner[r][c] = index
    return owner


def _sheet_table(sheet: Any, page: int, budget: CellBudget) -> Table | None:
    """One worksheet (read-only) as a table, or ``None`` when it holds no value."""
    sheet.reset_dimensions()  # the declared used range may lie: the rows say where cells are
    rows: Grid = []
    for values in sheet.iter_rows(values_only=True):
        budget.charge(max(len(values), 1))  # an empty row costs an iteration too
        rows.append([_cell_text(value) for value in values])
    if not any(any(row) for row in rows):
        return None
    width = max(len(row) for row in rows)
    budget.charge(sum(width - len(row) for row in rows))  # the padding below
    for row in rows:
        row.extend([None] * (width - len(row)))
    # Read-only sheets do not carry their merged ranges: read from the sheet's XML part.
    with sheet._get_source() as source:
        refs = _merged_ranges(_chunks(source), len(rows) * width)
    return spanned_table(page, rows, _merge_owner(refs, len(rows), width))


def read_xlsx(content: bytes) -> list[Table]:
    """The tables of a workbook's sheets (module docstring); ``invalid_xlsx`` when openpyxl
    cannot read it, ``too_many_cells`` past ``RELAY_EXTRACT_MAX_CELLS``."""
    import openpyxl
    from openpyxl.worksheet._read_only import ReadOnlyWorksheet

    budget = CellBudget()
    try:
        workbook = openpyxl.load_workbook(io.BytesIO(content), read_only=True, data_only=True)
    except (ExtractionError, MemoryError):
        raise
    except DefusedXmlException as exc:
        raise ExtractionError("unsafe_xml", f"the XLSX workbook: {_reason(exc)}") from None
    except Exception as exc:  # openpyxl raises whatever its parsers meet: the file's fault
        message = f"not a readable XLSX workbook: {_reason(exc)}"
        raise ExtractionError("invalid_xlsx", message) from None
    tables: list[Table] = []
    try:
        for page, name in enumerate(workbook.sheetnames, start=1):
            sheet = workbook[name]
            if isinstance(sheet, ReadOnlyWorksheet):  # not a chart sheet
                table = _sheet_table(sheet, page, budget)
                if table is not None:
                    tables.append(table)
    except (ExtractionError, MemoryError):
        raise
    except DefusedXmlException as exc:
        raise ExtractionError("unsafe_xml", f"the XLSX workbook: {_reason(exc)}") from None
    except Exception as exc:  # a sheet openpyxl cannot parse
        message = f"a sheet of the XLSX workbook cannot be read: {_reason(exc)}"
        raise ExtractionError("invalid_xlsx", message) from None
    finally:
        workbook.close()
    return tables


# -- DOCX ----------------------------------------------------------------------------------


_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_PARAGRAPH, _RUN, _TEXT = f"{_W}p", f"{_W}r", f"{_W}t"
_RUN_TEXT = {f"{_W}tab": "\t", f"{_W}br": "\n", f"{_W}cr": "\n"}
# Where a paragraph's runs may sit besides directly in it: a link, a tracked insertion, a
# simple field, a smart tag.
_RUN_HOLDERS = frozenset({f"{_W}hyperlink", f"{_W}ins", f"{_W}fldSimple", f"{_W}smartTag"})


def _run_text(run: Any) -> Iterator[str]:
    for child in run:
        if child.tag == _TEXT:
            yield child.text or ""
        elif child.tag in _RUN_TEXT:
            yield _RUN_TEXT[child.tag]


def _paragraph_text(paragraph: Any) -> str:
    """A ``w:p``'s text as Word shows it: its runs' text, tabs and breaks (python-docx's
    ``Paragraph.text`` compiles an XPath per call: 100 times slower on a big table)."""
    parts: list[str] = []
    for child in paragraph:
        if child.tag == _RUN:
            parts.extend(_run_text(child))
        elif child.tag in _RUN_HOLDERS:
            for run in child.iterchildren(_RUN):
                parts.extend(_run_text(run))
    return "".join(parts)


def _cell_lines(tc: Any) -> str:
    """A ``w:tc``'s own paragraphs (not those of a table nested in it), one a line."""
    return "\n".join(_paragraph_text(p) for p in tc.iterchildren(_PARAGRAPH))


def _word_table(tbl: Any, budget: CellBudget) -> Table | None:
    """One ``w:tbl`` (python-docx's ``CT_Tbl``) as a table. Positions are named by the
    ``w:tc`` that fills them: a ``gridSpan`` fills several of a row, a ``vMerge`` continuation
    takes the names above it; ``gridBefore``/``gridAfter`` and short rows are empty cells."""
    owner: list[list[Hashable]] = []
    rows: Grid = []
    merged = False  # whether a cell covers more than one position (else no names kept)
    for r, tr in enumerate(tbl.tr_lst):
        cells = tr.tc_lst
        spans = [max(int(tc.grid_span), 1) for tc in cells]
        before, after = max(int(tr.grid_before), 0), max(int(tr.grid_after), 0)
        budget.charge(before + sum(spans) + after)
        names: list[Hashable] = [("empty", r, c) for c in range(before)]
        texts: list[str | None] = [None] * before
        for index, (tc, span) in enumerate(zip(cells, spans, strict=True)):
            col = len(names)
            above = owner[r - 1][col : col + span] if r else []
            if tc.vMerge == "continue" and len(above) == span and not _empty_names(above):
                names.extend(above)
                texts.extend([None] * span)
                merged = True
                continue
            merged = merged or span > 1
            names.extend([(r, index)] * span)
            texts.extend([_cell_lines(tc), *([None] * (span - 1))])
        names.extend(("empty", r, len(names) + k) for k in range(after))
        texts.extend([None] * after)
        owner.append(names)
        rows.append(texts)
    if not rows:
        return None
    width = max(len(row) for row in rows)
    budget.charge(sum(width - len(row) for row in rows))
    for r, (names, texts) in enumerate(zip(owner, rows, strict=True)):
        names.extend(("empty", r, c) for c in range(len(names), width))
        texts.extend([None] * (width - len(texts)))
    return spanned_table(1, rows, owner if merged else None)


def _empty_names(names: list[Hashable]) -> bool:
    return any(isinstance(name, tuple) and name[0] == "empty" for name in names)


def read_docx(content: bytes) -> list[Table]:
    """The tables of a Word document (module docstring); ``invalid_docx`` when python-docx
    cannot read it, ``too_many_cells`` past ``RELAY_EXTRACT_MAX_CELLS``."""
    import docx
    from docx.oxml.ns import qn

    budget = CellBudget()
    try:
        document = docx.Document(io.BytesIO(content))
        body = document.element.body
        tables = [_word_table(tbl, budget) for tbl in body.iter(qn("w:tbl"))]
    except (ExtractionError, MemoryError):
        raise
    except Exception as exc:  # python-docx and lxml raise whatever the file makes them meet
        message = f"not a readable DOCX document: {_reason(exc)}"
        raise ExtractionError("invalid_docx", message) from None
    return [table for table in tables if table is not None]
