"""A batch's tables as one XLSX workbook or one ZIP of CSV files, built document by
document into a file.

The caller reads the batch's documents a page at a time and hands each to :meth:`add` with
its stored ``tables`` (None when it has none: not succeeded, or stored before tables
existed), then calls :meth:`finish`. Only the document at hand is in memory: the workbook's
rows go to XlsxWriter's temporary files, the archive's CSVs straight into the ZIP. Every
table is charged to the export's :class:`relay.exports.grid.Meter` before it is written:
past a bound, :meth:`add` raises :class:`relay.exports.grid.ExportTooLarge` and the file
is abandoned (nothing partial is ever sent).

**Workbook**: a first worksheet ``Index``, then one worksheet per table in the batch's
document order (upload order), then page order within a document. **Archive**: one CSV per
table (``relay.exports.text``), named as ``relay.exports.names`` says, and ``index.csv``.
The index has a row per table, and a row per document that gave none (its status says why:
``queued``, ``failed: <code>``, ``succeeded: no table`` ...), with these columns:

``sheet`` (workbook; a link to it) or ``file`` (archive), ``document_id``, ``filename``,
``page``, ``table`` (the ``n`` of ``GET /documents/{id}/tables/{n}``), ``rows``,
``columns``, ``status``.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol

from relay.exports.grid import ExportLimits, Meter, read_table
from relay.exports.names import FileNames, SheetNames, file_stem, label_tail
from relay.exports.text import BOM, write_csv, write_rows
from relay.exports.xlsx import Sheet, Workbook

__all__ = ["ArchiveExport", "BatchExport", "Source", "WorkbookExport"]

INDEX_SHEET = "Index"
INDEX_FILE = "index.csv"
INDEX_COLUMNS = ["document_id", "filename", "page", "table", "rows", "columns", "status"]


@dataclass(frozen=True)
class Source:
    """The document a table comes from: its id, filename, status and error code."""

    id: str
    filename: str
    status: str
    error_code: str = ""

    def note(self, tables: Sequence[object] | None) -> str:
        """The index's status of a document that gave no table."""
        if self.status == "failed" and self.error_code:
            return f"failed: {self.error_code}"
        if self.status == "succeeded":
            return "succeeded: no table" if tables is not None else "succeeded: no tables stored"
        return self.status


def _tables(tables: Sequence[object] | None) -> list[Mapping[str, object]]:
    return [t for t in tables or () if isinstance(t, Mapping)]


class BatchExport(Protocol):
    """What :mod:`relay.api.exports` drives: documents in, then :meth:`finish` (the file is
    complete) or not; :meth:`close` always (it frees the temporary files)."""

    def add(self, source: Source, tables: Sequence[object] | None) -> None: ...
    def finish(self) -> None: ...
    def close(self) -> None: ...


class WorkbookExport:
    """The batch as one XLSX workbook written into ``out`` (module docstring)."""

    def __init__(self, out: IO[bytes], limits: ExportLimits, *, title: str) -> None:
        self.meter = Meter(limits)
        self.names = SheetNames()
        self._finished = False
        self._tmp = tempfile.TemporaryDirectory(prefix="relay-export-")
        try:
            self.workbook = Workbook(out, tmpdir=self._tmp.name, title=title)
            self.index: Sheet = self.workbook.add_sheet(INDEX_SHEET)
            self.index.append(["sheet", *INDEX_COLUMNS], bold=True)
        except BaseException:
            self._tmp.cleanup()
            raise

    def add(self, source: Source, tables: Sequence[object] | None) -> None:
        found = _tables(tables)
        if not found:
            note = source.note(tables)
            self.index.append(["", source.id, source.filename, None, None, None, None, note])
            return
        for n, table in enumerate(found, start=1):
            grid = read_table(table)
            self.meter.charge(grid)
            name = self.names.take(source.filename, label_tail(grid.page, n))
            self.workbook.add_table(name, grid)
            row = [source.id, source.filename, grid.page, n, grid.height, grid.width]
            self.index.append([name, *row, source.status], link=name)

    def finish(self) -> None:
        self.index.finish()
        self.workbook.close()
        self._finished = True

    def close(self) -> None:
        if not self._finished:
            self.workbook.discard()
        self._tmp.cleanup()


class ArchiveExport:
    """The batch as one ZIP of CSV files written into ``out`` (module docstring)."""

    def __init__(self, out: IO[bytes], limits: ExportLimits, *, bom: bool = False) -> None:
        self.meter = Meter(limits)
        self.bom = bom
        self.names = FileNames(reserved=(INDEX_FILE,))
        # A CSV past 4 GiB needs ZIP64 from its start; only possible with large bounds.
        self.zip64 = 2 * limits.max_bytes + 3 * limits.max_cells > (1 << 32) - (1 << 20)
        self.archive = zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED)
        # The index waits in a file of its own (its rows come as the tables do, and a ZIP
        # is written one member at a time), copied in last.
        self.index = tempfile.SpooledTemporaryFile(max_size=1 << 20)  # noqa: SIM115
        self._index_row(["file", *INDEX_COLUMNS])

    def _index_row(self, values: list[Any]) -> None:
        write_rows([[None if v is None else str(v) for v in values]], self.index)

    def add(self, source: Source, tables: Sequence[object] | None) -> None:
        found = _tables(tables)
        if not found:
            note = source.note(tables)
            self._index_row(["", source.id, source.filename, None, None, None, None, note])
            return
        stem = file_stem(source.filename)
        for n, table in enumerate(found, start=1):
            grid = read_table(table)
            self.meter.charge(grid)
            name = self.names.take(f"{stem}_p{grid.page}_t{n}", "csv")
            with self.archive.open(name, "w", force_zip64=self.zip64) as member:
                write_csv(grid, member, bom=self.bom)
            row = [source.id, source.filename, grid.page, n, grid.height, grid.width]
            self._index_row([name, *row, source.status])

    def finish(self) -> None:
        self.index.seek(0)
        with self.archive.open(INDEX_FILE, "w") as member:
            if self.bom:
                member.write(BOM)
            shutil.copyfileobj(self.index, member)
        self.archive.close()

    def close(self) -> None:
        self.index.close()
        self.archive.close()  # a no-op once finished
