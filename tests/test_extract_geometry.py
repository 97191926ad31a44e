"""Where tables and their cells are (``relay.extract.result``'s geometry): boxes as fractions
of the page as displayed, a cell per anchor with its spans, for a PDF's text layer, its
200-dpi scan and an uploaded image alike; and the grids, confidences and line_items the
geometry leaves as they were.

The PDFs are written by hand (``relay.devtools.sample_documents``), so where every piece of text
and every rule was drawn is known exactly; the scans are those PDFs rendered by PDFium.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import pdfplumber
import pypdfium2
import pytest
from PIL import Image

from relay.devtools.drawn_tables import EXPECTED, TABLE, draw_table, encode
from relay.devtools.sample_documents import pdf_page
from relay.extract import ExtractionError, extract_document
from relay.extract.geometry import Frame, keep, rectangles, tiling_problem
from relay.extract.loader import call_extractor
from relay.extract.pdf_layout import read_pdfium, read_plumber
from relay.extract.pdf_tables import page_tables
from relay.extract.result import Box, Cell, Table
from relay.extract.tables import clean, table_of_records

WIDTH, HEIGHT = 612.0, 792.0
SCAN_DPI = 200

# A ruled table: "Price per unit..." spans the last two columns (no rule between them in
# the heading row), "Fasteners" the two rows under it (no rule under it in its column).
RULED_X = [72.0, 172.0, 272.0, 372.0, 472.0]
RULED_Y = [100.0 + 24 * i for i in range(6)]
RULED: list[list[str | None]] = [
    ["Group", "Item", "Price per unit in euro and cent", None],
    ["Fasteners", "Bolt", "0.25", "0.20"],
    [None, "Nut", "0.05", "0.04"],
    ["Tools", "Hammer", "12.50", "11.00"],
    ["Paint", "White", "8.10", "7.90"],
]
RULED_SPANS = {(0, 2): (1, 2), (1, 0): (2, 1)}
# An unruled table under it: text only, columns apart by white.
UNRULED_X = [72.0, 220.0, 330.0]
UNRULED_TOP, UNRULED_PITCH = 330.0, 18.0
UNRULED: list[list[str | None]] = [
    ["Country", "Population", "Area"],
    ["Austria", "8.9", "83,879"],
    ["Belgium", "11.6", "30,528"],
    ["Cyprus", "0.9", "9,251"],
]


@dataclass(frozen=True)
class Drawn:
    """A piece of text drawn on a page: which table, its text, and a point inside its
    first letter as fractions of the page as displayed."""

    table: int
    text: str
    x: float
    y: float


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _text(x: float, top: float, text: str) -> str:
    """Helvetica 10 pt with its top at ``top`` (from the top of the page)."""
    return f"BT /F1 10 Tf {x} {HEIGHT - top - 10} Td ({_escape(text)}) Tj ET"


def _hline(x0: float, x1: float, top: float) -> str:
    return f"0.5 w {x0} {HEIGHT - top} m {x1} {HEIGHT - top} l S"


def _vline(x: float, top: float, bottom: float) -> str:
    return f"0.5 w {x} {HEIGHT - top} m {x} {HEIGHT - bottom} l S"


def _page() -> tuple[bytes, list[Drawn]]:
    """The ruled and the unruled table on one page, and where each text was drawn."""
    xs, ys = RULED_X, RULED_Y
    ops = [_hline(xs[0], xs[-1], y) for y in (ys[0], ys[1], ys[3], ys[4], ys[5])]
    ops.append(_hline(xs[1], xs[-1], ys[2]))
    ops += [_vline(x, ys[0], ys[-1]) for x in (xs[0], xs[1], xs[2], xs[4])]
    ops.append(_vline(xs[3], ys[1], ys[-1]))
    drawn: list[Drawn] = []
    for table, cells in ((0, _ruled_cells()), (1, _unruled_cells())):
        for text, x, top in cells:
            ops.append(_text(x, top, text))
            drawn.append(Drawn(table, text, (x + 2) / WIDTH, (top + 6) / HEIGHT))
    return pdf_page("\n".join(ops)), drawn


def _ruled_cells() -> list[tuple[str, float, float]]:
    return [
        (text, RULED_X[j] + 6, RULED_Y[i] + 7)
        for i, row in enumerate(RULED)
        for j, text in enumerate(row)
        if text
    ]


def _unruled_cells() -> list[tuple[str, float, float]]:
    return [
        (text, UNRULED_X[j], UNRULED_TOP + i * UNRULED_PITCH)
        for i, row in enumerate(UNRULED)
        for j, text in enumerate(row)
        if text
    ]


def _ruled_box(r: int, c: int, rows: int = 1, cols: int = 1) -> Box:
    """The ruled box of the cell at ``(r, c)``, as fractions of the page."""
    return (
        RULED_X[c] / WIDTH,
        RULED_Y[r] / HEIGHT,
        RULED_X[c + cols] / WIDTH,
        RULED_Y[r + rows] / HEIGHT,
    )


def _scan(content: bytes) -> Image.Image:
    """The first page of ``content`` rendered at 200 dpi, as a scanner would see it."""
    document = pypdfium2.PdfDocument(content)
    try:
        image: Image.Image = document[0].render(scale=SCAN_DPI / 72).to_pil()
        return image.convert("RGB")
    finally:
        document.close()


def _inside(box: Box | None, x: float, y: float) -> bool:
    return box is not None and box[0] <= x <= box[2] and box[1] <= y <= box[3]


def _within(inner: Box | None, outer: Box | None) -> bool:
    return (
        inner is not None
        and outer is not None
        and outer[0] <= inner[0] < inner[2] <= outer[2]
        and outer[1] <= inner[1] < inner[3] <= outer[3]
    )


def _squeezed(text: str | None) -> str:
    """``text`` without white space (OCR may read a space more or less)."""
    return "".join((text or "").split())


def _holder(table: Table, text: str) -> Cell:
    """The cell whose text, or one of its lines, is ``text`` (white space aside)."""
    for cell in table.grid_cells():
        found = table.rows[cell.row][cell.col]
        lines = [_squeezed(line) for line in (found or "").split("\n")]
        if _squeezed(text) in (_squeezed(found), *lines):
            return cell
    raise AssertionError(f"{text!r} is in no cell of {table.rows}")


def _assert_well_placed(table: Table) -> None:
    """The contract of every table with geometry: cells tile the grid, every box a proper
    box of fractions rounded to 4 decimals, within the table's box."""
    assert tiling_problem(table.grid_cells(), table.rows) is None
    boxes = [table.bbox, *(cell.bbox for cell in table.grid_cells())]
    for box in boxes:
        assert box is not None
        assert all(0 <= v <= 1 and round(v, 4) == v for v in box), box
        assert box[0] < box[2] and box[1] < box[3], box
    for cell in table.grid_cells():
        assert _within(cell.bbox, table.bbox), (cell, table.bbox)


def _assert_text_in_its_cell(tables: Sequence[Table], drawn: Sequence[Drawn]) -> None:
    for piece in drawn:
        cell = _holder(tables[piece.table], piece.text)
        assert _inside(cell.bbox, piece.x, piece.y), (piece, cell)


def _spans(table: Table) -> dict[tuple[int, int], tuple[int, int]]:
    return {
        (cell.row, cell.col): (cell.row_span, cell.col_span)
        for cell in table.grid_cells()
        if cell.row_span > 1 or cell.col_span > 1
    }


# --- a PDF's text layer and its scan ------------------------------------------------------


def test_cells_of_a_text_pdf_hold_their_text_and_ruled_cells_are_their_ruled_boxes() -> None:
    content, drawn = _page()
    result = extract_document(content, filename="t.pdf", content_type="", fields=[])
    ruled, unruled = result.tables
    assert (ruled.rows, unruled.rows) == (RULED, UNRULED)
    for table in result.tables:
        _assert_well_placed(table)
    _assert_text_in_its_cell(result.tables, drawn)
    assert _spans(ruled) == RULED_SPANS and _spans(unruled) == {}
    for cell in ruled.grid_cells():
        expected = _ruled_box(cell.row, cell.col, cell.row_span, cell.col_span)
        assert cell.bbox == pytest.approx(expected, abs=1e-4), cell
    # An unruled table's cells tile it: bands meet midway, the outer ones at the text.
    assert unruled.bbox is not None and unruled.bbox[0] == round(UNRULED_X[0] / WIDTH, 4)
    boxes = {(cell.row, cell.col): cell.bbox for cell in unruled.grid_cells()}
    corner, below, beside = boxes[(0, 0)], boxes[(1, 0)], boxes[(0, 1)]
    assert corner is not None and below is not None and beside is not None
    assert corner[3] == below[1] and corner[2] == beside[0]


def test_a_200_dpi_scan_has_the_same_cells_where_the_text_layer_has_them() -> None:
    content, drawn = _page()
    text_layer = extract_document(content, filename="t.pdf", content_type="", fields=[])
    scan = encode(_scan(content), "PDF", resolution=float(SCAN_DPI))
    with pdfplumber.open(io.BytesIO(scan)) as document:
        assert not document.pages[0].chars, "the scan must have no text layer"
    result = extract_document(scan, filename="scan.pdf", content_type="", fields=[])
    assert len(result.tables) == 2
    ruled = result.tables[0]
    assert [[_squeezed(c) if c else c for c in row] for row in ruled.rows] == [
        [_squeezed(c) if c else c for c in row] for row in RULED
    ]
    assert ruled.confidence is not None
    for table in result.tables:
        _assert_well_placed(table)
    _assert_text_in_its_cell(result.tables, drawn)
    assert _spans(ruled) == RULED_SPANS
    # The same boxes as the text layer's (the ruling lines found in the pixels), in the
    # same coordinates: a box drawn over the page lands on the same cell either way.
    assert [(c.row, c.col) for c in ruled.grid_cells()] == [
        (c.row, c.col) for c in text_layer.tables[0].grid_cells()
    ]
    for got, want in zip(ruled.grid_cells(), text_layer.tables[0].grid_cells(), strict=True):
        assert got.bbox == pytest.approx(want.bbox, abs=0.005), (got, want)


def test_pdfminer_places_cells_where_pdfium_does() -> None:
    content, _ = _page()
    document = pypdfium2.PdfDocument(content)
    try:
        fast = page_tables(read_pdfium(document[0]))
    finally:
        document.close()
    with pdfplumber.open(io.BytesIO(content)) as opened:
        careful = page_tables(read_plumber(opened.pages[0]))
    assert [t.rows for t in careful] == [t.rows for t in fast]
    for a, b in zip(careful, fast, strict=True):
        assert a.bbox == pytest.approx(b.bbox, abs=0.005)
        for x, y in zip(a.grid_cells(), b.grid_cells(), strict=True):
            assert (x.row, x.col, x.row_span, x.col_span) == (y.row, y.col, y.row_span, y.col_span)
            assert x.bbox == pytest.approx(y.bbox, abs=0.005)


# --- the page as displayed: /Rotate, CropBox; an image's EXIF orientation ---------------

TURNED_X = [100.0 + 120 * j for j in range(4)]  # on the page as displayed
TURNED_Y = [100.0 + 24 * i for i in range(4)]
ITEMS = [["Item", "Qty", "Price"], ["Bolt", "10", "0.25"], ["Nut", "200", "0.05"]]
CROP = (20.0, 30.0, 592.0, 772.0)
# The page turned 90 degrees and cropped, as displayed: x from 30 to 772, y from 20 to 592
# (user space's y across, its x down).
SHOWN = Frame(30.0, 20.0, 772.0, 592.0)


def _turned_page() -> bytes:
    """ITEMS ruled, drawn to read upright on a page with ``/Rotate 90`` and a CropBox:
    a point shown at (x, y) from the top-left is (y, x) in the page's user space."""
    ops = [f"0.5 w {y} {TURNED_X[0]} m {y} {TURNED_X[-1]} l S" for y in TURNED_Y]
    ops += [f"0.5 w {TURNED_Y[0]} {x} m {TURNED_Y[-1]} {x} l S" for x in TURNED_X]
    for i, row in enumerate(ITEMS):
        for j, text in enumerate(row):
            x, top = TURNED_X[j] + 6, TURNED_Y[i] + 7
            ops.append(f"BT /F1 10 Tf 0 1 -1 0 {top + 10} {x} Tm ({text}) Tj ET")
    return pdf_page("\n".join(ops), cropbox=CROP, rotate=90)


def _turned_box(r: int, c: int) -> Box | None:
    return SHOWN.box(TURNED_X[c], TURNED_Y[r], TURNED_X[c + 1], TURNED_Y[r + 1])


def test_boxes_are_on_the_page_as_displayed_rotated_and_cropped() -> None:
    content = _turned_page()
    (table,) = extract_document(content, filename="t.pdf", content_type="", fields=[]).tables
    assert table.rows == ITEMS
    _assert_well_placed(table)
    for cell in table.grid_cells():
        assert cell.bbox == pytest.approx(_turned_box(cell.row, cell.col), abs=1e-4)
    # The page rendered (PDFium turns and crops it as a viewer does) and uploaded as a PNG:
    # read by OCR, its cells are where the text layer's are.
    image = _scan(content)
    assert image.width > image.height, "the render is the page as displayed (turned)"
    png = encode(image, "PNG")
    (read,) = extract_document(png, filename="t.png", content_type="", fields=[]).tables
    assert read.rows == ITEMS
    _assert_well_placed(read)
    for cell in read.grid_cells():
        assert cell.bbox == pytest.approx(_turned_box(cell.row, cell.col), abs=0.005)


def test_an_image_is_measured_after_its_exif_orientation() -> None:
    """A photo stored sideways with an EXIF orientation is read upright (``image.py``), and
    its boxes are fractions of the upright image."""
    upright = draw_table()
    stored = upright.rotate(90, expand=True)  # the pixels as a phone stores them
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: turn 90 degrees clockwise to show
    content = encode(stored, "PNG", exif=exif)
    result = extract_document(content, filename="photo.png", content_type="", fields=[])
    (table,) = result.tables
    assert table.rows == TABLE and result.line_items == EXPECTED
    _assert_well_placed(table)
    shown = Frame(0, 0, upright.width, upright.height)
    margin, (width, height) = 40, (220, 70)  # draw_table's defaults
    for cell in table.grid_cells():
        x0, top = margin + cell.col * width, margin + cell.row * height
        assert cell.bbox == pytest.approx(shown.box(x0, top, x0 + width, top + height), abs=0.01)


# --- what the geometry leaves as it was ---------------------------------------------------


def test_rows_confidence_and_line_items_are_what_they_were() -> None:
    """The grids, confidences and line_items the other tests expect, with geometry on:
    ``to_json`` adds ``bbox`` and ``cells`` beside them and changes nothing in them."""
    content, _ = _page()
    result = extract_document(content, filename="t.pdf", content_type="", fields=[])
    assert [t.to_json()["rows"] for t in result.tables] == [RULED, UNRULED]
    assert [t.to_json()["confidence"] for t in result.tables] == [None, None]
    assert result.line_items == [
        {
            "Group": "Fasteners",
            "Item": "Bolt",
            "Price per unit in euro and cent": "0.25",
            "column_4": "0.20",
        },
        {
            "Group": None,
            "Item": "Nut",
            "Price per unit in euro and cent": "0.05",
            "column_4": "0.04",
        },
        {
            "Group": "Tools",
            "Item": "Hammer",
            "Price per unit in euro and cent": "12.50",
            "column_4": "11.00",
        },
        {
            "Group": "Paint",
            "Item": "White",
            "Price per unit in euro and cent": "8.10",
            "column_4": "7.90",
        },
    ]
    for table in result.tables:
        value = table.to_json()
        assert list(value) == ["page", "rows", "confidence", "bbox", "cells"]
        assert Table(table.page, table.rows, table.confidence) == table  # geometry aside


def test_a_csv_table_has_no_geometry_and_stores_none() -> None:
    table = table_of_records([{"sku": "A", "qty": "1"}])
    assert table.to_json() == {
        "page": 1,
        "rows": [["sku", "qty"], ["A", "1"]],
        "confidence": None,
        "bbox": None,
        "cells": [
            {"row": r, "col": c, "row_span": 1, "col_span": 1, "bbox": None}
            for r in range(2)
            for c in range(2)
        ],
    }
    # Stored, plain cells are left out (relay.state.store puts them back): a CSV of a million
    # values does not store a million cells that say nothing.
    assert "cells" not in table.stored_json()


# --- cleaning keeps cells and rows together -----------------------------------------------


def test_cleaning_drops_blank_rows_from_the_cells_too() -> None:
    """A span across a dropped blank row is shortened; a cell anchored in a dropped row
    starts at its next kept row; a cell left with no row goes."""
    box: Box = (0.1, 0.1, 0.2, 0.2)
    raw = Table(
        1,
        [["a", "b"], [None, " "], ["c", None], [" ", None]],
        None,
        None,
        (
            Cell(0, 0, 3, 1, box),  # a: down to c's row, across the blank row
            Cell(0, 1, 1, 1, box),
            Cell(1, 1, 3, 1, (0.2, 0.2, 0.3, 0.5)),  # anchored in the blank row
            Cell(3, 0, 1, 1, box),  # only in the blank last row
        ),
    )
    cleaned = clean(raw)
    assert cleaned is not None
    assert cleaned.rows == [["a", "b"], ["c", None]]
    assert cleaned.grid_cells() == (
        Cell(0, 0, 2, 1, box),
        Cell(0, 1, 1, 1, box),
        Cell(1, 1, 1, 1, (0.2, 0.2, 0.3, 0.5)),
    )
    assert cleaned.bbox == (0.1, 0.1, 0.3, 0.5)


def test_a_span_that_covers_a_text_cell_stops_there_and_the_rest_is_a_cell_of_its_own() -> None:
    # An L-shaped merge: the first position of its name starts a rectangle (its run along
    # the row, then the rows below where the whole run has the name), the rest of it is a
    # cell of its own.
    owner = [["a", "a", "b"], ["a", "c", "c"]]
    assert rectangles(owner) == [(0, 0, 1, 2), (0, 2, 1, 1), (1, 0, 1, 1), (1, 1, 1, 2)]
    assert rectangles([["a", "a"], ["a", "a"], ["b", "a"]]) == [
        (0, 0, 2, 2),
        (2, 0, 1, 1),
        (2, 1, 1, 1),
    ]
    assert keep([Cell(0, 0, 2, 3)], [1], [0, 2]) == (Cell(0, 0, 1, 2),)
    assert keep([Cell(0, 0, 1, 1)], [1], [0]) == ()


@pytest.mark.parametrize(
    ("cells", "problem"),
    [
        ([Cell(0, 0), Cell(0, 1), Cell(1, 0), Cell(1, 1)], None),
        ([Cell(0, 0, 1, 2), Cell(1, 0), Cell(1, 1)], "which has text"),
        ([Cell(0, 0), Cell(0, 1), Cell(1, 0)], "do not cover every position"),
        ([Cell(0, 0), Cell(0, 1, 2, 1), Cell(1, 0), Cell(1, 1)], "two cells cover"),
        ([Cell(0, 1), Cell(0, 0), Cell(1, 0), Cell(1, 1)], "row-major order"),
        ([Cell(0, 0), Cell(0, 1, 1, 2), Cell(1, 0), Cell(1, 1)], "goes past the grid"),
    ],
)
def test_tiling_problems_are_named(cells: list[Cell], problem: str | None) -> None:
    found = tiling_problem(cells, [["a", "b"], ["c", None]])
    assert found == problem if problem is None else problem in (found or "")


def test_a_frame_clamps_rounds_and_leaves_nothing_off_the_page() -> None:
    page = Frame(0, 0, 612, 792)
    assert page.box(-10, 0, 306, 396) == (0.0, 0.0, 0.5, 0.5)
    assert page.box(100, 100, 200, 200) == (0.1634, 0.1263, 0.3268, 0.2525)
    assert page.box(700, 10, 800, 20) is None  # right of the page
    assert page.box(10, 10, 10, 20) is None  # no width


# --- plug-ins -----------------------------------------------------------------------------


def _plugin_table(**geometry: object) -> dict[str, object]:
    return {"page": 1, "rows": [["Total", None], ["1", "2"]], "confidence": None, **geometry}


def _plugin(table: dict[str, object]) -> object:
    def extractor(content: bytes, /, **_: object) -> object:
        return {"line_items": [{"a": "1"}], "tables": [table]}

    return extractor


def _call(table: dict[str, object]) -> Table:
    extraction = call_extractor(
        _plugin(table),  # type: ignore[arg-type]
        b"x",
        filename="x",
        content_type="",
        fields=[],
    )
    (found,) = extraction.tables
    return found


def test_a_plugin_may_give_its_tables_geometry_or_not() -> None:
    cells = [
        {"row": 0, "col": 0, "col_span": 2, "bbox": [0.1, 0.1, 0.5, 0.2]},
        {"row": 1, "col": 0, "row_span": 1, "col_span": 1, "bbox": None},
        {"row": 1, "col": 1},
    ]
    table = _call(_plugin_table(bbox=[0.1, 0.1, 0.5, 0.3], cells=cells))
    assert table.bbox == (0.1, 0.1, 0.5, 0.3)
    assert table.grid_cells() == (
        Cell(0, 0, 1, 2, (0.1, 0.1, 0.5, 0.2)),
        Cell(1, 0),
        Cell(1, 1),
    )
    bare = _call(_plugin_table())
    assert bare.bbox is None and bare.grid_cells() == tuple(
        Cell(r, c) for r in range(2) for c in range(2)
    )


@pytest.mark.parametrize(
    ("geometry", "message"),
    [
        ({"bbox": [0.5, 0.1, 0.4, 0.3]}, "whose bbox is not"),
        ({"bbox": [0, 0, 1, 1.5]}, "whose bbox is not"),
        ({"cells": "all"}, "cells is not a list"),
        ({"cells": [{"row": 0, "col": 0}]}, "do not cover every position"),
        ({"cells": [{"row": True, "col": 0}]}, "not an integer"),
        (
            {"cells": [{"row": 0, "col": 0, "bbox": [1, 2]}, {"row": 0, "col": 1}]},
            "bbox that is not",
        ),
        (
            {
                "cells": [
                    {"row": 0, "col": 0, "row_span": 2},
                    {"row": 0, "col": 1},
                    {"row": 1, "col": 1},
                ]
            },
            "which has text",
        ),
    ],
)
def test_a_plugin_table_whose_geometry_breaks_the_contract_is_extraction_error(
    geometry: dict[str, object], message: str
) -> None:
    with pytest.raises(ExtractionError) as caught:
        _call(_plugin_table(**geometry))
    assert caught.value.code == "extraction_error"
    assert message in caught.value.message
