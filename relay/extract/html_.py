"""HTML pages into tables: every ``<table>``, in document order, with ``colspan`` and
``rowspan`` as spans.

Parsed by lxml's HTML parser (libxml2: linear on any input, where the standard library's
``html.parser`` of Python 3.11 is quadratic on some, seconds for 100 KB of ``<x``, and fails
outright on others), into a tree whose tables are then laid out as a browser lays them out:

* Rows are ``<tr>``, directly in the table or in a row group (``<thead>``, ``<tbody>``,
  ``<tfoot>``); cells (``<td>``, ``<th>``) outside a row make one.
* A cell takes the first column of its row that no cell above still covers; ``colspan``
  (1-1000) and ``rowspan`` (0-65534, 0 meaning to the end of its row group) as HTML clamps
  them; a span past the last row of its row group is cut there.
* A cell's text is its text with whitespace collapsed; ``<br>`` and block elements
  (``<p>``, ``<div>``, ``<li>``, ...) break lines. ``<script>``, ``<style>`` and a table's
  ``<caption>`` are no cell text.
* A table inside a cell is a table of its own, after the one holding it (the cell keeps only
  its own text). Tables nested deeper than ``RELAY_EXTRACT_MAX_DEPTH`` are
  ``too_deeply_nested`` (libxml2 itself stops at 256 elements deep).
* Every position is charged to the document's cells (``CellBudget``,
  ``RELAY_EXTRACT_MAX_CELLS``) as it is laid out, so spans that would make a grid of
  millions are refused before they are built.

Every table is on ``page`` 1. HTML declares no entities and the parser reads nothing from
the network. The bytes are decoded by their byte order mark, else the declared charset (the
content type's, else a ``<meta>`` one near the start), else UTF-8, else Windows-1252 (what
browsers assume of pages that say nothing).
"""

from __future__ import annotations

import codecs
import io
import re
from collections.abc import Hashable, Iterator
from typing import Any

from relay.extract.bounds import CellBudget, current
from relay.extract.errors import ExtractionError
from relay.extract.result import Grid, Table
from relay.extract.tables import spanned_table

__all__ = ["decode_html", "read_html"]

_MAX_COLSPAN, _MAX_ROWSPAN = 1000, 65534  # HTML's own clamps
_TO_GROUP_END = 1 << 30  # rowspan="0": every row left in the row group
_CELLS = frozenset({"td", "th"})
_ROW_GROUPS = frozenset({"thead", "tbody", "tfoot"})
_NOT_TEXT = frozenset({"table", "script", "style", "template", "noscript"})
_LINE_BREAKS = frozenset(
    {"br", "p", "div", "li", "ul", "ol", "dl", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6"}
    | {"pre", "blockquote", "hr", "address", "section", "article", "header", "footer"}
)
_META_WINDOW = 4096
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)
_CHARSET_PARAM = re.compile(r"""charset\s*=\s*["']?([A-Za-z0-9._:-]+)""", re.I)


def _codec(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def decode_html(content: bytes, content_type: str) -> str:
    """``content`` as text (module docstring); never fails: what does not decode is U+FFFD."""
    if content.startswith(codecs.BOM_UTF8):
        return content[len(codecs.BOM_UTF8) :].decode("utf-8", "replace")
    if content.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return content.decode("utf-16", "replace")
    declared = _CHARSET_PARAM.search(content_type)
    meta = _META_CHARSET.search(content[:_META_WINDOW])
    codec = _codec(declared.group(1) if declared else None) or _codec(
        meta.group(1).decode("ascii") if meta else None
    )
    if codec is not None and not codec.startswith("utf-16"):  # no BOM: the page is ASCII-based
        return content.decode(codec, "replace")
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        return content.decode("cp1252", "replace")


def _span(value: str | None, low: int, high: int) -> int:
    """A ``colspan`` or ``rowspan`` attribute clamped as HTML does; 1 when absent or no
    number (what browsers take)."""
    if not value:
        return 1
    try:
        number = int(value.strip())
    except ValueError:
        return 1
    return min(max(number, low), high)


class _TableBuilder:
    """One table being laid out: its rows of cell names and texts, and the cells of rows
    above that still cover columns (``rowspan``)."""

    def __init__(self, budget: CellBudget) -> None:
        self.budget = budget
        self.owner: list[list[Hashable]] = []
        self.rows: Grid = []
        self.names: dict[int, Hashable] | None = None  # the open row: column -> cell name
        self.texts: dict[int, str] = {}
        self.carried: dict[int, tuple[Hashable, int]] = {}  # column -> (cell, rows left)
        self.column = 0  # where the open row's next cell may start
        self.cell: list[str] | None = None  # the open cell's text
        self.cell_column = 0
        self.cells = 0  # cells started, for their names
        self.spans = False  # whether a cell spans more than one position (else no names kept)

    def start_row(self) -> dict[int, Hashable]:
        self.end_row()
        names: dict[int, Hashable] = {}
        for col, (name, left) in list(self.carried.items()):
            names[col] = name
            if left <= 1:
                del self.carried[col]
            else:
                self.carried[col] = (name, left - 1)
        self.budget.charge(len(names))
        self.names, self.texts, self.column = names, {}, 0
        return names

    def start_cell(self, colspan: int, rowspan: int) -> None:
        self.end_cell()
        names = self.names if self.names is not None else self.start_row()
        col = self.column
        while col in names:
            col += 1
        self.budget.charge(colspan)
        self.spans = self.spans or colspan > 1 or rowspan != 1
        name = ("cell", self.cells)
        self.cells += 1
        for c in range(col, col + colspan):
            names.setdefault(c, name)
            if rowspan != 1 and c not in self.carried:
                self.carried[c] = (name, rowspan - 1 if rowspan else _TO_GROUP_END)
        self.column = col + colspan
        self.cell, self.cell_column = [], col

    def text(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)

    def end_cell(self) -> None:
        if self.cell is None:
            return
        lines = (" ".join(line.split()) for line in "".join(self.cell).split("\n"))
        self.texts[self.cell_column] = "\n".join(line for line in lines if line)
        self.cell = None

    def end_row(self) -> None:
        self.end_cell()
        if self.names is None:
            return
        names, row = self.names, len(self.owner)
        width = max(names, default=-1) + 1
        self.budget.charge(width - len(names))  # the holes, cells of their own
        self.owner.append([names.get(c, ("hole", row, c)) for c in range(width)])
        self.rows.append([self.texts.get(c) for c in range(width)])
        self.names = None

    def end_group(self) -> None:
        """A row group ends: no span reaches past it."""
        self.end_row()
        self.carried.clear()

    def table(self) -> Table | None:
        self.end_row()
        width = max((len(row) for row in self.rows), default=0)
        if width == 0:
            return None
        self.budget.charge(sum(width - len(row) for row in self.rows))
        for r, (names, texts) in enumerate(zip(self.owner, self.rows, strict=True)):
            names.extend(("hole", r, c) for c in range(len(names), width))
            texts.extend([None] * (width - len(texts)))
        return spanned_table(1, self.rows, self.owner if self.spans else None)


def _cell_text(cell: Any) -> Iterator[str]:
    """The text of a ``<td>`` or ``<th>`` (module docstring), in pieces: its elements walked
    with a stack, not recursion, tables in it and script skipped, line breaks marked."""
    stack: list[Any] = [cell]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
            continue
        if item is not cell:
            if item.tail:
                stack.append(item.tail)
            tag = item.tag if isinstance(item.tag, str) else ""
            if tag in _NOT_TEXT:
                continue
            if tag in _LINE_BREAKS:
                yield "\n"
                stack.append("\n")
        if item.text:
            yield item.text
        stack.extend(list(item)[::-1])


class _Reader:
    """The page's tables from lxml's parse events, in one pass: each table laid out by a
    ``_TableBuilder`` as its rows and cells end, and every element freed once nothing needs
    it (what a cell holds is kept until the cell's text is read), so a page costs its open
    cells, not its markup."""

    def __init__(self, max_depth: int | None) -> None:
        self.budget = CellBudget()
        self.max_depth = max_depth
        self.open: list[tuple[Any, int, _TableBuilder]] = []  # (element, slot in found, ...)
        self.found: list[Table | None] = []  # in the order the tables start

    def _builder(self, element: Any) -> _TableBuilder | None:
        """The builder of the innermost open table when ``element`` (a row, a cell, a row
        group) is one of its own: in it, in its row group, or (a cell) in such a row."""
        if not self.open:
            return None
        table, _, builder = self.open[-1]
        parent = element.getparent()
        if element.tag in _CELLS and parent is not None and parent.tag == "tr":
            parent = parent.getparent()
        if parent is not None and parent.tag in _ROW_GROUPS:
            parent = parent.getparent()
        return builder if parent is table else None

    def start(self, element: Any) -> None:
        tag = element.tag
        if tag == "table":
            if self.max_depth is not None and len(self.open) >= self.max_depth:
                raise ExtractionError(
                    "too_deeply_nested",
                    f"the HTML page nests tables deeper than {self.max_depth} levels",
                )
            self.open.append((element, len(self.found), _TableBuilder(self.budget)))
            self.found.append(None)
        elif tag == "tr" or tag in _CELLS:
            builder = self._builder(element)
            if builder is None:
                return
            if tag == "tr":
                builder.start_row()
            else:
                colspan = _span(element.get("colspan"), 1, _MAX_COLSPAN)
                rowspan = _span(element.get("rowspan"), 0, _MAX_ROWSPAN)
                builder.start_cell(colspan, rowspan)
        elif tag in _ROW_GROUPS and self.open and element.getparent() is self.open[-1][0]:
            self.open[-1][2].end_group()

    def end(self, element: Any) -> None:
        tag = element.tag
        if tag == "table" and self.open and self.open[-1][0] is element:
            _, slot, table = self.open.pop()
            self.found[slot] = table.table()
            element.clear(keep_tail=True)  # a cell holding it reads only its tail
            return
        if tag in _CELLS or tag == "tr":
            builder = self._builder(element)
            if builder is not None and tag == "tr":
                builder.end_row()
            elif builder is not None and builder.cell is not None:
                builder.text("".join(_cell_text(element)))
                builder.end_cell()
        elif tag in _ROW_GROUPS and self.open and element.getparent() is self.open[-1][0]:
            self.open[-1][2].end_group()
        if self.open and self.open[-1][2].cell is not None:
            return  # inside a cell whose text is not read yet
        element.clear(keep_tail=True)
        parent = element.getparent()
        while parent is not None and element.getprevious() is not None:
            del parent[0]  # siblings done with: a page is not kept whole

    def tables(self) -> list[Table]:
        while self.open:  # tables left open at the end of the page end there
            _, slot, builder = self.open.pop()
            self.found[slot] = builder.table()
        return [table for table in self.found if table is not None]


def read_html(content: bytes, content_type: str = "") -> list[Table]:
    """The tables of an HTML page (module docstring), in the order they start."""
    from lxml import etree

    reader = _Reader(current().max_depth)
    # Decoded here (the rules above), handed to libxml2 as UTF-8 whatever the page declares.
    events = etree.iterparse(
        io.BytesIO(decode_html(content, content_type).encode("utf-8")),
        events=("start", "end"),
        html=True,
        encoding="utf-8",
        remove_comments=True,
        remove_pis=True,
        no_network=True,
    )
    try:
        for event, element in events:
            if event == "start":
                reader.start(element)
            else:
                reader.end(element)
    except etree.XMLSyntaxError:
        pass  # libxml2 gives up (past its depth bound, say): the tables read so far stand
    return reader.tables()
