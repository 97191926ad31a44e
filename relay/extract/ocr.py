"""The tables of one page image: img2table finds the cells, Tesseract reads them.

Why not img2table's own ``TesseractOCR``: it runs Tesseract once over the whole page in
sparse-text mode (``--psm 11``) and maps the words into cells, and Tesseract's page layout
analysis drops a character standing alone as noise: on a clean 30 px table the cells "2"
and "5" came back ``None`` (psm 11 and 12 lost both, with any ``min_confidence``; psm 1, 3
and 4 lost whole columns; psm 6 read nothing at all once the table had ruling lines).
Upscaling the page did not help; a single cell cropped, padded and read on its own did.

So img2table finds the structure only (``ocr=None``: the boxes of the cells, bordered or
borderless) and relay reads the cells: every cell with ink in it is cropped, its ruling
lines erased, upscaled when its text is small, and padded with white; the crops of a page
are stacked into one sheet that Tesseract reads in one call with ``--psm 6`` (a uniform
block of text: each crop is a line of its own, nothing is dropped as noise). Each word goes
back to the crop its box falls in. That is one Tesseract process per page, as with
img2table's OCR, whatever the number of cells, and blank cells cost no OCR at all.

Tesseract runs as a child process with a bounded time, one OpenMP thread (a document gets
one core; parallelism comes from running more workers) and an environment of its own (it
inherits none of relay's settings or secrets).
"""

from __future__ import annotations

import io
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from relay.extract.errors import ExtractionError, shorten

if TYPE_CHECKING:  # numpy, Pillow and img2table are imported when a page arrives
    import numpy as np
    from numpy.typing import NDArray
    from PIL.Image import Image

__all__ = ["read_tables"]

Cells = list[str | None]
Box = tuple[int, int, int, int]  # x1, y1, x2, y2 in page pixels

# A grey level below this is ink (on white paper, whatever the scanner's contrast).
_INK_LEVEL = 160
# A crop with fewer ink pixels than this, once its ruling lines are erased, is blank.
_MIN_INK_PIXELS = 12
# A row or column of a crop that is mostly ink is a ruling line, not text.
_LINE_SHARE = 0.5
_LINE_MARGIN = 2  # px erased on each side of a ruling line
# Tesseract reads best with text 20-40 px high; smaller text is upscaled to about this.
_TARGET_TEXT_HEIGHT = 32
_MAX_UPSCALE = 4.0
_PAD = 12  # white around each crop, in sheet pixels
_GAP = 24  # white between crops: a line of its own for each
_MAX_SHEET_HEIGHT = 8000  # taller sheets are split (Tesseract's memory grows with the page)
_TESSERACT_TIMEOUT = 120.0  # seconds for one sheet; a healthy page takes well under 2 s
_TESSERACT_ARGS = ("stdin", "stdout", "--psm", "6", "-l", "eng", "tsv")


@dataclass
class _Crop:
    box: Box
    pixels: NDArray[np.uint8]  # grey levels, ruling lines erased, upscaled, padded


def _cell_boxes(table: object) -> list[list[Box]]:
    """An img2table ``ExtractedTable`` as rows of cell boxes (a merged cell's box repeats)."""
    rows: list[list[Box]] = []
    for cells in table.content.values():  # type: ignore[attr-defined]
        rows.append([(c.bbox.x1, c.bbox.y1, c.bbox.x2, c.bbox.y2) for c in cells])
    return rows


def _widen(line: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """``line`` (rows or columns that are ruling lines) and ``_LINE_MARGIN`` on each side:
    a scanned or straightened line is a few pixels thick and its edges are lighter."""
    import numpy as np

    wide = line.copy()
    for shift in range(1, _LINE_MARGIN + 1):
        wide[shift:] |= line[:-shift]
        wide[:-shift] |= line[shift:]
    return np.asarray(wide, dtype=np.bool_)


def _crop(grey: NDArray[np.uint8], box: Box) -> _Crop | None:
    """The cell's pixels ready for OCR, or ``None`` when there is no text in it."""
    import numpy as np
    from PIL import Image as PILImage

    x1, y1, x2, y2 = box
    pixels = grey[max(y1, 0) : max(y2, 0), max(x1, 0) : max(x2, 0)].copy()
    if pixels.size == 0:
        return None
    pixels[pixels >= _INK_LEVEL] = 255  # paper, whatever its shade or grain, is white
    ink = pixels < _INK_LEVEL
    lines_across = _widen(ink.mean(axis=1) > _LINE_SHARE)
    lines_down = _widen(ink.mean(axis=0) > _LINE_SHARE)
    pixels[lines_across, :] = 255
    pixels[:, lines_down] = 255
    ink[lines_across, :] = False
    ink[:, lines_down] = False
    if int(ink.sum()) < _MIN_INK_PIXELS:
        return None
    ink_rows = np.flatnonzero(ink.any(axis=1))
    ink_cols = np.flatnonzero(ink.any(axis=0))
    top, bottom = int(ink_rows[0]), int(ink_rows[-1]) + 1
    left, right = int(ink_cols[0]), int(ink_cols[-1]) + 1
    image = PILImage.fromarray(pixels[top:bottom, left:right])
    scale = min(max(_TARGET_TEXT_HEIGHT / (bottom - top), 1.0), _MAX_UPSCALE)
    if scale > 1.0:
        size = (round(image.width * scale), round(image.height * scale))
        image = image.resize(size, PILImage.Resampling.LANCZOS)
    padded = PILImage.new("L", (image.width + 2 * _PAD, image.height + 2 * _PAD), 255)
    padded.paste(image, (_PAD, _PAD))
    return _Crop(box, np.asarray(padded, dtype=np.uint8))


def _sheets(crops: Sequence[_Crop]) -> list[tuple[bytes, list[tuple[int, int, Box]]]]:
    """The crops stacked into PNG sheets of at most ``_MAX_SHEET_HEIGHT`` px, each with the
    vertical span of every crop on it."""
    import numpy as np
    from PIL import Image as PILImage

    groups: list[list[_Crop]] = [[]]
    height = _GAP
    for crop in crops:
        step = crop.pixels.shape[0] + _GAP
        if groups[-1] and height + step > _MAX_SHEET_HEIGHT:
            groups.append([])
            height = _GAP
        groups[-1].append(crop)
        height += step
    out: list[tuple[bytes, list[tuple[int, int, Box]]]] = []
    for group in groups:
        width = max(c.pixels.shape[1] for c in group) + 2 * _GAP
        total = _GAP + sum(c.pixels.shape[0] + _GAP for c in group)
        sheet = np.full((total, width), 255, dtype=np.uint8)
        spans: list[tuple[int, int, Box]] = []
        y = _GAP
        for crop in group:
            h, w = crop.pixels.shape
            sheet[y : y + h, _GAP : _GAP + w] = crop.pixels
            spans.append((y, y + h, crop.box))
            y += h + _GAP
        buffer = io.BytesIO()
        PILImage.fromarray(sheet).save(buffer, "PNG", compress_level=1)
        out.append((buffer.getvalue(), spans))
    return out


def _tesseract(png: bytes) -> str:
    """Tesseract's TSV output for one sheet."""
    binary = shutil.which("tesseract")
    if binary is None:
        raise ExtractionError("ocr_unavailable", "the Tesseract OCR engine is not installed")
    try:
        done = subprocess.run(
            [binary, *_TESSERACT_ARGS],
            input=png,
            capture_output=True,
            timeout=_TESSERACT_TIMEOUT,
            env={"OMP_THREAD_LIMIT": "1"},
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ExtractionError(
            "extraction_error", f"OCR took longer than {_TESSERACT_TIMEOUT:g} s"
        ) from None
    if done.returncode != 0:
        said = shorten(done.stderr.decode(errors="replace"), 200)
        raise ExtractionError("extraction_error", f"OCR failed: {said}")
    return done.stdout.decode("utf-8", errors="replace")


def _words(tsv: str) -> list[tuple[tuple[int, int, int], int, int, str]]:
    """``(line key, x, y centre, text)`` of every word Tesseract read."""
    words = []
    for line in tsv.splitlines()[1:]:
        parts = line.split("\t")
        if len(parts) != 12 or parts[0] != "5" or not parts[11].strip():
            continue
        block, paragraph, row = int(parts[2]), int(parts[3]), int(parts[4])
        left, top, height = int(parts[6]), int(parts[7]), int(parts[9])
        words.append(((block, paragraph, row), left, top + height // 2, parts[11].strip()))
    return words


def _read(crops: Sequence[_Crop]) -> dict[Box, str]:
    """The text of every crop, by cell box: one Tesseract call per sheet."""
    texts: dict[Box, str] = {}
    for png, spans in _sheets(crops):
        placed: dict[Box, list[tuple[tuple[int, int, int], int, str]]] = {}
        for line_key, x, y, text in _words(_tesseract(png)):
            for top, bottom, box in spans:
                if top - _GAP // 2 <= y < bottom + _GAP // 2:
                    placed.setdefault(box, []).append((line_key, x, text))
                    break
        for box, words in placed.items():
            lines: dict[tuple[int, int, int], list[tuple[int, str]]] = {}
            for line_key, x, text in sorted(words):
                lines.setdefault(line_key, []).append((x, text))
            texts[box] = "\n".join(" ".join(t for _, t in ws) for ws in lines.values())
    return texts


def read_tables(page: Image) -> list[list[Cells]]:
    """The tables on ``page`` (any Pillow image), each as rows of cell texts (``None`` for an
    empty cell), top to bottom; ``[]`` when there is none."""
    import numpy as np
    from img2table.document import Image as Document
    from PIL import Image as PILImage
    from PIL import ImageFilter

    buffer = io.BytesIO()
    page.convert("RGB").save(buffer, "PNG", compress_level=1)
    # detect_rotation straightens a photo or a skewed scan before the cells are found;
    # the cells' boxes are in the straightened image, so that is the one cropped below.
    document = Document(buffer.getvalue(), detect_rotation=True)
    found = document.extract_tables(ocr=None, implicit_rows=True, borderless_tables=True)
    if not found:
        return []
    rgb = document.images[0]
    grey = (rgb @ np.array([0.299, 0.587, 0.114])).astype(np.uint8)
    # A 3x3 median removes the specks of a photo or a dusty scan (which would count as ink
    # and be read as punctuation) and leaves strokes of printed text intact.
    grey = np.asarray(PILImage.fromarray(grey).filter(ImageFilter.MedianFilter(3)))
    tables = [_cell_boxes(table) for table in found]
    crops: dict[Box, _Crop | None] = {}
    for table in tables:
        for row in table:
            for box in row:
                if box not in crops:
                    crops[box] = _crop(grey, box)
    texts = _read([crop for crop in crops.values() if crop is not None])
    return [[[texts.get(box) for box in row] for row in table] for table in tables]
