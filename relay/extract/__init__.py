"""Turning an uploaded document into rows (``line_items``) and ``tables``: the default
extractor and the plug-in contract.

The extractor is pluggable: ``RELAY_EXTRACTOR=package.module:callable`` names a callable
``callable(content: bytes, *, filename: str, content_type: str, fields: list[str]) ->
list[dict]`` (or ``{"line_items": [...], "tables": [...]}``: ``relay.extract.loader``).
Raising ``ExtractionError(code, message)`` fails the document with that code; any other
exception fails it with code ``extraction_error`` (``loader.run_extractor``).

``extract`` (``relay.extract:extract``) is the default. It reads real tables: CSV and TSV
(``csv_tsv``), JSON (``json_``), PDF tables (``pdf``; scanned pages by OCR), tables in PNG,
JPEG, TIFF and WebP images (``image``, by OCR: ``ocr``), XLSX workbooks and DOCX documents
(``office``, once ``archive`` has passed them) and HTML pages (``html_``); anything else is
``unsupported_format``. When ``fields`` is non-empty each row keeps exactly those keys, in
that order, missing ones ``None``. ``extract`` returns the rows (the v1 contract, for
in-process callers and plug-ins that wrap it); ``extract_document``, what the worker runs
for the default, returns the rows and the tables (``relay.extract.tables.Extraction``):
for PDFs and images every table found, kept apart (``relay.extract.tables`` says which of
them make ``line_items``); for XLSX, DOCX and HTML every table, the first with rows making
``line_items`` (``tables.first_table_records``); for CSV, TSV and JSON one table, the
``line_items`` as a grid (``tables.table_of_records``: header row of the keys, values as
strings).

A PDF or TIFF may be read in part: ``extract_document(..., pages=PageRanges)`` reads those
pages only (``relay.extract.pages``; page numbers stay the document's). A long scan is read
in slices across workers (docs/architecture.md, "Long documents"): asked to
(``relay.extract.bounds.ExtractLimits.split_over``), the default extractor stops before
reading with ``SplitPages``; each slice's tables are read by ``read_pages`` and the slices'
tables, in page order, become the document's ``line_items`` and ``tables`` by
``assemble_pages``, exactly as if the document had been read whole (a table continued over a
page break is joined across slices too). The pages split are those the document is to read,
its ``pages`` selection within its page count, so a slice holds only selected pages.

The format is decided, first match wins, by:

1. content: the magic numbers of PDF, PNG, JPEG, TIFF and WebP, a ZIP archive (an XLSX or
   a DOCX: its parts say which) and an HTML page's leading markup (``sniff``) decide
   whatever the document was declared as (the magic cannot be wrong, a declared type can);
   the legacy Office container (``.xls``, ``.doc``, a password-protected file) is
   ``unsupported_format`` with a message saying so;
2. the declared content type (``text/csv``, ``text/tab-separated-values``,
   ``application/json`` and ``+json`` types, ``application/pdf``, ``image/png``,
   ``image/jpeg``, ``image/tiff``, ``image/webp``, the XLSX and DOCX types, ``text/html``
   and ``application/xhtml+xml``, and common aliases);
3. the filename extension (``.csv .tsv .tab .json .pdf .png .jpg .jpeg .tif .tiff .webp
   .xlsx .xlsm .docx .html .htm .xhtml``), which also rescues CSVs that Windows browsers
   upload as ``application/vnd.ms-excel``;
4. when the declared type is generic (none, ``application/octet-stream``, ``text/plain``):
   sniffing the text, JSON if it parses, else CSV/TSV if ``csv.Sniffer`` finds a credible
   delimiter. A specific type that is none of ours (``image/gif``, ``application/msword``)
   with no known extension is ``unsupported_format`` without sniffing.

A document declared as an image (step 2 or 3) whose bytes are no image Pillow can read
fails with ``invalid_image``; one declared as XLSX or DOCX that is no readable ZIP archive
with ``invalid_xlsx`` or ``invalid_docx``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import NamedTuple

from relay.extract.bounds import DEFAULT_MAX_PAGES, current
from relay.extract.csv_tsv import choose_dialect, decode_text, extract_delimited, sniff_dialect
from relay.extract.errors import ExtractionError, SplitPages
from relay.extract.html_ import read_html
from relay.extract.image import DEFAULT_MAX_IMAGE_PIXELS, extract_image
from relay.extract.json_ import extract_json, parse_json, rows_from_json
from relay.extract.loader import Extractor, load_extractor, run_extractor
from relay.extract.office import OFFICE, WHERE, read_office
from relay.extract.pages import PageRanges
from relay.extract.pdf import read_pdf, without_leading_single_rows
from relay.extract.result import Table
from relay.extract.sniff import IMAGE_FORMATS, sniff_format
from relay.extract.tables import (
    Extraction,
    first_table_records,
    split_tables,
    table_of_records,
)

__all__ = [
    "DEFAULT_MAX_IMAGE_PIXELS",
    "DEFAULT_MAX_PAGES",
    "ExtractionError",
    "Extractor",
    "PageRanges",
    "PagesRead",
    "SplitPages",
    "assemble_pages",
    "detect_format",
    "extract",
    "extract_document",
    "load_extractor",
    "read_pages",
    "run_extractor",
]

PAGED = ("pdf", "image")  # the formats read page by page (detect_format's kinds)

_BY_CONTENT_TYPE = {
    "text/csv": "csv",
    "application/csv": "csv",
    "text/x-csv": "csv",
    "application/x-csv": "csv",
    "text/comma-separated-values": "csv",
    "text/tab-separated-values": "tsv",
    "text/tsv": "tsv",
    "application/json": "json",
    "text/json": "json",
    "application/pdf": "pdf",
    "application/x-pdf": "pdf",
    "image/png": "image",
    "image/jpeg": "image",
    "image/jpg": "image",
    "image/pjpeg": "image",
    "image/tiff": "image",
    "image/tiff-fx": "image",
    "image/webp": "image",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "application/vnd.ms-excel.sheet.macroenabled.12": "xlsx",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "text/html": "html",
    "application/xhtml+xml": "html",
}
_BY_EXTENSION = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".json": "json",
    ".pdf": "pdf",
    ".png": "image",
    ".jpg": "image",
    ".jpeg": "image",
    ".tif": "image",
    ".tiff": "image",
    ".webp": "image",
    ".xlsx": "xlsx",
    ".xlsm": "xlsx",
    ".docx": "docx",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
}
# Types that say "some bytes" rather than what they are: the content has to tell.
_GENERIC_TYPES = frozenset(
    {"", "application/octet-stream", "binary/octet-stream", "application/unknown", "text/plain"}
)
_UNSUPPORTED = (
    "unsupported format: expected CSV, TSV, JSON, PDF, XLSX, DOCX, HTML or a PNG, JPEG, TIFF "
    "or WebP image"
)
_LEGACY_OFFICE = (
    "a legacy Office file (.xls, .doc) or a password-protected one: save it as XLSX or DOCX "
    "without a password"
)


def _media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def detect_format(content: bytes, *, filename: str, content_type: str) -> str | None:
    """``"pdf"``, ``"image"``, ``"json"``, ``"csv"``, ``"tsv"``, ``"html"``, ``"xlsx"``,
    ``"docx"`` or ``"zip"`` (a ZIP archive declared as neither XLSX nor DOCX: its parts
    will tell) from magic, type or extension (module docstring, steps 1-3); ``None`` when
    only sniffing the text can tell.

    Raises ``unsupported_format`` for a specific type that is none of ours.
    """
    magic = sniff_format(content)
    media_type = _media_type(content_type)
    declared = _BY_CONTENT_TYPE.get(media_type)
    if declared is None and media_type.endswith("+json"):
        declared = "json"
    if declared is None:
        declared = _BY_EXTENSION.get(PurePath(filename).suffix.lower())
    if magic == "zip":  # an XLSX or a DOCX; what it was declared as names a damaged one
        return declared if declared in OFFICE else "zip"
    if magic == "ole":
        raise ExtractionError("unsupported_format", _LEGACY_OFFICE)
    if magic is not None:
        return "image" if magic in IMAGE_FORMATS else magic
    if declared is None and media_type not in _GENERIC_TYPES:
        raise ExtractionError("unsupported_format", f"{_UNSUPPORTED}, got {media_type}")
    return declared


def _sniff(text: str) -> list[dict[str, object]]:
    """Step 4 of the module docstring: rows from text whose format nobody declared."""
    json_error: ExtractionError | None = None
    if text.lstrip()[:1] in ("[", "{"):
        try:
            value = parse_json(text)
        except ExtractionError as exc:
            json_error = exc  # a CSV may start with "[" too: try that first
        else:
            return rows_from_json(value)
    dialect = sniff_dialect(text)
    if dialect is not None:
        return extract_delimited(text, dialect)
    if json_error is not None:
        raise json_error  # looked like JSON and is not a table either: say why it is not JSON
    raise ExtractionError("unsupported_format", f"{_UNSUPPORTED}, got text that is none of them")


class PagesRead(NamedTuple):
    """The tables of some pages of a paged document, as read: ``kind`` is ``"pdf"`` or
    ``"image"`` (what ``assemble_pages`` needs to know of the document)."""

    kind: str
    tables: list[Table]


def read_pages(
    content: bytes,
    *,
    filename: str,
    content_type: str,
    pages: PageRanges | None = None,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    max_pages: int = DEFAULT_MAX_PAGES,
) -> PagesRead:
    """The tables of a PDF's or image's pages (all, or ``pages``), in reading order, every
    table kept and none made ``line_items`` yet: a slice of a document, for
    :func:`assemble_pages` to join with the others. A page without a table gives none (no
    ``no_table_found`` here: that is the whole document's to say). Any other format is
    ``unsupported_format``: it has no pages."""
    if not content or content.isspace():
        raise ExtractionError("empty_document", "the document is empty")
    kind = detect_format(content, filename=filename, content_type=content_type)
    bounds = {"max_pixels": max_image_pixels, "max_pages": max_pages}
    if kind == "pdf":
        found = read_pdf(content, pages=pages, **bounds)
    elif kind == "image":
        found = extract_image(content, pages=pages, **bounds)
    else:
        raise ExtractionError("unsupported_format", "only a PDF or an image is read by pages")
    return PagesRead(kind, found)


def assemble_pages(kind: str, tables: Sequence[Table], fields: Sequence[str]) -> Extraction:
    """A paged document's ``line_items`` and ``tables`` from the tables of its pages in
    page order (``read_pages``'s, of one read or of every slice in turn): the rules of
    ``relay.extract.tables`` over them all, so a table continued on the next page is joined
    whichever slices the two pages were read in; ``fields`` applied as for any document."""
    found = list(tables)
    if kind == "pdf":
        found = without_leading_single_rows(found)
    rows, kept = split_tables(found, "the PDF" if kind == "pdf" else "the image")
    if fields:
        rows = [{field: row.get(field) for field in fields} for row in rows]
    return Extraction(rows, kept)


def extract_document(
    content: bytes,
    *,
    filename: str,
    content_type: str,
    fields: list[str],
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    max_pages: int = DEFAULT_MAX_PAGES,
    pages: PageRanges | None = None,
) -> Extraction:
    """The default extractor: the rows and the tables of ``content`` (module docstring).

    ``max_image_pixels`` bounds an image, or a scanned PDF page rendered for OCR
    (``RELAY_MAX_IMAGE_PIXELS``), ``max_pages`` a PDF or TIFF (``RELAY_MAX_PAGES``); the
    worker passes both in. ``pages``: read only these pages of a PDF or an image (a TIFF's
    pages; any other image is one page), keeping their numbers; ``None`` takes the ones the
    sandbox was given (``relay.extract.bounds.current``), every page outside it. It does not
    apply to CSV, TSV, JSON, XLSX, DOCX or HTML (no pages: read whole). Raises
    ``ExtractionError`` with one of the codes listed in ``relay.extract.errors``.
    """
    if not content or content.isspace():
        raise ExtractionError("empty_document", "the document is empty")
    selected = pages if pages is not None else current().pages
    kind = detect_format(content, filename=filename, content_type=content_type)
    if kind in PAGED:
        read = read_pages(
            content,
            filename=filename,
            content_type=content_type,
            pages=selected,
            max_image_pixels=max_image_pixels,
            max_pages=max_pages,
        )
        return assemble_pages(read.kind, read.tables, fields)
    if kind in OFFICE or kind == "html":
        if kind == "html":
            found, where = read_html(content, content_type), "the HTML page"
        else:
            office, found = read_office(content, kind)
            where = WHERE[office]
        rows = first_table_records(found, where)
        if fields:
            rows = [{field: row.get(field) for field in fields} for row in rows]
        return Extraction(rows, found)
    text = decode_text(content)
    if kind == "json":
        rows = extract_json(text)
    elif kind is None:
        rows = _sniff(text)
    else:
        rows = extract_delimited(text, choose_dialect(text, prefer_tab=kind == "tsv"))
    if fields:
        rows = [{field: row.get(field) for field in fields} for row in rows]
    return Extraction(rows, [table_of_records(rows)])


def extract(
    content: bytes,
    *,
    filename: str,
    content_type: str,
    fields: list[str],
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    max_pages: int = DEFAULT_MAX_PAGES,
    pages: PageRanges | None = None,
) -> list[dict[str, object]]:
    """The default extractor's rows (``line_items``) of ``content``: ``extract_document``
    without the tables (module docstring)."""
    return extract_document(
        content,
        filename=filename,
        content_type=content_type,
        fields=fields,
        max_image_pixels=max_image_pixels,
        max_pages=max_pages,
        pages=pages,
    ).line_items
