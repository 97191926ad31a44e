"""Tables as XLSX worksheets, written by XlsxWriter row by row (``constant_memory``).

Every cell is written as a string (``write_string``: never a formula, a number or a URL,
whatever its text; the workbook is also opened with XlsxWriter's ``strings_to_*`` guesses
off), so ``=1+1`` stays text and ``0012`` keeps its zeros; Excel's "number stored as text"
marker is switched off over the table. A span is a merged range, its text in its top-left
cell. The first row is bold and frozen (it is the table's header). A cell longer than
Excel's 32,767 characters is cut there (CSV and JSON have it whole). A table with more rows
or columns than a worksheet holds (1,048,576 x 16,384) is :class:`ExportTooLarge`.

Memory: ``constant_memory`` keeps one row of a worksheet in memory and the rest in a
temporary file (under ``tmpdir``) until the workbook is closed and zipped into ``out``. A
worksheet's temporary file is closed once its table is written, so a workbook of a thousand
tables does not hold a thousand open files (XlsxWriter reopens each when it assembles the
workbook).
"""

from __future__ import annotations

from typing import IO, Any

import xlsxwriter
from xlsxwriter.utility import xl_range
from xlsxwriter.worksheet import Worksheet

from relay.exports.grid import ExportTooLarge, Grid

__all__ = ["MAX_COLS", "MAX_ROWS", "Workbook"]

MAX_ROWS = 1_048_576
MAX_COLS = 16_384
MAX_HYPERLINKS = 65_530  # per worksheet (Excel's bound)
WIDTH_MIN, WIDTH_MAX = 8, 60


def _close_rows_file(sheet: Worksheet) -> None:
    """Close the worksheet's temporary file of rows (XlsxWriter reopens it at close()); a
    version without the method keeps it open, which costs a file descriptor, no more."""
    close = getattr(sheet, "_opt_close", None)
    if callable(close):
        close()


class Workbook:
    """An XLSX workbook written into ``out`` (module docstring)."""

    def __init__(self, out: IO[bytes], *, tmpdir: str, title: str) -> None:
        self.book = xlsxwriter.Workbook(
            out,
            {
                "constant_memory": True,
                "tmpdir": tmpdir,
                "strings_to_formulas": False,
                "strings_to_numbers": False,
                "strings_to_urls": False,
            },
        )
        self.book.set_properties({"title": title, "comments": "Tables exported by relay"})
        self.bold = self.book.add_format({"bold": True, "valign": "top"})
        self.merged = self.book.add_format({"valign": "top"})
        self.merged_bold = self.book.add_format({"bold": True, "valign": "top"})

    def add_table(self, name: str, grid: Grid) -> None:
        """A worksheet named ``name`` holding ``grid`` (module docstring)."""
        if grid.height > MAX_ROWS or grid.width > MAX_COLS:
            raise ExportTooLarge(
                f"a table of {grid.height:,} rows and {grid.width:,} columns does not fit in "
                f"a worksheet ({MAX_ROWS:,} x {MAX_COLS:,}); export it as CSV"
            )
        sheet = self.book.add_worksheet(name)
        widths = [0] * grid.width
        for r, row in enumerate(grid.rows):
            for c, cell in enumerate(row):
                span = grid.spans.get((r, c))
                if span is not None:
                    # Text written after the merge: merge_range's own write would pass the
                    # text through write()'s guessing, and with a format it would write the
                    # covered rows' blanks ahead of this row (constant_memory writes rows in
                    # order only).
                    sheet.merge_range(r, c, r + span[0] - 1, c + span[1] - 1, "", None)
                    fmt = self.merged_bold if r == 0 else self.merged
                    sheet.write_string(r, c, cell or "", fmt)
                    continue
                if cell:
                    sheet.write_string(r, c, cell, self.bold if r == 0 else None)
                    widths[c] = max(widths[c], min(len(cell), WIDTH_MAX))
        for c, width in enumerate(widths):
            sheet.set_column(c, c, max(WIDTH_MIN, width + 2))
        if grid.height > 1:
            sheet.freeze_panes(1, 0)
        if grid.cells:
            sheet.ignore_errors(
                {"number_stored_as_text": xl_range(0, 0, grid.height - 1, grid.width - 1)}
            )
        _close_rows_file(sheet)

    def add_sheet(self, name: str) -> Sheet:
        """A worksheet written row by row by the caller (the batch's Index)."""
        return Sheet(self, self.book.add_worksheet(name))

    def close(self) -> None:
        """Assemble the workbook into ``out``."""
        self.book.close()

    def discard(self) -> None:
        """Close the worksheets' temporary files without assembling anything (a workbook
        abandoned midway); removing them is the caller's (they live in its ``tmpdir``)."""
        for sheet in self.book.worksheets():
            _close_rows_file(sheet)


class Sheet:
    """A worksheet of rows of text and numbers, written in order; a row's first cell may
    link to another worksheet."""

    def __init__(self, workbook: Workbook, sheet: Worksheet) -> None:
        self.workbook = workbook
        self.sheet = sheet
        self.row = 0
        self.links = 0
        self.widths: dict[int, int] = {}

    def append(self, values: list[Any], *, link: str | None = None, bold: bool = False) -> None:
        """Write the next row: strings as strings, ints as numbers, None as nothing; with
        ``link`` the first cell links to that worksheet's A1."""
        fmt = self.workbook.bold if bold else None
        for c, value in enumerate(values):
            if value is None or value == "":
                continue
            if isinstance(value, int):
                self.sheet.write_number(self.row, c, value, fmt)
                text = str(value)
            else:
                text = str(value)
                if c == 0 and link is not None and self.links < MAX_HYPERLINKS:
                    target = "internal:'" + link.replace("'", "''") + "'!A1"
                    self.sheet.write_url(self.row, c, target, string=text)
                    self.links += 1
                else:
                    self.sheet.write_string(self.row, c, text, fmt)
            self.widths[c] = max(self.widths.get(c, 0), min(len(text), WIDTH_MAX))
        self.row += 1

    def finish(self) -> None:
        for c, width in self.widths.items():
            self.sheet.set_column(c, c, max(WIDTH_MIN, width + 2))
        if self.row > 1:
            self.sheet.freeze_panes(1, 0)
