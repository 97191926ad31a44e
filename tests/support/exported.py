"""Independent readers of the exported files, for the tests: each turns a file back into the
grid it shows (the table's ``rows`` with empty cells as ``""``) and its spans.

CSV through the ``csv`` module, XLSX through openpyxl, HTML through ``html.parser`` (rowspan
and colspan expanded the way a browser lays the table out), Markdown through a plain split on
unescaped pipes. None of them shares code with ``relay.exports``.
"""

from __future__ import annotations

import csv
import io
import re
from html.parser import HTMLParser
from typing import Any

import openpyxl

Grid = list[list[str]]
Spans = dict[tuple[int, int], tuple[int, int]]


def expected(rows: list[list[str | None]]) -> Grid:
    """A table's ``rows`` as the files show them: null as ``""``."""
    return [["" if cell is None else cell for cell in row] for row in rows]


def read_csv(data: bytes) -> Grid:
    """RFC 4180 CSV (CRLF records, UTF-8, an optional BOM) as its records."""
    text = data.decode("utf-8")
    text = text.removeprefix("\ufeff")
    return [list(row) for row in csv.reader(io.StringIO(text, newline=""), strict=True)]


def unguard(cell: str) -> str:
    """A CSV field without the ``'`` the formula guard puts before it."""
    guarded = (
        cell[:1] == "'" and cell[1:2] != "" and cell[1:2] in "=+-@\t\r\uff1d\uff0b\uff0d\uff20"
    )
    return cell[1:] if guarded else cell


def load_xlsx(data: bytes) -> Any:
    """The workbook, read by openpyxl."""
    return openpyxl.load_workbook(io.BytesIO(data))


def sheet_grid(ws: Any, *, text_only: bool = True) -> tuple[list[list[Any]], Spans]:
    """A worksheet's grid over its used range (every value a string unless ``text_only`` is
    false: the Index has numbers) and its merged ranges as spans by anchor."""
    grid: list[list[Any]] = []
    for row in ws.iter_rows(min_row=1, max_row=ws.max_row, max_col=ws.max_column):
        values: list[Any] = []
        for cell in row:
            value = cell.value
            if text_only:
                assert value is None or isinstance(value, str), (cell.coordinate, value)
            values.append("" if value is None else value)
        grid.append(values)
    spans = {
        (r.min_row - 1, r.min_col - 1): (r.max_row - r.min_row + 1, r.max_col - r.min_col + 1)
        for r in ws.merged_cells.ranges
    }
    return grid, spans


def read_xlsx(
    data: bytes, sheet: str | None = None, *, text_only: bool = True
) -> tuple[list[list[Any]], Spans, Any]:
    """A worksheet of the workbook (the active one when ``sheet`` is None): :func:`sheet_grid`
    and the worksheet itself."""
    book = load_xlsx(data)
    ws = book[sheet] if sheet is not None else book.active
    return (*sheet_grid(ws, text_only=text_only), ws)


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[tuple[str, int, int, str]]] = []  # (text, rowspan, colspan, tag)
        self.cell: list[str] | None = None
        self.attrs: tuple[int, int, str] = (1, 1, "td")
        self.head_rows = 0
        self.in_head = False
        self.caption: list[str] | None = None
        self.captions: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "thead":
            self.in_head = True
        elif tag == "tr":
            self.rows.append([])
            self.head_rows += self.in_head
        elif tag in ("td", "th"):
            self.cell = []
            self.attrs = (int(found.get("rowspan") or 1), int(found.get("colspan") or 1), tag)
        elif tag == "br" and self.cell is not None:
            self.cell.append("\n")
        elif tag == "caption":
            self.caption = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "thead":
            self.in_head = False
        elif tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(("".join(self.cell), *self.attrs))
            self.cell = None
        elif tag == "caption" and self.caption is not None:
            self.captions.append("".join(self.caption))
            self.caption = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)
        elif self.caption is not None:
            self.caption.append(data)


def read_html(data: bytes) -> tuple[Grid, Spans, int, list[str]]:
    """The one table of an HTML document: its grid (the cells a span covers empty), its
    spans by anchor, how many rows its ``<thead>`` holds, and its captions."""
    parser = _Tables()
    parser.feed(data.decode("utf-8"))
    parser.close()
    placed: dict[tuple[int, int], str] = {}
    spans: Spans = {}
    covered: set[tuple[int, int]] = set()
    for r, cells in enumerate(parser.rows):
        c = 0
        for text, rowspan, colspan, _ in cells:
            while (r, c) in covered:
                c += 1
            placed[(r, c)] = text
            if (rowspan, colspan) != (1, 1):
                spans[(r, c)] = (rowspan, colspan)
            for i in range(r, r + rowspan):
                for j in range(c, c + colspan):
                    covered.add((i, j))
            c += colspan
    height = max((p[0] for p in covered), default=-1) + 1
    width = max((p[1] for p in covered), default=-1) + 1
    grid = [[placed.get((r, c), "") for c in range(width)] for r in range(height)]
    return grid, spans, parser.head_rows, parser.captions


_PIPE = re.compile(r"(?<!\\)\|")
_ESCAPED = re.compile(r"\\(.)")


def read_markdown(data: bytes) -> Grid:
    """A GFM table: the header row and the body rows (the delimiter row checked and left
    out), ``<br>`` as a line break, backslash escapes undone."""
    lines = data.decode("utf-8").splitlines()
    rows: Grid = []
    for number, line in enumerate(lines):
        assert line.startswith("| ") and line.endswith(" |"), line
        cells = [c.strip() for c in _PIPE.split(line[1:-1])]
        if number == 1:
            assert all(c == "---" for c in cells), line
            continue
        rows.append([_ESCAPED.sub(r"\1", c.replace("<br>", "\n")) for c in cells])
    return rows
