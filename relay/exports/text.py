"""A table as CSV, Markdown or HTML, written in chunks to a binary file.

**CSV** (RFC 4180): UTF-8, CRLF line ends, a field quoted when it holds a comma, a quote, CR
or LF (quotes doubled); an empty or null cell is an empty field. With ``bom`` the file starts
with a UTF-8 byte order mark, which Excel needs to read it as UTF-8. Every row has the
table's width; the first row is the table's first row (its header). A spanning cell's text
is at its top-left position and the cells it covers are empty, as in the table's ``rows``.

Formula injection (OWASP, "CSV Injection"): a spreadsheet opening the file runs a field
that starts with ``=``, ``+``, ``-`` or ``@`` (or their full-width forms), or with a tab or
CR, as a formula. Such a field is written with a ``'`` in front, which spreadsheets show as
text and do not evaluate, unless it is a plain number (``-12.50``, ``+3``, ``-1,234.00``,
``-5%``: digits, ``,`` and ``.`` after one sign) or only dashes (``-``, ``--``: "none" in
many tables). The table's exact text is in its JSON.

**Markdown** (GitHub Flavored Markdown table): the first row is the header row (GFM has
exactly one); ``\\``, ``|`` and the characters Markdown would read as formatting
(`` ` * _ [ ] < > ~ & ``) are escaped with a backslash; a line break inside a cell is
``<br>``. GFM has no spans: the covered cells are empty, as in CSV.

**HTML**: a small standalone UTF-8 document holding one ``<table>``, every text escaped, a
line break inside a cell as ``<br>``. The first row is in ``<thead>`` as ``<th
scope="col">`` cells (with the rows a header cell's ``rowspan`` reaches into); spans are
``rowspan`` / ``colspan`` and the cells they cover are left out, as HTML wants.
"""

from __future__ import annotations

import csv
import html
import io
import re
from collections.abc import Sequence
from typing import IO

from relay.exports.grid import Grid
from relay.text import scrub_surrogates

__all__ = [
    "BOM",
    "guard_formula",
    "header_rows",
    "write_csv",
    "write_html",
    "write_markdown",
    "write_rows",
]

BOM = b"\xef\xbb\xbf"
# Rows rendered per write: the chunk handed to the file.
CHUNK_ROWS = 512
# The ASCII starts and their full-width forms (U+FF1D, U+FF0B, U+FF0D, U+FF20).
_FORMULA_START = frozenset("=+-@\t\r\uff1d\uff0b\uff0d\uff20")
_PLAIN_NUMBER = re.compile("[+\\-\uff0b\uff0d]?(?:[0-9][0-9,.]*|\\.[0-9]+)%?|[-\uff0d]+")


def guard_formula(text: str) -> str:
    """``text`` made safe to open in a spreadsheet (module docstring)."""
    if text and text[0] in _FORMULA_START and not _PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text


def write_rows(rows: Sequence[Sequence[str | None]], out: IO[bytes]) -> None:
    """``rows`` as CSV records into ``out`` (module docstring: quoting, formula guard)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n", quoting=csv.QUOTE_MINIMAL)
    for start in range(0, len(rows), CHUNK_ROWS):
        for row in rows[start : start + CHUNK_ROWS]:
            writer.writerow(["" if cell is None else guard_formula(cell) for cell in row])
        out.write(buffer.getvalue().encode())
        buffer.seek(0)
        buffer.truncate()


def write_csv(grid: Grid, out: IO[bytes], *, bom: bool = False) -> None:
    """``grid`` as CSV into ``out`` (module docstring)."""
    if bom:
        out.write(BOM)
    write_rows(grid.rows, out)


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>~&|])")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _md_cell(cell: str | None) -> str:
    if not cell:
        return ""
    return _LINE_BREAK.sub("<br>", _MD_SPECIAL.sub(r"\\\1", cell))


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |\n"


def write_markdown(grid: Grid, out: IO[bytes]) -> None:
    """``grid`` as a GFM table into ``out`` (module docstring). A table without columns
    writes nothing (GFM has no such table)."""
    if grid.width == 0 or grid.height == 0:
        return
    lines = [
        _md_row([_md_cell(cell) for cell in grid.rows[0]]),
        _md_row(["---"] * grid.width),
    ]
    for start in range(1, grid.height, CHUNK_ROWS):
        lines += [
            _md_row([_md_cell(cell) for cell in row])
            for row in grid.rows[start : start + CHUNK_ROWS]
        ]
        out.write("".join(lines).encode())
        lines = []
    if lines:
        out.write("".join(lines).encode())


def _html_text(cell: str | None) -> str:
    if not cell:
        return ""
    return _LINE_BREAK.sub("<br>", html.escape(cell, quote=True))


def header_rows(grid: Grid) -> int:
    """Rows of the header group: the first row and every row a span of the group reaches
    (a row group cannot be crossed by a rowspan)."""
    if grid.height == 0:
        return 0
    end = 1
    row = 0
    while row < end:
        for col in range(grid.width):
            end = max(end, row + grid.span(row, col)[0])
        row += 1
    return min(end, grid.height)


def _html_row(grid: Grid, row: int, tag: str) -> str:
    cells: list[str] = []
    for col in range(grid.width):
        if (row, col) in grid.covered:
            continue
        rs, cs = grid.span(row, col)
        attrs = ""
        if tag == "th":
            attrs += ' scope="colgroup"' if cs > 1 else ' scope="col"'
        if rs > 1:
            attrs += f' rowspan="{rs}"'
        if cs > 1:
            attrs += f' colspan="{cs}"'
        cells.append(f"<{tag}{attrs}>{_html_text(grid.rows[row][col])}</{tag}>")
    return "<tr>" + "".join(cells) + "</tr>\n"


_STYLE = (
    "table{border-collapse:collapse;font-family:sans-serif;font-size:14px}"
    "th,td{border:1px solid #999;padding:2px 6px;vertical-align:top;text-align:left}"
    "th{background:#eee}caption{text-align:left;font-weight:bold;padding:4px 0}"
)


def write_html(grid: Grid, out: IO[bytes], *, title: str) -> None:
    """``grid`` as a standalone HTML document into ``out`` (module docstring); ``title``
    names it (page title and table caption)."""
    name = html.escape(scrub_surrogates(title), quote=True)
    out.write(
        (
            '<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n'
            f"<title>{name}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
            f"<table>\n<caption>{name}</caption>\n"
        ).encode()
    )
    head = header_rows(grid)
    parts: list[str] = []
    if head:
        parts.append("<thead>\n")
        parts += [_html_row(grid, row, "th") for row in range(head)]
        parts.append("</thead>\n")
    if head < grid.height:
        parts.append("<tbody>\n")
    for row in range(head, grid.height):
        parts.append(_html_row(grid, row, "td"))
        if len(parts) >= CHUNK_ROWS:
            out.write("".join(parts).encode())
            parts = []
    if head < grid.height:
        parts.append("</tbody>\n")
    parts.append("</table>\n</body>\n</html>\n")
    out.write("".join(parts).encode())
