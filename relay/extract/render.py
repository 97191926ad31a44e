"""A document's pages as PNG images, as extraction saw them: what a table's geometry is drawn on.

Contract:

* Only PDFs and images have pages (the format from the bytes, ``sniff``); anything else is
  :class:`PageError` ``no_pages``.
* A PDF is rendered by PDFium with its ``/Rotate`` applied (the page as displayed: the same
  orientation as ``pdf_layout``'s coordinates, origin top left), on white. An image's pages
  are the frames of a TIFF, or the first frame of anything else, as ``image`` reads them:
  the same pixel bound checked from the header before any pixel is decoded
  (``image_too_large``: a decompression bomb costs nothing), EXIF orientation applied,
  transparency flattened onto white. So a cell's box, in fractions of the page's width and
  height, lands on the same spot of the image.
* A document of more than ``max_pages`` pages is ``too_many_pages``; page numbers are
  1-based, and one past the last is ``page_not_found`` (``pages`` says how many there are).
* The image's long side is at most ``max_side`` pixels and its area at most ``max_pixels``;
  ``width`` asks for a narrower one (never wider than the page allows). A page is never
  enlarged past the bound to meet ``width``.

Everything here runs in the page-image child process (``relay.api.page_images``), which
bounds its memory and time: PDFium aborts its process when an allocation fails, so it never
runs in the API process itself.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from relay.extract.errors import ExtractionError
from relay.extract.image import _frames, _open, _upright
from relay.extract.sniff import IMAGE_FORMATS, sniff_format

if TYPE_CHECKING:
    from PIL.Image import Image

__all__ = ["PageError", "PageImage", "count_pages", "render_page"]

# The narrowest page image asked for: a thumbnail still worth drawing boxes on.
MIN_WIDTH = 16


class PageError(Exception):
    """Why a page cannot be shown: ``code`` (``no_pages``, ``page_not_found``,
    ``invalid_pdf``, ``invalid_image``, ``image_too_large``, ``too_many_pages``), a
    message, and the document's page count when it is known."""

    def __init__(self, code: str, message: str, pages: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.pages = pages


@dataclass(frozen=True)
class PageImage:
    png: bytes
    width: int
    height: int
    pages: int  # how many pages the document has


def _size(width: float, height: float, wanted: int | None, max_side: int, max_pixels: int) -> float:
    """The scale from a page of ``width`` x ``height`` (points or pixels) to its image."""
    if width <= 0 or height <= 0:
        raise PageError("invalid_pdf", "the page has no area")
    scale = max_side / max(width, height)
    if wanted is not None:
        scale = min(scale, max(wanted, MIN_WIDTH) / width)
    return min(scale, math.sqrt(max_pixels / (width * height)))


def _png(image: Image) -> bytes:
    # Level 3: a scanned page's noise barely compresses past it, and level 6 takes 2.5 times
    # as long for 3 % fewer bytes (a text page's PNG is small either way).
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=3)
    return out.getvalue()


def _check(number: int, pages: int) -> None:
    if not 1 <= number <= pages:
        raise PageError(
            "page_not_found", f"the document has {pages} page(s); there is no page {number}", pages
        )


def _open_pdf(content: bytes, max_pages: int) -> Any:
    import pypdfium2 as pdfium

    try:
        document = pdfium.PdfDocument(content)
    except pdfium.PdfiumError as exc:
        raise PageError("invalid_pdf", f"the PDF cannot be opened ({exc})") from None
    if len(document) > max_pages:
        document.close()
        raise PageError("too_many_pages", f"the document has more than {max_pages:,} pages")
    return document


def _pdf_page(
    content: bytes, number: int, wanted: int | None, max_side: int, max_pixels: int, max_pages: int
) -> PageImage:
    document = _open_pdf(content, max_pages)
    try:
        pages = len(document)
        _check(number, pages)
        page = document[number - 1]
        try:
            width, height = page.get_size()  # as displayed: /Rotate applied
            # PDFium rounds the size up: a hair less keeps an exact width exact.
            scale = _size(width, height, wanted, max_side, max_pixels) * (1 - 1e-9)
            bitmap = page.render(scale=scale, fill_color=(255, 255, 255, 255))
            image = bitmap.to_pil().convert("RGB")
        finally:
            page.close()
    finally:
        document.close()
    return PageImage(_png(image), image.width, image.height, pages)


def _image_page(
    content: bytes, number: int, wanted: int | None, max_side: int, max_pixels: int, max_pages: int
) -> PageImage:
    from PIL import Image as PILImage

    try:
        image = _open(content, max_pixels)
        with image:
            frames = _frames(image, max_pixels, max_pages, None)
            _check(number, len(frames))
            image.seek(number - 1)
            # The bound is on the long side, whichever way EXIF turns the frame.
            scale = _size(image.width, image.height, None, max_side, max_pixels)
            if image.format == "JPEG" and scale < 1:
                image.draft(
                    "RGB", (math.ceil(image.width * scale), math.ceil(image.height * scale))
                )
            page = _upright(image)
    except ExtractionError as exc:
        raise PageError(exc.code, exc.message) from None
    except (OSError, ValueError, SyntaxError) as exc:  # truncated or corrupt data
        raise PageError("invalid_image", f"the image cannot be decoded ({exc})") from None
    scale = _size(page.width, page.height, wanted, max_side, max_pixels)
    if scale < 1:
        size = (max(1, round(page.width * scale)), max(1, round(page.height * scale)))
        page = page.resize(size, PILImage.Resampling.LANCZOS, reducing_gap=3.0)
    return PageImage(_png(page), page.width, page.height, len(frames))


def render_page(
    content: bytes,
    number: int,
    *,
    width: int | None = None,
    max_side: int,
    max_pixels: int,
    max_pages: int,
) -> PageImage:
    """Page ``number`` (1-based) of a PDF or image as a PNG (module docstring); PageError."""
    kind = sniff_format(content)
    if kind == "pdf":
        return _pdf_page(content, number, width, max_side, max_pixels, max_pages)
    if kind in IMAGE_FORMATS:
        return _image_page(content, number, width, max_side, max_pixels, max_pages)
    raise PageError("no_pages", "only PDFs and images have pages to show")


def count_pages(content: bytes, *, max_pixels: int, max_pages: int) -> int:
    """How many pages a PDF or image has (no page decoded); PageError."""
    kind = sniff_format(content)
    if kind == "pdf":
        document = _open_pdf(content, max_pages)
        try:
            return len(document)
        finally:
            document.close()
    if kind in IMAGE_FORMATS:
        try:
            image = _open(content, max_pixels)
            with image:
                return len(_frames(image, max_pixels, max_pages, None))
        except ExtractionError as exc:
            raise PageError(exc.code, exc.message) from None
    raise PageError("no_pages", "only PDFs and images have pages to show")
