"""Per-document bounds the extraction honours, and the one way a result leaves it: as JSON.

``relay.runtime.sandbox`` runs every document under :class:`ExtractLimits` (built from the
``RELAY_*`` settings) with :func:`applied`. The default extractor reads them while it works,
so a document that would grow past a bound fails early instead of first filling memory:

* ``max_result_bytes``: the result as compact JSON (what is stored: ``line_items`` and
  ``tables``); the readers charge each row to a :class:`RowBudget` as they build it
  (``result_too_large``);
* ``max_depth``: the deepest nesting of a JSON document's values, or of an HTML page's
  tables (``too_deeply_nested``);
* ``max_cells``: the table cells (grid positions, empty ones included) an XLSX, DOCX or HTML
  document may hold, counted as they are read (:class:`CellBudget`, ``too_many_cells``);
* ``max_unzipped_bytes``, ``max_zip_entries``: what the ZIP directory of an XLSX or DOCX may
  declare, checked before anything is unpacked (``relay.extract.archive``,
  ``archive_too_large``);
* ``on_pages``: told how many pages a paged document (PDF, TIFF) has to read, once they are
  counted and before any is read (:func:`declare_pages`): the sandbox grows the document's
  deadline by ``RELAY_EXTRACT_PAGE_SECONDS`` a page;
* ``pages``: the pages the process call asked for (``relay.extract.pages.PageRanges``,
  ``None``: every page): the default extractor reads only those of a PDF or TIFF; a plug-in
  may read them here too (``current().pages``);
* ``split_over``: a paged document with more pages than this to read by OCR (of those
  ``pages`` selects) is not read here: :func:`plan_pages` raises ``SplitPages`` with the
  pages, before any is read, and the worker reads them in slices (``RELAY_SLICE_PAGES``;
  docs/architecture.md, "Long documents").

Any extractor's result, plug-ins' included, is then serialised by :func:`encode_result`,
which checks the size again, exactly, row by row and table by table, and never builds more
than the bound.
Outside :func:`applied` (a plain in-process call) nothing is bounded but the cells and the
archives, which keep their defaults: a file that unpacks to gigabytes must not reach a reader
in any process.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from relay.extract.errors import ExtractionError, SplitPages
from relay.extract.pages import PageRanges
from relay.extract.result import Table

# A lone surrogate (``"\\ud800"`` from JSON) cannot be encoded as UTF-8: one in a stored row
# would fail every response that carries it. The same rule as ``relay.text``, kept here so that
# relay.extract imports nothing of relay outside itself.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub_surrogates(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD; other characters untouched."""
    if text.isascii() or _LONE_SURROGATE.search(text) is None:
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


__all__ = [
    "DEFAULT_MAX_CELLS",
    "DEFAULT_MAX_PAGES",
    "DEFAULT_MAX_UNZIPPED_BYTES",
    "DEFAULT_MAX_ZIP_ENTRIES",
    "CellBudget",
    "ExtractLimits",
    "RowBudget",
    "applied",
    "check_depth",
    "current",
    "declare_pages",
    "encode_result",
    "encode_rows",
    "plan_pages",
    "too_many_pages",
]

# RELAY_MAX_PAGES's default (docs/decisions.md): a long report of tables fits; the time a
# document may take grows with its pages (RELAY_EXTRACT_PAGE_SECONDS), so this bound also
# bounds the longest extraction.
DEFAULT_MAX_PAGES = 500
# RELAY_EXTRACT_MAX_CELLS's default: a sheet of 1,000,000 cells reads in a few seconds and
# holds ~100 MB as strings; an export holds at most 2,000,000 (RELAY_EXPORT_MAX_CELLS).
DEFAULT_MAX_CELLS = 1_000_000
# RELAY_EXTRACT_MAX_UNZIPPED_BYTES's default: an XLSX or DOCX unpacks to 5-20 times its size,
# so the largest upload (RELAY_MAX_UPLOAD_BYTES, 20 MiB) of real tables stays below it; a
# workbook of RELAY_EXTRACT_MAX_CELLS cells is ~50 MB of XML. A ZIP bomb declares gigabytes.
DEFAULT_MAX_UNZIPPED_BYTES = 256 * 1024 * 1024
# RELAY_EXTRACT_MAX_ZIP_ENTRIES's default: a workbook or Word document has tens to hundreds
# of parts (a sheet, a picture, a style each).
DEFAULT_MAX_ZIP_ENTRIES = 10_000


@dataclass(frozen=True)
class ExtractLimits:
    """The bounds of one document's extraction; ``None`` means unbounded."""

    max_result_bytes: int | None = None
    max_depth: int | None = None
    fields: tuple[str, ...] = ()  # the batch's fields: only these keys count towards the size
    on_pages: Callable[[int], None] | None = None  # told a paged document's page count
    pages: PageRanges | None = None  # the pages asked for (None: every page)
    split_over: int | None = None  # more pages than this to OCR: SplitPages (plan_pages)
    max_cells: int = DEFAULT_MAX_CELLS  # table cells of an XLSX, DOCX or HTML document
    max_unzipped_bytes: int = DEFAULT_MAX_UNZIPPED_BYTES  # an XLSX's or DOCX's parts, unpacked
    max_zip_entries: int = DEFAULT_MAX_ZIP_ENTRIES  # an XLSX's or DOCX's parts


_UNBOUNDED = ExtractLimits()
_current: ContextVar[ExtractLimits | None] = ContextVar("relay_extract_limits", default=None)


def current() -> ExtractLimits:
    return _current.get() or _UNBOUNDED


@contextmanager
def applied(limits: ExtractLimits) -> Iterator[None]:
    """Run the enclosed extraction under ``limits``."""
    token = _current.set(limits)
    try:
        yield
    finally:
        _current.reset(token)


def declare_pages(pages: int) -> None:
    """Say that the document being extracted has ``pages`` pages (counted, within
    ``RELAY_MAX_PAGES``, none read yet). The default extractor calls it for PDFs and TIFFs;
    a plug-in may too. Outside the sandbox it does nothing."""
    listener = current().on_pages
    if listener is not None:
        listener(pages)


def plan_pages(kind: str, pages: PageRanges, ocr: Callable[[], bool]) -> None:
    """What a reader of pages calls once it knows which pages it will read, none read yet.
    ``ocr`` says whether they are read by OCR (a TIFF's are; a PDF's when it is a scan),
    asked only when it matters. More of them than ``split_over`` (when set) and read by OCR:
    ``SplitPages(kind, pages)``, so the caller reads them in slices; otherwise the count is
    declared (:func:`declare_pages`). Pages with a text layer are never split: one takes
    milliseconds, less than a slice costs to start (the document opened again)."""
    limit = current().split_over
    if limit is not None and len(pages) > limit and ocr():
        raise SplitPages(kind, pages)
    declare_pages(len(pages))


def too_large(limit: int) -> ExtractionError:
    return ExtractionError(
        "result_too_large",
        f"the extracted result exceeds {limit} bytes of JSON (line_items and tables)",
    )


def too_many_pages(max_pages: int) -> ExtractionError:
    return ExtractionError(
        "too_many_pages", f"the document has more than the {max_pages:,} pages allowed"
    )


class RowBudget:
    """Charges rows as a reader builds them; raises ``result_too_large`` past the bound.

    The charge is a lower bound of the row's compact JSON size (quotes, colon and comma per
    key; escapes and multi-byte characters only add), so a document is never refused early
    by mistake; :func:`encode_rows` has the exact word.
    """

    def __init__(self, limits: ExtractLimits | None = None) -> None:
        limits = limits or current()
        self._limit = limits.max_result_bytes
        self._fields = limits.fields
        self.spent = 2  # the list's brackets

    def charge(self, row: Mapping[str, object]) -> None:
        if self._limit is None:
            return
        size = 1  # braces and the comma between rows, less the last pair's comma
        pairs = ((f, row.get(f)) for f in self._fields) if self._fields else row.items()
        for key, value in pairs:
            if isinstance(value, str):
                size += len(key) + 6 + len(value)
            else:  # null is 4 characters, any other value at least 1
                size += len(key) + 4 + (4 if value is None else 1)
        self.spent += size
        if self.spent > self._limit:
            raise too_large(self._limit)


class CellBudget:
    """Charges the cells of a document's tables as a reader builds them (grid positions,
    empty and covered ones included: what the grid costs); raises ``too_many_cells`` past
    ``max_cells``. A reader charges a row before it builds it, so a row that claims a
    million columns costs nothing before it is refused."""

    def __init__(self, limits: ExtractLimits | None = None) -> None:
        self._limit = (limits or current()).max_cells
        self.spent = 0

    def charge(self, cells: int) -> None:
        self.spent += cells
        if self.spent > self._limit:
            raise ExtractionError(
                "too_many_cells",
                f"the document's tables have more than the {self._limit:,} cells allowed",
            )


def check_depth(value: object, max_depth: int | None = None) -> None:
    """Raise ``too_deeply_nested`` when lists/objects in ``value`` nest deeper than the bound
    (``max_depth`` or the current limits'). Iterative: depth costs no stack here."""
    limit = max_depth if max_depth is not None else current().max_depth
    if limit is None:
        return
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Sequence[object] | None = None
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        if children is None:
            continue
        if depth > limit:
            raise ExtractionError(
                "too_deeply_nested", f"the JSON document nests deeper than {limit} levels"
            )
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def _encode_items(
    items: Sequence[object], total: int, max_bytes: int | None, what: str
) -> tuple[list[bytes], int]:
    """Each of ``items`` as compact JSON, the running ``total`` of bytes checked against
    ``max_bytes`` after each (``result_too_large``)."""
    parts: list[bytes] = []
    for index, item in enumerate(items):
        try:
            text = json.dumps(item, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError) as exc:
            raise ExtractionError(
                "extraction_error",
                f"extractor returned {what} that are not JSON-serialisable (item {index}): {exc}",
            ) from None
        data = scrub_surrogates(text).encode()
        total += len(data) + 1
        if max_bytes is not None and total > max_bytes:
            raise too_large(max_bytes)
        parts.append(data)
    return parts, total


def encode_rows(rows: Sequence[Mapping[str, object]], max_bytes: int | None) -> bytes:
    """``rows`` as compact UTF-8 JSON, lone surrogates replaced by U+FFFD.

    Serialises one row at a time and stops as soon as the total passes ``max_bytes``
    (``result_too_large``), so an oversized result is never built whole. Values JSON cannot
    carry (NaN, sets, objects...) are ``extraction_error``.

    Lone surrogates are replaced rather than escaped: stored escaped (``\\ud800``) they would
    decode back to a string that no response can encode; replacing them here, where a
    document's text enters relay, leaves every valid character as it was.
    """
    parts, _ = _encode_items(rows, 1, max_bytes, "rows")
    return b"[" + b",".join(parts) + b"]"


_RESULT_HEAD, _RESULT_MIDDLE, _RESULT_TAIL = b'{"line_items":[', b'],"tables":[', b"]}"


def encode_result(
    rows: Sequence[Mapping[str, object]], tables: Sequence[Table], max_bytes: int | None
) -> bytes:
    """A document's result as stored, ``{"line_items": [...], "tables": [...]}`` (each table
    as ``Table.stored_json``), encoded as :func:`encode_rows` does, the bound counting both."""
    total = len(_RESULT_HEAD) + len(_RESULT_MIDDLE) + len(_RESULT_TAIL) - 2
    row_parts, total = _encode_items(rows, total, max_bytes, "rows")
    stored = [t.stored_json() for t in tables]
    table_parts, _ = _encode_items(stored, total, max_bytes, "tables")
    return b"".join(
        [
            _RESULT_HEAD,
            b",".join(row_parts),
            _RESULT_MIDDLE,
            b",".join(table_parts),
            _RESULT_TAIL,
        ]
    )
