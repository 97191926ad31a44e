"""PDF tables into rows, with pdfplumber; scanned pages through OCR.

Contract:

* Every page with a text layer is read with ``page.extract_tables()`` (pdfplumber's
  default, ruling-line based detection), in page order and, within a page, in pdfplumber's
  order.
* A page with no text layer (no characters: a scan, a photo saved as PDF) is rendered to
  an image at ``SCAN_DPI`` and read by OCR (``relay.extract.ocr``), like an uploaded image.
  The resolution is lowered when the page would exceed ``max_pixels`` (a poster-sized page
  is not a reason to fail, nor to allocate gigabytes).
* The tables are returned as ``relay.extract.result.Table`` in reading order;
  ``relay.extract.tables`` makes them ``line_items`` and ``tables``. Cells pdfplumber
  reports as ``None`` (merged or missing) stay ``None``; strings are stripped.
* A PDF of more than ``max_pages`` pages fails with ``too_many_pages`` before any page is
  read: the page tree is walked (page dictionaries only, no content) up to one page past
  the bound, so a PDF claiming a wrong ``/Count`` is counted right, and 5,000 pages cost
  milliseconds.
* Errors: bytes pdfplumber cannot open or read -> ``invalid_pdf``; no table anywhere ->
  ``no_table_found``; a header with no rows under it -> ``empty_document``. Running out of
  memory (a decompression bomb under the sandbox's limit) is re-raised as ``MemoryError``,
  never disguised as ``invalid_pdf``.
"""

from __future__ import annotations

import io
import itertools
import math
from typing import Any

import pdfplumber
from pdfminer.pdfpage import PDFPage

from relay.extract.errors import ExtractionError, shorten
from relay.extract.limits import DEFAULT_MAX_PAGES, too_many_pages
from relay.extract.result import Table
from relay.extract.tables import Cells, clean_table

__all__ = ["SCAN_DPI", "extract_pdf"]

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


def _page_tables(page: Any, max_pixels: int, number: int) -> list[Table | list[Cells]]:
    if not page.chars:
        return list(_ocr_page(page, max_pixels, number))
    return [list(table) for table in page.extract_tables()]


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


def _tables(content: bytes, max_pixels: int, max_pages: int) -> list[Table]:
    """Every non-empty table of every page, rows cleaned and blank rows dropped."""
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
        for number, page in enumerate(pages, start=1):
            try:
                found = _page_tables(page, max_pixels, number)
            except ExtractionError:
                raise
            except Exception as exc:
                _raise_for_memory(exc)
                message = f"could not read page {number} of the PDF ({_reason(exc)})"
                raise ExtractionError("invalid_pdf", message) from None
            finally:
                page.close()  # drop the page's parsed objects: long PDFs would pile them up
            for table in found:
                if isinstance(table, Table):  # read by OCR: cleaned, with its confidence
                    tables.append(table)
                    continue
                rows = clean_table(table)
                if rows:
                    tables.append(Table(number, list(rows)))
    return tables


def extract_pdf(
    content: bytes, *, max_pixels: int, max_pages: int = DEFAULT_MAX_PAGES
) -> list[Table]:
    """The PDF's tables in reading order (module docstring); ``max_pixels`` bounds the image
    a scanned page is rendered to."""
    return _tables(content, max_pixels, max_pages)
