"""The export formats (what ``?format=`` takes) and one table written in any of them."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO

from relay.exports.grid import ExportLimits, Meter, read_table
from relay.exports.names import SheetNames, file_stem, label_tail, table_label
from relay.exports.text import write_csv, write_html, write_markdown
from relay.exports.xlsx import Workbook

__all__ = [
    "BATCH_FORMATS",
    "CSV",
    "HTML",
    "JSON",
    "MARKDOWN",
    "TABLE_FORMATS",
    "XLSX",
    "ZIP",
    "Format",
    "table_filename",
    "write_table",
]


@dataclass(frozen=True)
class Format:
    """An export format: its ``?format=`` name, the response's media type, the file's
    extension."""

    name: str
    media_type: str
    extension: str


CSV = Format("csv", "text/csv; charset=utf-8; header=present", "csv")
XLSX = Format("xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", "xlsx")
MARKDOWN = Format("md", "text/markdown; charset=utf-8; variant=GFM", "md")
HTML = Format("html", "text/html; charset=utf-8", "html")
JSON = Format("json", "application/json", "json")
ZIP = Format("zip", "application/zip", "zip")

# One table (the first is the default), a batch (the first is the default).
TABLE_FORMATS: dict[str, Format] = {f.name: f for f in (CSV, XLSX, MARKDOWN, HTML, JSON)}
BATCH_FORMATS: dict[str, Format] = {f.name: f for f in (XLSX, ZIP)}


def table_filename(filename: str, page: int, n: int, fmt: Format) -> str:
    """The download's name: ``<stem>_p<page>_t<n>.<extension>`` (``relay.exports.names``)."""
    return f"{file_stem(filename)}_p{page}_t{n}.{fmt.extension}"


def write_table(
    fmt: Format,
    table: Mapping[str, object],
    out: IO[bytes],
    *,
    filename: str,
    n: int,
    limits: ExportLimits,
    bom: bool = False,
) -> None:
    """The ``n``-th table of the document ``filename`` into ``out`` as ``fmt``; raises
    ``ExportTooLarge`` (before writing anything) past ``limits``. ``bom`` for CSV only."""
    grid = read_table(table)
    Meter(limits).charge(grid)
    label = table_label(filename, grid.page, n)
    if fmt is CSV:
        write_csv(grid, out, bom=bom)
    elif fmt is MARKDOWN:
        write_markdown(grid, out)
    elif fmt is HTML:
        write_html(grid, out, title=label)
    elif fmt is JSON:
        out.write(json.dumps(table, ensure_ascii=False, separators=(",", ":")).encode())
    elif fmt is XLSX:
        with tempfile.TemporaryDirectory(prefix="relay-export-") as tmpdir:
            workbook = Workbook(out, tmpdir=tmpdir, title=label)
            try:
                workbook.add_table(SheetNames().take(filename, label_tail(grid.page, n)), grid)
            except BaseException:
                workbook.discard()
                raise
            workbook.close()
    else:
        raise ValueError(f"not a table format: {fmt.name}")
