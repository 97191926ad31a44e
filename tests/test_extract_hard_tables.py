"""Tables a reader finds hard: turned a quarter on the page (the page's ``/Rotate``, or text
drawn turned on an upright page, either way, ruled and unruled), in a right-to-left script
(Arabic), and with a heading block over their columns.

Every PDF is written in the test (``relay.devtools.sample_documents``; Arabic in DejaVu Sans,
embedded, ``relay.devtools.unicode_pdf``), so the cells and where they are drawn are known.
Both page readers (PDFium, the fast path, and pdfminer, the careful one) are checked.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import pdfplumber
import pypdfium2
import pytest

from relay.devtools.drawn_tables import font_path
from relay.devtools.sample_documents import pdf_page, table_ops
from relay.devtools.unicode_pdf import FontPage, TrueType, shape_arabic, unicode_pdf
from relay.extract import extract_document
from relay.extract.headings import joined
from relay.extract.pdf_layout import read_pdfium, read_plumber
from relay.extract.pdf_tables import page_tables
from relay.extract.result import Cell, Table

ROWS = [
    ["Region", "Units sold", "Price"],
    ["North", "12", "4.50"],
    ["South", "7", "19.25"],
    ["East", "305", "0.75"],
]
# table_ops draws its grid from (72, 500) (PDF user space, y up): 120 x 20 pt cells, the
# text of a cell 4 pt in from its left side, its baseline 6 pt over the cell's bottom.
LEFT, TOP, WIDTH, HEIGHT = 72.0, 500.0, 120.0, 20.0
Point = tuple[float, float]


def _both_readers(content: bytes) -> tuple[list[Table], list[Table]]:
    """The page's tables as PDFium reads it and as pdfminer reads it."""
    document = pypdfium2.PdfDocument(content)
    try:
        page = document[0]
        fast = page_tables(read_pdfium(page))
        page.close()
    finally:
        document.close()
    with pdfplumber.open(io.BytesIO(content)) as opened:
        careful = page_tables(read_plumber(opened.pages[0]))
    return fast, careful


def _inside(box: tuple[float, ...] | None, point: Point) -> bool:
    assert box is not None
    x0, y0, x1, y1 = box
    return x0 < point[0] < x1 and y0 < point[1] < y1


# --- turned a quarter -------------------------------------------------------------------

# How the table is turned: the ``cm`` that draws it (None: as it is) and the page's
# /Rotate; and where a point of the drawing (user space before the cm) is on the page as
# displayed, as fractions from the top-left corner.
TURNS: dict[str, tuple[str | None, int, float, float, Callable[[float, float], Point]]] = {
    # text turned clockwise on an upright portrait page: its baseline runs down the page
    "text-down": ("0 -1 1 0 0 792", 0, 612, 792, lambda x, y: (y / 612, x / 792)),
    # text turned counter-clockwise: its baseline runs up the page
    "text-up": ("0 1 -1 0 612 0", 0, 612, 792, lambda x, y: (1 - y / 612, 1 - x / 792)),
    # upright text on a page shown turned by its /Rotate (displayed 792 wide, 612 high)
    "rotate-90": (None, 90, 792, 612, lambda x, y: (y / 792, x / 612)),
    "rotate-270": (None, 270, 792, 612, lambda x, y: (1 - y / 792, 1 - x / 612)),
}


def _turned_pdf(turn: str, ruled: bool) -> bytes:
    cm, rotate, *_ = TURNS[turn]
    ops = table_ops(ROWS, top=TOP)
    if not ruled:
        ops = "\n".join(op for op in ops.splitlines() if not op.endswith(" l S"))
    if cm is not None:
        ops = f"q {cm} cm\n{ops}\nQ"
    return pdf_page(ops, rotate=rotate)


def _text_middle(turn: str, row: int, col: int, text: str) -> Point:
    """The middle of a cell's text on the page as displayed (fractions)."""
    x = LEFT + col * WIDTH + 4 + len(text) * 2.5  # Helvetica 10 pt: ~5 pt a character
    y = TOP - (row + 1) * HEIGHT + 6 + 3.5
    return TURNS[turn][4](x, y)


@pytest.mark.parametrize("ruled", [True, False], ids=["ruled", "unruled"])
@pytest.mark.parametrize("turn", list(TURNS))
def test_a_table_turned_a_quarter_is_read_upright(turn: str, ruled: bool) -> None:
    """A landscape table on a portrait page (turned either way, by the page's /Rotate or
    drawn turned): read as a reader who turns the page sees it, each cell's box round its
    text on the page as displayed, by both page readers alike."""
    content = _turned_pdf(turn, ruled)
    result = extract_document(content, filename="t.pdf", content_type="", fields=[])
    (table,) = result.tables
    assert table.rows == ROWS
    assert result.line_items[0] == {"Region": "North", "Units sold": "12", "Price": "4.50"}
    for cell in table.grid_cells():
        text = ROWS[cell.row][cell.col]
        assert _inside(cell.bbox, _text_middle(turn, cell.row, cell.col, text)), (cell, text)
    # the table's box is as the page shows it: turned, the table is tall, not wide
    assert table.bbox is not None
    width = (table.bbox[2] - table.bbox[0]) * TURNS[turn][2]
    height = (table.bbox[3] - table.bbox[1]) * TURNS[turn][3]
    assert height > 3 * width
    fast, careful = _both_readers(content)
    assert [t.rows for t in fast] == [t.rows for t in careful] == [ROWS]
    for a, b in zip(fast[0].grid_cells(), careful[0].grid_cells(), strict=True):
        assert a.bbox == pytest.approx(b.bbox, abs=0.01)


def test_turned_and_upright_tables_on_one_page_are_each_read_in_their_direction() -> None:
    """A turned table beside an upright one and an upright title: both tables, top to
    bottom on the page as displayed; the upright one's turned headings make no table."""
    upright = [["Item", "Qty"], ["Bolt", "10"], ["Nut", "200"]]
    ops = [table_ops(upright, top=700)]  # upright, at the top of the page
    # turned headings over the upright table's columns, as reports print them
    ops += [f"BT /F1 8 Tf 0 1 -1 0 {x} 705 Tm (Column) Tj ET" for x in (100, 220)]
    ops.append("BT /F1 14 Tf 72 560 Td (Annex: sales by region) Tj ET")
    ops.append(f"q 0 1 -1 0 612 0 cm\n{table_ops(ROWS, top=TOP)}\nQ")  # turned, lower down
    content = pdf_page("\n".join(ops))
    for tables in _both_readers(content):
        assert [t.rows for t in tables] == [upright, ROWS]
        assert tables[0].bbox is not None and tables[1].bbox is not None
        assert tables[0].bbox[3] < tables[1].bbox[1]  # top to bottom as displayed


# --- right to left ----------------------------------------------------------------------

# Logical order (as written and read): city, population, area; the first column at the
# right of the page, as an Arabic table is set.
ARABIC = [
    ["المدينة", "السكان", "المساحة كم"],
    ["دمشق", "2,079,000", "105"],
    ["بيروت", "361,366", "20"],
    ["مدينة الكويت", "60,064", "200"],
]
# What relay returns: the columns left to right as on the page, each cell's text in
# logical order.
ARABIC_READ = [row[::-1] for row in ARABIC]


def _visual(text: str) -> str:
    """``text`` as its glyphs stand on the page, left to right: the words right to left,
    an Arabic word's letters shaped and right to left, a number as it is."""
    words = [word if word[0].isdigit() else shape_arabic(word)[::-1] for word in text.split()]
    return " ".join(reversed(words))


def _arabic_pdf(*, ruled: bool, letters: bool) -> bytes:
    font = TrueType(font_path())
    page = FontPage()
    columns = [90.0, 110.0, 140.0]  # left to right on the page
    xs = [72.0]
    for width in columns:
        xs.append(xs[-1] + width)
    top, pitch = 100.0, 22.0
    for i, row in enumerate(ARABIC_READ):
        for j, text in enumerate(row):
            glyphs = _visual(text)
            right = xs[j + 1] - 5  # right-aligned in its column
            page.text(right - font.text_width(glyphs, 11), top + i * pitch + 5, glyphs, 11)
    if ruled:
        bottom = top + len(ARABIC) * pitch
        page.ops += [
            f"0.5 w {xs[0]} {792 - y} m {xs[-1]} {792 - y} l S"
            for y in (top + i * pitch for i in range(len(ARABIC) + 1))
        ]
        page.ops += [f"0.5 w {x} {792 - top} m {x} {792 - bottom} l S" for x in xs]
    return unicode_pdf([page], font_path(), letters=letters)


@pytest.mark.parametrize("letters", [True, False], ids=["to-letters", "to-forms"])
@pytest.mark.parametrize("ruled", [True, False], ids=["ruled", "unruled"])
def test_an_arabic_table_is_read_in_logical_order(ruled: bool, letters: bool) -> None:
    """Arabic drawn right to left, shaped, its text mapped to the letters or to their
    presentation forms (producers do both): every cell's text in logical order, the
    columns left to right as on the page; numbers keep their digits' order."""
    content = _arabic_pdf(ruled=ruled, letters=letters)
    result = extract_document(content, filename="ar.pdf", content_type="", fields=[])
    assert [t.rows for t in result.tables] == [ARABIC_READ]
    assert result.line_items[0] == dict(zip(ARABIC_READ[0], ARABIC_READ[1], strict=True))
    fast, careful = _both_readers(content)
    assert [t.rows for t in fast] == [t.rows for t in careful] == [ARABIC_READ]


# --- a heading block --------------------------------------------------------------------

HEADED: list[list[str | None]] = [
    ["", "Population (millions)", None, "Area (km2)", ""],
    ["Country", "2010", "2020", "2010", "2020"],
    ["Austria", "8.4", "8.9", "83,879", "83,871"],
    ["Belgium", "10.9", "11.6", "30,528", "30,530"],
    ["Cyprus", "0.8", "0.9", "9,251", "9,250"],
]


def _text_at(x: float, top: float, text: str) -> str:
    return f"BT /F1 10 Tf {x} {792 - top - 10} Td ({text}) Tj ET"


@pytest.mark.parametrize("between", [None, "Europe"], ids=["under", "group-line-between"])
def test_a_heading_block_stays_with_its_table(between: str | None) -> None:
    """Headings over pairs of columns, a line of sub-headings set over the figures' left
    edges (not their columns' white), then the body, and maybe a group label between:
    one table, the headings over the body's columns (a heading over two spans them)."""
    xs = [72.0, 200.0, 270.0, 360.0, 430.0]
    ops = [_text_at(215, 100, "Population (millions)"), _text_at(370, 100, "Area (km2)")]
    ops += [_text_at(x - 6, 116, text or "") for x, text in zip(xs, HEADED[1], strict=True)]
    top = 140.0
    if between is not None:
        ops.append(_text_at(72, 134, between))
        top = 152.0
    for i, row in enumerate(HEADED[2:]):
        ops += [_text_at(x, top + 16 * i, text or "") for x, text in zip(xs, row, strict=True)]
    content = pdf_page("\n".join(ops))
    result = extract_document(content, filename="t.pdf", content_type="", fields=[])
    group: list[list[str | None]] = [[between, "", "", "", ""]] if between else []
    expected = HEADED[:2] + group + HEADED[2:]
    assert [t.rows for t in result.tables] == [expected]
    (table,) = result.tables
    spans = {(c.row, c.col): (c.row_span, c.col_span) for c in table.grid_cells()}
    assert spans[(0, 1)] == (1, 2)  # "Population (millions)" over the two 2010/2020 columns
    assert spans[(0, 3)] == (1, 1)  # "Area (km2)" starts over its first column only


def _table(rows: list[list[str | None]], top: float, xs: list[float], pitch: float) -> Table:
    """A table whose row ``i`` runs from ``top + i * pitch``, its columns between ``xs``."""
    cells = tuple(
        Cell(i, j, 1, 1, (xs[j], top + i * pitch, xs[j + 1], top + (i + 1) * pitch))
        for i in range(len(rows))
        for j in range(len(rows[0]))
    )
    box = (xs[0], top, xs[-1], top + len(rows) * pitch)
    return Table(1, rows, None, box, cells)


def test_only_a_heading_block_is_joined_to_the_table_under_it() -> None:
    """Joined: headings (words, years) close above a table, over its columns. Kept
    apart: a table of figures above another, headings far above, headings whose cells
    fall two in one column."""
    xs = [0.1, 0.3, 0.5, 0.7]
    body = _table(
        [["North", "12", "4.5"], ["South", "7", "9.25"], ["East", "3", "1.0"]], 0.3, xs, 0.02
    )
    heading = _table([["Region", "2019", "2020"]], 0.27, xs, 0.02)
    (one,) = joined([heading, body])
    assert one.rows == [["Region", "2019", "2020"], *body.rows]
    assert one.bbox == (0.1, 0.27, 0.7, 0.36)
    figures = _table([["West", "5", "2.0"]], 0.27, xs, 0.02)
    far = _table([["Region", "2019", "2020"]], 0.1, xs, 0.02)
    crowded = _table([["Region", "2019", "2020"]], 0.27, [0.1, 0.3, 0.35, 0.7], 0.02)
    for upper in (figures, far, crowded):
        assert joined([upper, body]) == [upper, body]
