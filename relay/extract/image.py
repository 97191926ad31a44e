"""Tables in images (PNG, JPEG, TIFF, WebP) into rows, by OCR.

Contract:

* The image is opened with Pillow, which reads only the header first: an image (or any
  page of a TIFF) of more than ``max_pixels`` pixels fails with ``image_too_large`` before
  its pixels are decoded, so a decompression bomb (a few KiB of PNG that inflate to
  gigabytes) costs nothing. Pages are decoded and read one at a time, so the bound is per
  page: a 15-page TIFF scanned at 200 dpi (59 MP in all) is read; the number of pages is
  bounded by ``max_pages``. Bytes Pillow cannot read fail with ``invalid_image``.
* Every page of a multi-page TIFF is read, in order; of an animated PNG or WebP only the
  first frame (an animation is not a document). A TIFF of more than ``max_pages`` pages
  fails with ``too_many_pages`` before any is decoded (whatever ``pages`` asks for); with
  ``pages`` (``relay.extract.pages.PageRanges``: the process call's selection, or one slice
  of a long TIFF) only the pages it names are decoded and read, keeping their own numbers,
  and any other image is a document of one page (a range without page 1 selects nothing:
  ``pages_out_of_range``). The pages to read are planned (``relay.extract.bounds.plan_pages``):
  the document's deadline grows with them, and more of them than the caller's ``split_over``
  are split into slices by the worker (``SplitPages``).
* Each page is turned upright as its EXIF orientation says (phones store photos sideways
  and say so there), flattened onto white when it has transparency, and read by
  ``relay.extract.ocr.read_tables``: ruled and unruled tables, text of any size from about
  7 px high, a blank page in milliseconds (no OCR without ink).
* The tables are returned as ``relay.extract.result.Table`` in reading order (``page`` is
  the TIFF page, 1 for any other image); ``relay.extract.tables`` makes them ``line_items``
  and ``tables`` (no table -> ``no_table_found``). Values are strings, as for CSV; a
  cell with no text is ``None``; a spanning cell's text sits at its top-left position;
  the lines of a cell's text are joined with ``\n``. Each table carries the OCR's
  ``confidence`` per cell (0-1, ``None`` for an empty cell).

Pillow, numpy, OpenCV and the OCR models are imported when the first image arrives, not
with ``relay.extract``: a worker that only sees CSV never pays their import time and memory.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

from relay.extract.bounds import DEFAULT_MAX_PAGES, plan_pages, too_many_pages
from relay.extract.errors import ExtractionError, shorten
from relay.extract.pages import PageRanges
from relay.extract.result import Table

if TYPE_CHECKING:
    from PIL.Image import Image

__all__ = ["DEFAULT_MAX_IMAGE_PIXELS", "extract_image"]

# 50 megapixels: a full A4 page scanned at 600 dpi (35 MP) or a 48 MP phone photo fits;
# decoded as RGB it is 150 MB, and the OCR pipeline holds a few copies of it.
DEFAULT_MAX_IMAGE_PIXELS = 50_000_000


def _too_large(pixels: int, max_pixels: int) -> ExtractionError:
    return ExtractionError(
        "image_too_large",
        f"the image has {pixels:,} pixels, more than the {max_pixels:,} allowed",
    )


def _open(content: bytes, max_pixels: int) -> Image:
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            # Pillow warns past its own limit and raises past twice that; relay's limit is
            # checked right after, from the same header, and says it in relay's words.
            warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)
            image = PILImage.open(io.BytesIO(content))
    except PILImage.DecompressionBombError:
        raise ExtractionError(
            "image_too_large", f"the image has more than the {max_pixels:,} pixels allowed"
        ) from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        reason = shorten(f"{type(exc).__name__}: {exc}", 160)
        raise ExtractionError("invalid_image", f"could not read the image ({reason})") from None
    return image


def _frames(
    image: Image, max_pixels: int, max_pages: int, selected: PageRanges | None
) -> list[int]:
    """The frame numbers (0-based) to read, the ``selected`` pages' (all when ``None``),
    once their number and the size of each are known to be within bounds."""
    count = getattr(image, "n_frames", 1) if image.format == "TIFF" else 1
    if count > max_pages:
        raise too_many_pages(max_pages)
    frames = list(range(count))
    if selected is not None:
        frames = [page - 1 for page in selected.select(count)]
        if not frames:
            raise ExtractionError("pages_out_of_range", selected.out_of_range(count))
    for frame in frames:
        image.seek(frame)  # reads the frame's header only
        pixels = image.width * image.height
        if pixels > max_pixels:
            raise _too_large(pixels, max_pixels)
    return frames


def _upright(image: Image) -> Image:
    """The current frame decoded, turned as EXIF says, on white, in RGB."""
    from PIL import Image as PILImage
    from PIL import ImageOps

    turned = ImageOps.exif_transpose(image)
    if turned.mode in ("RGBA", "LA", "PA") or "transparency" in turned.info:
        rgba = turned.convert("RGBA")
        white = PILImage.new("RGBA", rgba.size, "white")
        return PILImage.alpha_composite(white, rgba).convert("RGB")
    return turned.convert("RGB")


def _pages(
    content: bytes, max_pixels: int, max_pages: int, selected: PageRanges | None
) -> Iterator[tuple[int, Image]]:
    """Each page to read, with its number (1-based), decoded and upright."""
    image = _open(content, max_pixels)
    with image:
        frames = _frames(image, max_pixels, max_pages, selected)
        # The deadline grows with them (relay.extract.bounds); every page is OCR'd, so a
        # long TIFF is split into slices when the caller asks.
        plan_pages("image", PageRanges.numbers(frame + 1 for frame in frames), lambda: True)
        for frame in frames:
            image.seek(frame)
            try:
                page = _upright(image)
            except (OSError, ValueError, SyntaxError) as exc:  # truncated or corrupt data
                reason = shorten(f"{type(exc).__name__}: {exc}", 160)
                message = f"could not decode the image ({reason})"
                raise ExtractionError("invalid_image", message) from None
            yield frame + 1, page


def extract_image(
    content: bytes,
    *,
    max_pixels: int,
    max_pages: int = DEFAULT_MAX_PAGES,
    pages: PageRanges | None = None,
) -> list[Table]:
    """The tables in an image, in reading order (module docstring), of the pages ``pages``
    names (``None``: every page)."""
    tables: list[Table] = []
    for number, page in _pages(content, max_pixels, max_pages, pages):
        # Imports OpenCV and the models: once a page is to be read, not to count them.
        from relay.extract.ocr import read_tables

        tables.extend(read_tables(page, number))
    return tables
