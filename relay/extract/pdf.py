"""PDF tables: pages with a text layer read by relay's table finder, scanned pages by OCR.

Contract:

* The PDF must open with pdfplumber (pdfminer): bytes it cannot open or read ->
  ``invalid_pdf``. When PDFium cannot open it, or counts its pages differently, every page
  is read through pdfminer.
* A PDF of more than ``max_pages`` pages fails with ``too_many_pages`` before any page is
  read: the page tree is walked (page dictionaries only, no content) up to one page past
  the bound, so a PDF claiming a wrong ``/Count`` is counted right, and 5,000 pages cost
  milliseconds. The bound is on the document, whatever ``pages`` asks for.
* With ``pages`` (``relay.extract.pages.PageRanges``: the process call's selection, or one
  slice of a long scan) only the pages it names are read, the others skipped unread (past
  the end: none of them is, ``pages_out_of_range``); a table keeps its page's own number.
  The pages to read are then planned (``relay.extract.bounds.plan_pages``): the sandbox
  gives the document ``RELAY_EXTRACT_PAGE_SECONDS`` more time a page, and a scan (its first
  page to read has no text layer and draws something) of more of them than the caller's
  ``split_over`` is not read here but split into slices by the worker (``SplitPages``).
* A page with a text layer is read as characters and rules (``relay.extract.pdf_layout``)
  and its tables found by ``relay.extract.pdf_tables``: ruled, partly ruled and unruled
  tables, each table of a page a ``Table`` of its own. PDFium reads the page (about ten
  times faster than pdfminer), unless the page's content streams inflate past
  ``PDFIUM_MAX_CONTENT`` bytes: such a page (a huge drawing, or a decompression bomb) is
  read through pdfminer, where running out of memory is a ``MemoryError`` relay can
  report, not an abort of the whole process.
* A page with no text layer (no characters: a scan, a photo saved as PDF) is rendered to
  an image at ``SCAN_DPI`` and read by OCR (``relay.extract.ocr``), like an uploaded image.
  The resolution is lowered when the page would exceed ``max_pixels`` (a poster-sized page
  is not a reason to fail, nor to allocate gigabytes).
* The tables are returned as ``relay.extract.result.Table`` in reading order (page order,
  then top to bottom); ``relay.extract.tables`` makes them ``line_items`` and ``tables``.
  A blank cell is ``""``, the cells a spanning cell covers are ``None``; strings are
  stripped. Each table has its cells and boxes (``relay.extract.result``): measured on the
  page as displayed (the CropBox, ``/Rotate`` applied), from the text layer's rules and
  text, or for a scanned page from the rendered image (``relay.extract.ocr``). One-row
  tables before the first table of two rows or more are dropped (a ruled box round a
  heading is no table).
* Errors: no table anywhere -> ``no_table_found``; a header with no rows under it ->
  ``empty_document``. Running out of memory (a decompression bomb under the sandbox's
  limit) is re-raised as ``MemoryError``, never disguised as ``invalid_pdf``.
"""

from __future__ import annotations

import io
import itertools
import math
import zlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pdfplumber
from pdfminer.pdfpage import PDFPage

from relay.extract.bounds import DEFAULT_MAX_PAGES, plan_pages, too_many_pages
from relay.extract.errors import ExtractionError, shorten
from relay.extract.pages import PageRanges
from relay.extract.pdf_layout import PageLayout, read_pdfium, read_plumber
from relay.extract.pdf_tables import page_tables
from relay.extract.result import Table
from relay.extract.tables import clean, clean_table

__all__ = [
    "PDFIUM_MAX_CONTENT",
    "SCAN_DPI",
    "extract_pdf",
    "read_pdf",
    "without_leading_single_rows",
]

# A page whose content streams (its own and its forms') inflate past this many bytes is
# read through pdfminer rather than PDFium. A real page's content is 10-500 KB; PDFium
# holds the inflated stream and its parsed objects (tens of bytes each) at once, and when
# an allocation fails under the sandbox's memory limit it aborts the process, where
# pdfminer raises a MemoryError relay reports as ``extraction_memory``.
PDFIUM_MAX_CONTENT = 8 << 20
_INFLATE_CHUNK = 1 << 20
_FORM_DEPTH = 4

# Tesseract is trained on and tuned for text at about 300 dpi; 200 dpi keeps body text of a
# printed invoice (8-10 pt) at 22-28 px per line, which it reads as well, and renders and
# reads a page in about half the time and memory of 300 dpi.
SCAN_DPI = 200
_POINTS_PER_INCH = 72


def _reason(exc: Exception) -> str:
    """pdfminer's exceptions are often bare (``PSEOF()``); the type name is then the reason."""
    text = str(exc).strip()
    return shorten(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, 160)


def _scan_dpi(page: Any, max_pixels: int) -> float:
    """``SCAN_DPI``, or less when the page rendered at it would pass ``max_pixels``."""
    area_in2 = float(page.width) * float(page.height) / _POINTS_PER_INCH**2
    if area_in2 <= 0:
        return SCAN_DPI
    return min(float(SCAN_DPI), math.sqrt(max_pixels / area_in2))


def _ocr_page(page: Any, max_pixels: int, number: int) -> list[Table]:
    """The tables of a page without a text layer, rendered and read by OCR."""
    if not any(page.objects.values()):  # nothing drawn at all: blank, nothing to render
        return []
    from relay.extract.ocr import read_tables  # imports OpenCV: only when a scan arrives

    image = page.to_image(resolution=_scan_dpi(page, max_pixels)).original
    return read_tables(image, number)


def _out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was caused by, a MemoryError (pdfplumber wraps pdfminer's
    errors, so a decompression bomb stopped by the memory limit arrives as a
    ``PdfminerException``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, MemoryError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _raise_for_memory(exc: Exception) -> None:
    if _out_of_memory(exc):
        raise MemoryError("the PDF needs more memory than allowed") from exc


def _check_pages(document: Any, max_pages: int) -> None:
    """``too_many_pages`` past ``max_pages``, from the page tree alone (module docstring)."""
    found = sum(1 for _ in itertools.islice(PDFPage.create_pages(document.doc), max_pages + 1))
    if found > max_pages:
        raise too_many_pages(max_pages)


def _inflated_size(stream: Any, limit: int) -> int:
    """How many bytes ``stream`` (a pdfminer stream) decodes to, counting no further than
    just past ``limit``; a Flate stream is inflated a chunk at a time and never held."""
    from pdfminer.pdftypes import LITERALS_FLATE_DECODE

    filters = stream.get_filters()
    raw = stream.rawdata
    if (
        raw is not None
        and not stream.decipher
        and len(filters) == 1
        and filters[0][0] in LITERALS_FLATE_DECODE
    ):
        inflater = zlib.decompressobj()
        size, pending = 0, raw
        try:
            while pending and size <= limit:
                size += len(inflater.decompress(pending, _INFLATE_CHUNK))
                pending = inflater.unconsumed_tail
        except zlib.error:
            pass  # a damaged stream: what inflated so far is what a reader gets
        return size
    return len(stream.get_data())


def _content_size(page: Any, limit: int) -> int:
    """The inflated size of a pdfplumber page's content streams and of the form XObjects
    its resources name (nested up to ``_FORM_DEPTH``), counted up to just past ``limit``."""
    from pdfminer.pdftypes import PDFStream, resolve1
    from pdfminer.psparser import LIT

    total = 0
    seen: set[int] = set()

    def add(stream: Any) -> None:
        nonlocal total
        if isinstance(stream, PDFStream) and id(stream) not in seen and total <= limit:
            seen.add(id(stream))
            total += _inflated_size(stream, limit - total)

    def forms(resources: Any, depth: int) -> None:
        resources = resolve1(resources)
        if depth > _FORM_DEPTH or not isinstance(resources, dict):
            return
        xobjects = resolve1(resources.get("XObject"))
        if not isinstance(xobjects, dict):
            return
        for ref in xobjects.values():
            xobject = resolve1(ref)
            if isinstance(xobject, PDFStream) and xobject.get("Subtype") is LIT("Form"):
                if id(xobject) in seen:
                    continue
                add(xobject)
                forms(xobject.get("Resources"), depth + 1)

    for stream in page.page_obj.contents:
        add(resolve1(stream))
    forms(page.page_obj.resources, 0)
    return total


def _layout(page: Any, document: Any, index: int) -> PageLayout:
    """A page's characters and rules: PDFium's reading, or pdfminer's for a page whose
    content PDFium should not be given (``PDFIUM_MAX_CONTENT``) or when PDFium could not
    read the document as pdfminer does (``document`` is ``None``)."""
    if document is None or _content_size(page, PDFIUM_MAX_CONTENT) > PDFIUM_MAX_CONTENT:
        return read_plumber(page)
    pdfium_page = document[index]
    try:
        return read_pdfium(pdfium_page)
    finally:
        pdfium_page.close()


def _as_tables(number: int, found: Sequence[Any]) -> list[Table]:
    """The OCR path's tables (``Table`` records, or plain grids) as cleaned ``Table``s."""
    tables: list[Table] = []
    for table in found:
        if isinstance(table, Table):
            if clean_table(table.rows):
                tables.append(table)
            continue
        rows = clean_table(table)
        if rows:
            tables.append(Table(number, rows))
    return tables


def _page_tables(page: Any, document: Any, number: int, max_pixels: int) -> list[Table]:
    layout = _layout(page, document, number - 1)
    if not layout.has_text:
        return _as_tables(number, _ocr_page(page, max_pixels, number))
    found = (clean(replace(table, page=number)) for table in page_tables(layout))
    return [table for table in found if table is not None]


def without_leading_single_rows(tables: list[Table]) -> list[Table]:
    """``tables`` less the one-row tables before the first table of two rows or more: a
    ruled box around a heading or a figure is no table, and a first table of one row would
    fail the whole document as a header without rows. A one-row table after a real one
    stays (the last row of a table carried over to the next page); so do one-row tables
    when there is no other (a header alone is ``empty_document``, as before)."""
    first = next((k for k, table in enumerate(tables) if len(table.rows) >= 2), None)
    if first is None:
        return tables
    return tables[first:]


def _open_pdfium(content: bytes, pages: int) -> Any:
    """The document opened by PDFium, or ``None`` when PDFium cannot open it or counts its
    pages differently from pdfminer (a damaged file each repairs its own way): then every
    page is read through pdfminer, as relay did before it read pages with PDFium."""
    import pypdfium2  # pdfplumber renders with it: installed with it

    try:
        document = pypdfium2.PdfDocument(content)
    except Exception:  # PdfiumError: a file PDFium cannot parse
        return None
    if len(document) != pages:
        document.close()
        return None
    return document


def _scanned(page: Any, document: Any, index: int) -> bool:
    """Whether a page is a scan: no text layer, something drawn (it is read by OCR). A page
    that cannot be read is not (reading it fails the document as it would have)."""
    try:
        return not _layout(page, document, index).has_text and any(page.objects.values())
    except Exception as exc:
        _raise_for_memory(exc)
        return False
    finally:
        page.close()


def _tables(
    content: bytes, max_pixels: int, max_pages: int, wanted: PageRanges | None
) -> list[Table]:
    """Every non-empty table of the pages to read (all, or those of ``wanted`` the PDF has)
    in reading order, each kept (module docstring)."""
    try:
        document = pdfplumber.open(io.BytesIO(content))
    except Exception as exc:  # pdfminer raises many unrelated types for broken files
        _raise_for_memory(exc)
        raise ExtractionError("invalid_pdf", f"could not open the PDF ({_reason(exc)})") from None
    tables: list[Table] = []
    with document:
        try:
            _check_pages(document, max_pages)
            pages = document.pages
        except ExtractionError:
            raise
        except Exception as exc:
            _raise_for_memory(exc)
            raise ExtractionError(
                "invalid_pdf", f"could not read the PDF ({_reason(exc)})"
            ) from None
        if not pages:
            raise ExtractionError("invalid_pdf", "the PDF has no pages")
        selected = (wanted or PageRanges.span(1, len(pages))).within(len(pages))
        if wanted is not None and not selected:
            raise ExtractionError("pages_out_of_range", wanted.out_of_range(len(pages)))
        pdfium = _open_pdfium(content, len(pages))
        try:
            first = next(iter(selected), None)
            # The deadline grows with the pages (relay.extract.bounds); a long scan is split.
            plan_pages(
                "pdf",
                selected,
                lambda: first is not None and _scanned(pages[first - 1], pdfium, first - 1),
            )
            for number in selected:
                page = pages[number - 1]
                try:
                    tables += _page_tables(page, pdfium, number, max_pixels)
                except ExtractionError:
                    raise
                except Exception as exc:
                    _raise_for_memory(exc)
                    message = f"could not read page {number} of the PDF ({_reason(exc)})"
                    raise ExtractionError("invalid_pdf", message) from None
                finally:
                    page.close()  # drop the page's parsed objects: long PDFs would pile up
        finally:
            if pdfium is not None:
                pdfium.close()
    return tables


def read_pdf(
    content: bytes,
    *,
    max_pixels: int,
    max_pages: int = DEFAULT_MAX_PAGES,
    pages: PageRanges | None = None,
) -> list[Table]:
    """The tables of the PDF's pages (all, or ``pages``) in reading order, every one kept:
    a slice's, to be joined with the others' (``without_leading_single_rows`` is for the
    whole document). ``max_pixels`` bounds the image a scanned page is rendered to."""
    return _tables(content, max_pixels, max_pages, pages)


def extract_pdf(
    content: bytes,
    *,
    max_pixels: int,
    max_pages: int = DEFAULT_MAX_PAGES,
    pages: PageRanges | None = None,
) -> list[Table]:
    """The PDF's tables in reading order (module docstring), of the pages ``pages`` names
    (``None``: every page); ``max_pixels`` bounds the image a scanned page is rendered to."""
    found = read_pdf(content, max_pixels=max_pixels, max_pages=max_pages, pages=pages)
    return without_leading_single_rows(found)
