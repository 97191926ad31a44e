"""A text line the OCR detector reads across a table's vertical rulings is cut there
(``relay.extract.ocr_words.pieces``): the rulings are painted out before the detector runs, so
the texts of neighbouring cells a few pixels either side of a ruling come back as one line
("Qty Unit price Amount" across three cells), and each piece must go to its own cell.

Tables are drawn by the test (Pillow, a system font) and read by the real models.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from relay.devtools.drawn_tables import font_path
from relay.extract import extract_document
from relay.extract.ocr import read_tables
from relay.extract.ocr_words import pieces
from tests.support.review_documents import INVOICE, content_of

ROWS = [
    ["Part", "Qty", "Price", "Total"],
    ["Bolt", "12", "0.40", "4.80"],
    ["Nut", "30", "0.10", "3.00"],
    ["Washer", "25", "0.05", "1.25"],
]


def _tight_table(size: int, pad: int) -> tuple[Image.Image, list[float], list[float]]:
    """``ROWS`` ruled, each column as wide as its widest text and ``pad`` pixels either side
    (text ``size`` pixels, rows twice that high): the image and its column and row edges."""
    font = ImageFont.truetype(font_path(), size)
    widths = [max(font.getlength(row[c]) for row in ROWS) + 2 * pad + 4 for c in range(4)]
    margin, height = 40, 2 * size
    xs = [float(margin)]
    for w in widths:
        xs.append(xs[-1] + w)
    ys = [float(margin + r * height) for r in range(len(ROWS) + 1)]
    image = Image.new("RGB", (round(xs[-1]) + margin, round(ys[-1]) + margin), "white")
    draw = ImageDraw.Draw(image)
    for r, row in enumerate(ROWS):
        for c, text in enumerate(row):
            draw.rectangle((xs[c], ys[r], xs[c + 1], ys[r + 1]), outline="black", width=2)
            draw.text(
                (xs[c] + pad + 2, (ys[r] + ys[r + 1]) / 2),
                text,
                fill="black",
                font=font,
                anchor="lm",
            )
    return image, xs, ys


@pytest.mark.parametrize(("size", "pad"), [(24, 4), (30, 6)], ids=["24px", "30px"])
def test_cells_a_few_pixels_from_a_ruling_are_read_apart(size: int, pad: int) -> None:
    """The detector reads "Qty Price Total" (and "0.40 4.80", "Washer 25") as one line each;
    every cell comes back with its own text, and its box is the ruled box it was drawn in."""
    image, xs, ys = _tight_table(size, pad)
    (table,) = read_tables(image)
    assert table.rows == ROWS
    assert table.confidence is not None
    assert all(score is not None and score > 0.5 for row in table.confidence for score in row)
    width, height = image.size
    for cell in table.grid_cells():
        assert cell.bbox is not None and (cell.row_span, cell.col_span) == (1, 1)
        x0, y0, x1, y1 = cell.bbox
        want = (xs[cell.col], ys[cell.row], xs[cell.col + 1], ys[cell.row + 1])
        got = (x0 * width, y0 * height, x1 * width, y1 * height)
        assert all(abs(g - w) <= 3 for g, w in zip(got, want, strict=True)), (cell, got, want)


def test_the_phone_photo_of_the_review_page_reads_its_grid() -> None:
    """The console review's phone photo (a ruled 4 x 5 invoice, stored sideways): its
    header was read ``['Item', None, 'Qty Unit price Amount', None]``."""
    result = extract_document(
        content_of("photo.jpg"), filename="photo.jpg", content_type="image/jpeg", fields=[]
    )
    (table,) = result.tables
    assert table.rows == INVOICE
    total = next(cell for cell in table.grid_cells() if (cell.row, cell.col) == (4, 0))
    assert total.col_span == 3  # no ruling parts "Total" from the two cells beside it


def _placed(text: str, left: float, pitch: float, top: float, bottom: float) -> list[object]:
    """What rapidocr returns for a line with ``return_word_box=True``: a box per character
    (``pitch`` pixels each, from ``left``), the characters, their scores."""
    boxes = [
        [
            [left + k * pitch, top],
            [left + (k + 1) * pitch, top],
            [left + (k + 1) * pitch, bottom],
            [left + k * pitch, bottom],
        ]
        for k in range(len(text))
    ]
    return [boxes, list(text), [0.9] * len(text)]


def test_only_a_ruling_through_the_line_between_two_characters_cuts_it() -> None:
    ink = np.zeros((100, 400), dtype=bool)  # no ink: the recogniser's own spaces only
    corners = [[10, 40], [210, 40], [210, 60], [10, 60]]
    placed = _placed("ab cd", 10, 40, 40, 60)  # centres 30, 70, 110, 150, 190
    whole = pieces(ink, corners, "ab cd", 0.9, placed, [])
    assert [p.text for p in whole] == ["ab cd"]
    through = pieces(ink, corners, "ab cd", 0.9, placed, [(95.0, 0.0, 100.0)])
    assert [p.text for p in through] == ["ab", "cd"]
    assert through[0].box == (10.0, 40.0, 90.0, 60.0)  # up to its last character's edge
    assert through[1].box == (130.0, 40.0, 210.0, 60.0)
    # A ruling that ends at the line's top (a frame above it) or runs through a character's
    # middle, or that has no character on one side, cuts nothing.
    assert len(pieces(ink, corners, "ab cd", 0.9, placed, [(95.0, 0.0, 45.0)])) == 1
    assert len(pieces(ink, corners, "ab cd", 0.9, placed, [(70.0, 0.0, 100.0)])) == 1
    (kept,) = pieces(ink, corners, "ab cd", 0.9, placed, [(15.0, 0.0, 100.0)])
    assert kept.text == "ab cd" and kept.box[0] == 15.0  # the box stops at the ruling
