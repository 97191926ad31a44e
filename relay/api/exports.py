"""``GET /documents/{id}/tables/{n}`` and ``GET /batches/{name}/export``: tables as files
(docs/exports.md; the rendering is ``relay.exports``).

Both are reads through the status gate (``relay.api.fast_path.serve_read``): authenticated,
counted in the status window and answered with its ``RateLimit-*`` headers; another
account's document or batch is a 404, as for ``GET /documents/{id}``.

An export is built whole before its first byte is sent: into a spooled temporary file (in
memory up to ``SPOOL_BYTES``, on disk past it), in a thread, then streamed from that file
with its ``Content-Length``. So a bound passed midway (``RELAY_EXPORT_MAX_*``) is a clean
422 ``export_too_large``, never a truncated download. A batch is read a page of documents
at a time (``DOCUMENTS_PER_PAGE``), and their stored results a few at a time
(``RESULT_GROUP_BYTES`` per round trip): only those are in memory, whatever the batch's
size. At most ``RELAY_EXPORT_CONCURRENCY`` exports are built at once per process; past it
503 ``export_busy`` with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import IO

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from relay.api.errors import ApiError, Conflict, NotFound, Unprocessable
from relay.api.fast_path import NO_READS, serve_read
from relay.api.paths import batch_ref
from relay.api.state import AppState, state
from relay.config import Settings
from relay.exports.batch import ArchiveExport, BatchExport, Source, WorkbookExport
from relay.exports.formats import (
    BATCH_FORMATS,
    HTML,
    TABLE_FORMATS,
    XLSX,
    Format,
    table_filename,
    write_table,
)
from relay.exports.grid import ExportLimits, ExportTooLarge
from relay.exports.names import content_disposition
from relay.state.model import Document, Status
from relay.state.store import BatchRef, DocumentQuery, stored_tables

__all__ = ["export_batch", "get_table"]

SPOOL_BYTES = 1 << 20
CHUNK_BYTES = 64 * 1024
DOCUMENTS_PER_PAGE = 100
RESULT_GROUP_BYTES = 8 << 20
BUSY_RETRY_AFTER = 5
_TABLE_NUMBER = re.compile(r"[1-9][0-9]{0,8}")
_BOOLEANS = {"true": True, "false": False}
# A downloaded HTML table opened from the API's origin runs nothing and loads nothing.
_HTML_POLICY = "default-src 'none'; style-src 'unsafe-inline'; sandbox"


class ExportBusy(ApiError):
    status_code = 503
    error_type = "export_busy"


def limits_of(settings: Settings) -> ExportLimits:
    return ExportLimits(
        max_tables=settings.export_max_tables,
        max_cells=settings.export_max_cells,
        max_bytes=settings.export_max_bytes,
    )


def too_large(exc: ExportTooLarge) -> Unprocessable:
    return Unprocessable(exc.message, error_type="export_too_large")


def _format(request: Request, formats: dict[str, Format]) -> Format:
    """``?format=``: one of ``formats`` (the first when absent), else 422."""
    raw = request.query_params.get("format")
    if raw is None:
        return next(iter(formats.values()))
    found = formats.get(raw)
    if found is None:
        raise Unprocessable(f"format must be one of: {', '.join(formats)}")
    return found


def _bom(request: Request) -> bool:
    """``?bom=true|false`` (default false), else 422."""
    raw = request.query_params.get("bom")
    if raw is None:
        return False
    if raw not in _BOOLEANS:
        raise Unprocessable("bom must be true or false")
    return _BOOLEANS[raw]


@contextmanager
def _slot(st: AppState) -> Iterator[None]:
    """One of the process's export slots for the block, or ExportBusy."""
    if not st.exports.take():
        raise ExportBusy(
            f"{st.exports.size} exports are being built by this server; retry after "
            f"{BUSY_RETRY_AFTER} s",
            headers={"Retry-After": str(BUSY_RETRY_AFTER)},
        )
    try:
        yield
    finally:
        st.exports.refunds()


@contextmanager
def _spooled() -> Iterator[IO[bytes]]:
    """A file to write an export into, in memory up to SPOOL_BYTES: closed when the writing
    fails (an export past its bounds answers 422), left open for the download otherwise."""
    # Outlives the block on success: the download's stream closes it (_chunks).
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
    try:
        yield out
    except ExportTooLarge as exc:
        out.close()
        raise too_large(exc) from None
    except BaseException:
        out.close()
        raise


async def _chunks(out: IO[bytes]) -> AsyncIterator[bytes]:
    """The file's bytes from its start, read in a thread; the file is closed at the end,
    also when the client goes away before it."""
    try:
        while chunk := await asyncio.to_thread(out.read, CHUNK_BYTES):
            yield chunk
    finally:
        out.close()


def _download(out: IO[bytes], fmt: Format, filename: str, headers: dict[str, str]) -> Response:
    """The built file ``out`` as an attachment named ``filename``."""
    size = out.tell()
    out.seek(0)
    extra = {
        **headers,
        "Content-Length": str(size),
        "Content-Disposition": content_disposition(filename),
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private, no-store",
    }
    if fmt is HTML:
        extra["Content-Security-Policy"] = _HTML_POLICY
    return StreamingResponse(_chunks(out), media_type=fmt.media_type, headers=extra)


# -- one table -----------------------------------------------------------------------------


def _table_number(request: Request) -> int:
    raw: str = request.path_params["n"]
    if not _TABLE_NUMBER.fullmatch(raw):
        raise NotFound("no such table (n counts the document's tables from 1)")
    return int(raw)


def _not_succeeded(doc: Document) -> Conflict:
    why = f" ({doc.error_code})" if doc.status is Status.FAILED and doc.error_code else ""
    return Conflict(
        f"document {doc.id} is {doc.status.value}{why}: it has tables once it has succeeded",
        error_type="document_not_succeeded",
    )


async def _nth_table(st: AppState, doc: Document, n: int) -> dict[str, object]:
    """The document's stored ``n``-th table (parsed in a thread: a result may be large), or
    NotFound."""
    stored = await st.store.stored_result(doc.id)
    tables = await asyncio.to_thread(stored_tables, stored)
    count = len(tables) if isinstance(tables, list) else 0
    if n > count or not isinstance(tables[n - 1], dict):
        raise NotFound(f"no such table: the document has {count}")
    table: dict[str, object] = tables[n - 1]
    return table


async def get_table(request: Request) -> Response:
    """The document's ``n``-th table (1-based, as in its ``tables``) as a file."""
    st = state(request)

    async def respond(account: str, doc: Document | None, headers: dict[str, str]) -> Response:
        fmt = _format(request, TABLE_FORMATS)
        bom = _bom(request)
        if doc is None:
            raise NotFound("no such document")
        n = _table_number(request)
        if doc.status is not Status.SUCCEEDED:
            raise _not_succeeded(doc)
        with _slot(st):
            table = await _nth_table(st, doc, n)
            with _spooled() as out:
                await asyncio.to_thread(
                    write_table,
                    fmt,
                    table,
                    out,
                    filename=doc.filename,
                    n=n,
                    limits=limits_of(st.settings),
                    bom=bom,
                )
        page = table.get("page")
        name = table_filename(doc.filename, page if isinstance(page, int) else 1, n, fmt)
        return _download(out, fmt, name, headers)

    return await serve_read(request, DocumentQuery(request.path_params["id"]), respond)


# -- a batch -------------------------------------------------------------------------------


def _groups(docs: Sequence[tuple[Document, int]]) -> Iterator[list[tuple[Document, int]]]:
    """``docs`` in runs whose stored results together stay within RESULT_GROUP_BYTES (a
    larger one alone)."""
    group: list[tuple[Document, int]] = []
    total = 0
    for doc, size in docs:
        if group and total + size > RESULT_GROUP_BYTES:
            yield group
            group, total = [], 0
        group.append((doc, size))
        total += size
    if group:
        yield group


def _open(fmt: Format, out: IO[bytes], limits: ExportLimits, title: str, bom: bool) -> BatchExport:
    if fmt is XLSX:
        return WorkbookExport(out, limits, title=title)
    return ArchiveExport(out, limits, bom=bom)


def _add_all(export: BatchExport, entries: list[tuple[Source, bytes | None]]) -> None:
    """Each document with its stored result (parsed here, in the export's thread)."""
    for source, stored in entries:
        export.add(source, stored_tables(stored))


async def _build(st: AppState, ref: BatchRef, fmt: Format, bom: bool, out: IO[bytes]) -> bool:
    """The batch's export written into ``out``; False when there is no such batch."""
    batch, docs, next_start = await st.store.result_sizes(ref, start=0, limit=DOCUMENTS_PER_PAGE)
    if batch is None:
        return False
    limits = limits_of(st.settings)
    export = await asyncio.to_thread(_open, fmt, out, limits, ref.name, bom)
    try:
        while True:
            for group in _groups(docs):
                with_result = [doc.id for doc, size in group if size]
                stored = await st.store.stored_results(ref, with_result)
                found = dict(zip(with_result, stored, strict=True))
                entries = [
                    (
                        Source(doc.id, doc.filename, doc.status.value, doc.error_code),
                        found.get(doc.id),
                    )
                    for doc, _ in group
                ]
                await asyncio.to_thread(_add_all, export, entries)
            if next_start is None:
                break
            _, docs, next_start = await st.store.result_sizes(
                ref, start=next_start, limit=DOCUMENTS_PER_PAGE
            )
        await asyncio.to_thread(export.finish)
    finally:
        await asyncio.to_thread(export.close)
    return True


async def export_batch(request: Request) -> Response:
    """The batch's tables as one XLSX workbook or a ZIP of CSVs."""
    st = state(request)

    async def respond(account: str, _: None, headers: dict[str, str]) -> Response:
        fmt = _format(request, BATCH_FORMATS)
        bom = _bom(request)
        ref = await batch_ref(request, account)
        with _slot(st), _spooled() as out:
            found = await _build(st, ref, fmt, bom, out)
        if not found:
            out.close()
            raise NotFound("no such batch")
        return _download(out, fmt, f"{ref.name}.{fmt.extension}", headers)

    return await serve_read(request, NO_READS, respond)
