"""Documents whose tables' geometry the tests know exactly: a PDF (a text layer, one page
upright and one with ``/Rotate 90``), a scan (a PDF whose page is an image) and a phone photo
(a JPEG stored sideways with its EXIF orientation), plus the extractor plug-in that reads them.

Each document is drawn from a :class:`Layout`: where the table is on the page *as displayed*
(origin top left), its column widths, row height, spans, text and confidences. The same
layout gives the geometry a table carries in a result (``bbox`` and ``cells``, fractions of
the page's width and height), so a test can check that a box drawn on the page image lands
on the cell drawn in the document; ``Layout.edges`` (the ruled grid) and ``Layout.text_at``
(a point inside a cell's text) let a test check the boxes relay's own extractor computed.

``review_extractor`` (``RELAY_EXTRACTOR=tests.support.review_documents:review_extractor``)
answers each of these documents, known by its filename, with its tables as the plug-in
contract allows them (``page``, ``rows``, ``confidence``). The contract has no geometry yet, so
:func:`add_geometry` writes each table's ``bbox`` and ``cells`` into the stored result, as an
extractor that reports geometry will store them.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import redis
from PIL import Image, ImageDraw, ImageFont

from relay.devtools.drawn_tables import font_path
from relay.devtools.sample_documents import write_pdf
from relay.extract import extract_document
from relay.redis import keyspace

Grid = list[list[str | None]]

INVOICE: Grid = [
    ["Item", "Qty", "Unit price", "Amount"],
    ["Bolts M6 x 20", "200", "0.12", "24.00"],
    ["Washers M6", "200", "0.03", "6.00"],
    ["Hex nuts M6", "150", "0.08", "12.00"],
    ["Total", None, None, "42.00"],
]
INVOICE_SPANS = {(4, 0): (1, 3)}
# OCR-like scores: most cells sure, a few doubtful, one poor (an empty cell has none).
INVOICE_SCORES: list[list[float | None]] = [
    [0.99, 0.98, 0.97, 0.99],
    [0.93, 0.97, 0.71, 0.95],
    [0.96, 0.64, 0.92, 0.94],
    [0.91, 0.52, 0.95, 0.83],
    [0.98, None, None, 0.99],
]
STOCK: Grid = [
    ["Warehouse", "Shelf", "Count"],
    ["North", "A-12", "1,204"],
    ["South", "C-03", "310"],
]


@dataclass(frozen=True)
class Layout:
    """A table on a page as displayed: page size and table origin in the page's units
    (points for a PDF, pixels for an image), column widths, row height, the grid, its spans
    ``{(row, col): (row_span, col_span)}`` and scores (None: a text layer's)."""

    page: int
    size: tuple[float, float]
    origin: tuple[float, float]
    widths: list[float]
    height: float
    rows: Grid
    spans: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    scores: list[list[float | None]] | None = None
    pdf: bool = False  # drawn in a PDF's text layer (points), else on an image (pixels)

    def text_at(self, r: int, c: int) -> tuple[float, float]:
        """A point inside the text of the cell starting at (r, c), in page units: a PDF
        writes it from 5 pt right of the cell's left edge on a baseline 6 pt above its
        bottom, an image from 14 px right of the left edge around the middle."""
        left, top, _, bottom = self.rect(r, c)
        if self.pdf:
            return left + 8, bottom - 9
        return left + 14 + self.height * 0.2, (top + bottom) / 2

    def edges(self) -> tuple[list[float], list[float]]:
        """The ruled grid's column and row edges, in page units."""
        xs = [self.origin[0] + sum(self.widths[:k]) for k in range(len(self.widths) + 1)]
        ys = [self.origin[1] + k * self.height for k in range(len(self.rows) + 1)]
        return xs, ys

    def covered(self) -> set[tuple[int, int]]:
        out = set()
        for (r, c), (rs, cs) in self.spans.items():
            out |= {(r + i, c + j) for i in range(rs) for j in range(cs)} - {(r, c)}
        return out

    def starts(self) -> list[tuple[int, int]]:
        """Where each cell starts, row by row: every position no span of another covers."""
        covered = self.covered()
        return [
            (r, c)
            for r in range(len(self.rows))
            for c in range(len(self.widths))
            if (r, c) not in covered
        ]

    def rect(self, r: int, c: int) -> tuple[float, float, float, float]:
        """The cell starting at (r, c) in page units: left, top, right, bottom."""
        rs, cs = self.spans.get((r, c), (1, 1))
        left = self.origin[0] + sum(self.widths[:c])
        top = self.origin[1] + r * self.height
        return left, top, left + sum(self.widths[c : c + cs]), top + rs * self.height

    def fraction(self, box: tuple[float, float, float, float]) -> list[float]:
        w, h = self.size
        return [
            round(box[0] / w, 6),
            round(box[1] / h, 6),
            round(box[2] / w, 6),
            round(box[3] / h, 6),
        ]

    def cells(self) -> list[dict[str, Any]]:
        out = []
        for r, c in self.starts():
            rs, cs = self.spans.get((r, c), (1, 1))
            out.append(
                {
                    "row": r,
                    "col": c,
                    "row_span": rs,
                    "col_span": cs,
                    "bbox": self.fraction(self.rect(r, c)),
                }
            )
        return out

    def bbox(self) -> list[float]:
        x0, y0 = self.origin
        return self.fraction((x0, y0, x0 + sum(self.widths), y0 + len(self.rows) * self.height))

    def table(self) -> dict[str, Any]:
        """The table as the plug-in contract carries it."""
        return {"page": self.page, "rows": self.rows, "confidence": self.scores}

    def geometry(self) -> dict[str, Any]:
        return {"bbox": self.bbox(), "cells": self.cells()}


# -- drawing ----------------------------------------------------------------------------------


def _pdf_string(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def _pdf_ops(layout: Layout, rotate: int) -> str:
    """Operators drawing ``layout`` so that it shows as laid out once ``/Rotate`` is applied
    (0 or 90); the page's MediaBox is ``layout.size`` before rotation."""
    height = layout.size[1]  # as displayed

    def user(x: float, y: float) -> tuple[float, float]:
        # displayed (x right, y down) -> PDF user space (y up)
        if rotate == 90:  # displayed x = user y, displayed y = user x
            return y, x
        return x, height - y

    ops = ["0.6 w"]

    def line(x0: float, y0: float, x1: float, y1: float) -> None:
        a, b = user(x0, y0)
        c, d = user(x1, y1)
        ops.append(f"{a:.2f} {b:.2f} m {c:.2f} {d:.2f} l S")

    for r, c in layout.starts():
        left, top, right, bottom = layout.rect(r, c)
        for edge in (
            (left, top, right, top),
            (left, bottom, right, bottom),
            (left, top, left, bottom),
            (right, top, right, bottom),
        ):
            line(*edge)
        text = layout.rows[r][c]
        if text:
            x, y = user(left + 5, bottom - 6)
            matrix = "0 1 -1 0" if rotate == 90 else "1 0 0 1"
            ops.append(f"BT /F1 10 Tf {matrix} {x:.2f} {y:.2f} Tm {_pdf_string(text)} Tj ET")
    return "\n".join(ops)


def _write_pdf(pages: list[tuple[str, tuple[float, float], int]]) -> bytes:
    """A PDF of pages (operators, MediaBox size, /Rotate) with a correct xref table."""
    ids = [4 + 2 * i for i in range(len(pages))]
    kids = " ".join(f"{i} 0 R" for i in ids)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for pid, (ops, (w, h), rotate) in zip(ids, pages, strict=True):
        data = ops.encode("latin-1")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {w:g} {h:g}] /Rotate {rotate}"
            f" /Resources << /Font << /F1 3 0 R >> >> /Contents {pid + 1} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n%b\nendstream" % (len(data), data))
    return write_pdf(objects)


def _draw(layout: Layout, scale: float = 1.0) -> Image.Image:
    """``layout`` drawn on a white page of its size (pixels)."""
    w, h = (round(v) for v in layout.size)
    image = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(font_path(), round(layout.height * 0.42))
    for r, c in layout.starts():
        left, top, right, bottom = layout.rect(r, c)
        draw.rectangle((left, top, right, bottom), outline="black", width=max(2, round(scale * 2)))
        text = layout.rows[r][c]
        if text:
            draw.text((left + 14, (top + bottom) / 2), text, fill="black", font=font, anchor="lm")
    return image


# -- the documents ----------------------------------------------------------------------------

PDF_PAGE = (612.0, 792.0)  # US Letter, points
PDF_LAYOUTS = [
    Layout(1, PDF_PAGE, (72, 96), [190, 60, 90, 90], 24, INVOICE, INVOICE_SPANS, pdf=True),
    # Page 2 is stored portrait with /Rotate 90: displayed landscape (792 x 612).
    Layout(2, (792.0, 612.0), (120, 150), [160, 110, 110], 26, STOCK, pdf=True),
]
SCAN_PAGE = (1240.0, 1754.0)  # A4 at 150 dpi, pixels
SCAN_LAYOUTS = [
    Layout(
        1, SCAN_PAGE, (150, 260), [380, 140, 220, 220], 64, INVOICE, INVOICE_SPANS, INVOICE_SCORES
    )
]
PHOTO_PAGE = (1200.0, 900.0)  # as displayed, pixels
PHOTO_LAYOUTS = [
    Layout(
        1,
        PHOTO_PAGE,
        (70, 120),
        [330, 120, 250, 200],
        110,
        INVOICE,
        INVOICE_SPANS,
        [[s if s is None else round(min(1.0, s * 0.97), 2) for s in row] for row in INVOICE_SCORES],
    )
]


def pdf_document() -> bytes:
    """Two pages: the invoice upright, the stock list on a page with ``/Rotate 90``."""
    first, second = PDF_LAYOUTS
    return _write_pdf(
        [
            (_pdf_ops(first, 0), PDF_PAGE, 0),
            (_pdf_ops(second, 90), (612.0, 792.0), 90),
        ]
    )


def _paper(image: Image.Image, seed: int) -> Image.Image:
    """``image`` on greyish paper with a little sensor noise (fixed seed), in place: what a
    scanner or a camera adds without moving anything."""
    import numpy as np

    rng = np.random.default_rng(seed)
    pixels = np.asarray(image.convert("L"), dtype=np.float64) * 0.9 + 14
    pixels += rng.normal(0.0, 6.0, pixels.shape)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).convert("RGB")


def scan_document() -> bytes:
    """A scanned page: the invoice as an image in a PDF, no text layer."""
    page = _paper(_draw(SCAN_LAYOUTS[0]), seed=3)
    out = io.BytesIO()
    page.save(out, "PDF", resolution=150.0)
    return out.getvalue()


def photo_document() -> bytes:
    """A phone photo: stored sideways (turned a quarter counter-clockwise) with EXIF
    orientation 6, so that it shows upright only with the orientation applied."""
    upright = _paper(_draw(PHOTO_LAYOUTS[0]), seed=5)
    stored = upright.transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 CW to display
    out = io.BytesIO()
    stored.save(out, "JPEG", quality=90, exif=exif.tobytes())
    return out.getvalue()


DOCUMENTS: dict[str, tuple[str, list[Layout]]] = {
    "invoice.pdf": ("application/pdf", PDF_LAYOUTS),
    "scan.pdf": ("application/pdf", SCAN_LAYOUTS),
    "photo.jpg": ("image/jpeg", PHOTO_LAYOUTS),
}


def content_of(filename: str) -> bytes:
    return {"invoice.pdf": pdf_document, "scan.pdf": scan_document, "photo.jpg": photo_document}[
        filename
    ]()


# -- the plug-in and the geometry ------------------------------------------------------------


def review_extractor(
    content: bytes, /, *, filename: str, content_type: str, fields: list[str]
) -> Any:
    """These documents' tables as the plug-in contract carries them (filename decides);
    any other document as the default extractor reads it."""
    if filename not in DOCUMENTS:
        return extract_document(
            content, filename=filename, content_type=content_type, fields=fields
        )
    _, layouts = DOCUMENTS[filename]
    first = layouts[0].rows
    items = [dict(zip([str(k) for k in first[0]], row, strict=True)) for row in first[1:]]
    return {"line_items": items, "tables": [layout.table() for layout in layouts]}


def add_geometry(client: redis.Redis, doc_id: str, layouts: list[Layout]) -> dict[str, Any]:
    """Write each table's ``bbox`` and ``cells`` into the document's stored result; the
    result as stored."""
    shard = keyspace.shard_of_id("doc", doc_id)
    assert shard is not None
    key = keyspace.doc_items(shard, doc_id)
    result = json.loads(client.get(key) or b"null")
    assert isinstance(result, dict), result
    for table, layout in zip(result["tables"], layouts, strict=True):
        table.update(layout.geometry())
    client.set(key, json.dumps(result, separators=(",", ":")))
    return dict(result)
