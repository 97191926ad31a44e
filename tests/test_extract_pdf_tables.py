"""The PDF table finder (``relay.extract.pdf_tables`` over ``relay.extract.pdf_layout``):
ruled, partly ruled and unruled tables found, several tables kept apart, prose left alone.

Every PDF is written by hand in the test (Helvetica text and drawing operators placed at
known points, ``relay.devtools.sample_documents``), so the expected cells are known exactly.
"""

from __future__ import annotations

import io
import random
from collections.abc import Sequence

import pdfplumber
import pypdfium2
import pytest

from relay.devtools.sample_documents import pdf, pdf_bomb, table_ops
from relay.extract import ExtractionError, extract, extract_document
from relay.extract.pdf import PDFIUM_MAX_CONTENT, _content_size, extract_pdf
from relay.extract.pdf_layout import Char, PageLayout, Rule, read_pdfium, read_plumber
from relay.extract.pdf_tables import find_tables
from relay.extract.result import Table

PAGE_HEIGHT = 792.0
MAX_PIXELS = 40_000_000

ITEMS = [
    ["Item", "Qty", "Price"],
    ["Bolt", "10", "0.25"],
    ["Nut", "200", "0.05"],
    ["Washer", "5", "1.10"],
]
COUNTRIES = [
    ["Country", "Population", "Area"],
    ["Austria", "8.9", "83,879"],
    ["Belgium", "11.6", "30,528"],
    ["Cyprus", "0.9", "9,251"],
]


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def text_at(x: float, top: float, text: str, size: float = 10.0) -> str:
    """Helvetica ``text`` with its baseline ``size`` points below ``top`` (from the top)."""
    return f"BT /F1 {size} Tf {x} {PAGE_HEIGHT - top - size} Td ({_escape(text)}) Tj ET"


def hline(x0: float, x1: float, top: float) -> str:
    return f"0.5 w {x0} {PAGE_HEIGHT - top} m {x1} {PAGE_HEIGHT - top} l S"


def bar(x0: float, x1: float, top: float, thickness: float = 0.8) -> str:
    """A rule drawn as a thin filled rectangle, as many producers do."""
    return f"{x0} {PAGE_HEIGHT - top - thickness} {x1 - x0} {thickness} re f"


def vbar(x: float, top: float, bottom: float, thickness: float = 0.8) -> str:
    return f"{x} {PAGE_HEIGHT - bottom} {thickness} {bottom - top} re f"


def cells(
    rows: Sequence[Sequence[str]], xs: Sequence[float], top: float, pitch: float = 16.0
) -> list[str]:
    """``rows`` as text only, column ``j`` starting at ``xs[j]``, a row every ``pitch``."""
    return [
        text_at(xs[j], top + i * pitch, cell)
        for i, row in enumerate(rows)
        for j, cell in enumerate(row)
        if cell
    ]


def paragraph(top: float, lines: Sequence[str], x: float = 72.0) -> list[str]:
    return [text_at(x, top + i * 14.0, line) for i, line in enumerate(lines)]


PROSE = [
    "Dear customer, thank you for your order of last week. The goods you asked",
    "for left our warehouse this morning and should reach you within three days.",
    "Should anything be missing, please write to us and we will set it right at",
    "once. We look forward to serving you again and wish you a pleasant season.",
]


def _table(page: int, rows: Sequence[Sequence[str | None]], confidence: None = None) -> Table:
    return Table(page, [list(row) for row in rows], confidence)


def tables_of(*pages: Sequence[str]) -> list[Table]:
    return extract_pdf(pdf(["\n".join(ops) for ops in pages]), max_pixels=MAX_PIXELS)


def test_a_ruled_table_comes_back_cell_for_cell() -> None:
    found = tables_of([table_ops(ITEMS)])
    assert found == [_table(1, ITEMS, None)]


def test_rules_drawn_as_thin_filled_rectangles_make_a_grid() -> None:
    xs, ys = [72.0, 192.0, 262.0, 342.0], [100.0 + 20 * i for i in range(len(ITEMS) + 1)]
    ops = [bar(xs[0], xs[-1], y) for y in ys] + [vbar(x, ys[0], ys[-1]) for x in xs]
    ops += cells(ITEMS, [x + 4 for x in xs], ys[0] + 5, pitch=20.0)
    assert tables_of(ops) == [_table(1, ITEMS)]


def test_a_table_with_only_horizontal_rules_under_its_heading() -> None:
    # booktabs style: a rule above, one under the header, one at the bottom; no verticals
    xs = [72.0, 200.0, 300.0]
    ops = [hline(70, 380, 96), hline(70, 380, 114), hline(70, 380, 100 + 16 * len(COUNTRIES))]
    ops += cells(COUNTRIES, xs, 100.0)
    assert tables_of(ops) == [_table(1, COUNTRIES)]


def test_a_header_of_two_lines_between_rules_is_one_row() -> None:
    xs = [72.0, 200.0, 300.0]
    ops = [hline(70, 380, 96), hline(70, 380, 130), hline(70, 380, 134 + 16 * 3)]
    ops += cells([["Country", "Population", "Area"], ["", "(millions)", "(km2)"]], xs, 100.0)
    ops += cells(COUNTRIES[1:], xs, 134.0)
    assert tables_of(ops) == [
        _table(1, [["Country", "Population\n(millions)", "Area\n(km2)"], *COUNTRIES[1:]])
    ]


def test_rules_between_rows_keep_a_wrapped_cell_in_its_row() -> None:
    # a label wrapped onto a second line that starts in capitals, like a new row would:
    # only the rules between the rows tell it apart
    xs = [72.0, 250.0, 330.0]
    rows = [["Part", "Qty", "Price"], ["Stainless bolt", "10", "0.25"], ["Nut", "20", "0.05"]]
    ops = [*cells(rows[:2], xs, 100.0), text_at(72, 132, "With Hex Head")]
    ops += cells(rows[2:], xs, 152.0)
    ops += [hline(70, 380, y) for y in (96, 114, 147, 168)]
    assert tables_of(ops) == [
        _table(1, [rows[0], ["Stainless bolt\nWith Hex Head", "10", "0.25"], rows[2]])
    ]
    ops = ops[:-4]  # without the rules the second line is a row of its own
    assert tables_of(ops) == [_table(1, [rows[0], rows[1], ["With Hex Head", "", ""], rows[2]])]


def test_rows_shaded_in_turn_without_rules_are_one_table() -> None:
    xs = [72.0, 220.0, 330.0]
    ops = [
        f"0.9 g 70 {PAGE_HEIGHT - 100 - 16 * i - 14} 300 16 re f 0 g"
        for i in range(1, len(COUNTRIES), 2)
    ]
    ops += cells(COUNTRIES, xs, 100.0)
    assert tables_of(ops) == [_table(1, COUNTRIES)]


def test_an_unruled_table_is_found_by_its_columns() -> None:
    ops = paragraph(60.0, PROSE[:2]) + cells(COUNTRIES, [72.0, 220.0, 330.0], 120.0)
    assert tables_of(ops) == [_table(1, COUNTRIES)]


def test_right_aligned_figures_stay_in_their_column() -> None:
    # numbers set flush right end on one x; their left edges wander
    rows = [["Year", "Revenue", "Staff"], ["2021", "1,250.5", "12"], ["2022", "980.0", "7"]]
    ops = []
    for i, row in enumerate(rows):
        top = 100.0 + 16 * i
        ops.append(text_at(72, top, row[0]))
        ops.append(text_at(250 - 5.6 * len(row[1]), top, row[1]))
        ops.append(text_at(340 - 5.6 * len(row[2]), top, row[2]))
    assert tables_of(ops) == [_table(1, rows)]


def test_two_different_tables_on_one_page_are_kept_apart_in_reading_order() -> None:
    ops = [table_ops(ITEMS, top=720.0)]  # ruled, at the top of the page
    ops += paragraph(200.0, PROSE)
    ops += cells(COUNTRIES, [72.0, 220.0, 330.0], 300.0)  # unruled, further down
    assert tables_of(ops) == [_table(1, ITEMS), _table(1, COUNTRIES)]


def test_a_bulleted_item_just_above_a_table_stays_out_of_it() -> None:
    ops = [text_at(72, 60, "-"), text_at(90, 60, PROSE[0]), text_at(90, 74, PROSE[1][:30])]
    ops += [text_at(72, 96, "Table 1: Countries and their population")]
    ops += cells(COUNTRIES, [72.0, 220.0, 330.0], 112.0)
    assert tables_of(ops) == [_table(1, COUNTRIES)]


def test_two_unruled_tables_apart_by_a_paragraph_are_two_tables() -> None:
    ops = cells(ITEMS, [72.0, 220.0, 330.0], 80.0)
    ops += paragraph(170.0, PROSE)
    ops += cells(COUNTRIES, [72.0, 200.0, 300.0], 260.0)
    assert tables_of(ops) == [_table(1, ITEMS), _table(1, COUNTRIES)]


def test_two_unruled_tables_under_one_another_with_a_title_between_are_two() -> None:
    ops = cells(ITEMS, [72.0, 220.0, 330.0], 100.0)
    below = 100.0 + 16 * len(ITEMS) + 10  # a title stands apart from the rows above it
    ops += [text_at(72, below, "Table 2: Countries")]
    ops += cells(COUNTRIES, [72.0, 180.0, 300.0], below + 18)
    assert tables_of(ops) == [_table(1, ITEMS), _table(1, COUNTRIES)]


def test_a_table_in_one_column_of_a_two_column_page_leaves_the_other_column_out() -> None:
    text = " ".join(PROSE) * 3
    lines = [text[i : i + 46] for i in range(0, 46 * 40, 46)]
    ops = paragraph(60.0, lines[:8], x=56.0)
    ops += cells(ITEMS, [56.0, 150.0, 210.0], 60.0 + 14 * 8 + 6)
    ops += paragraph(60.0 + 14 * 8 + 12 + 16 * len(ITEMS), lines[8:16], x=56.0)
    ops += paragraph(60.0, lines[16:40], x=316.0)  # the right column, prose all the way
    assert tables_of(ops) == [_table(1, ITEMS)]


def test_tables_of_two_pages_carry_their_page_numbers() -> None:
    found = tables_of(
        [table_ops(ITEMS)], paragraph(60.0, PROSE) + cells(COUNTRIES, [72.0, 220.0, 330.0], 140.0)
    )
    assert found == [_table(1, ITEMS), _table(2, COUNTRIES)]


def test_a_heading_spanning_two_ruled_columns_sits_at_its_top_left() -> None:
    left, width, top = 72.0, 100.0, 100.0
    xs = [left + width * j for j in range(4)]
    ys = [top + 20 * i for i in range(4)]
    # the vertical rule between the last two columns starts under the heading row
    ops = [hline(xs[0], xs[-1], y) for y in ys]
    ops += [
        f"0.5 w {x} {PAGE_HEIGHT - ys[0]} m {x} {PAGE_HEIGHT - ys[-1]} l S"
        for x in (xs[0], xs[1], xs[3])
    ]
    ops += [f"0.5 w {xs[2]} {PAGE_HEIGHT - ys[1]} m {xs[2]} {PAGE_HEIGHT - ys[-1]} l S"]
    ops += [
        text_at(xs[0] + 4, ys[0] + 5, "Part"),
        text_at(xs[1] + 4, ys[0] + 5, "Price per unit in euro and cent"),
    ]
    body = [["Bolt", "0.25", "0.20"], ["Nut", "0.05", "0.04"]]
    ops += cells(body, [x + 4 for x in xs[:3]], ys[1] + 5, pitch=20.0)
    assert tables_of(ops) == [_table(1, [["Part", "Price per unit in euro and cent", None], *body])]


def _vline(x: float, top: float, bottom: float) -> str:
    return f"0.5 w {x} {PAGE_HEIGHT - top} m {x} {PAGE_HEIGHT - bottom} l S"


def test_an_empty_ruled_box_beside_a_cell_is_part_of_it() -> None:
    """A "Total" row whose ruled box runs across the columns of figures it sums (no rule
    between them, one before the amount): one cell spanning three columns, the positions
    it covers ``None``. An empty cell ruled on both sides stays a cell of its own."""
    left, top = 72.0, 100.0
    xs = [left, left + 150, left + 200, left + 280, left + 360]
    ys = [top + 20 * i for i in range(4)]
    ops = [hline(xs[0], xs[-1], y) for y in ys]
    ops += [_vline(x, ys[0], ys[-1]) for x in (xs[0], xs[3], xs[4])]
    ops += [_vline(x, ys[0], ys[2]) for x in (xs[1], xs[2])]  # not down the last row
    rows = [["Bolts", "200", "0.12", "24.00"], ["Washers", "", "0.03", "6.00"]]
    ops += cells(rows, [x + 4 for x in xs[:4]], ys[0] + 5, pitch=20.0)
    ops += [text_at(xs[0] + 4, ys[2] + 5, "Total"), text_at(xs[3] + 4, ys[2] + 5, "30.00")]
    (table,) = tables_of(ops)
    assert table.rows == [*rows, ["Total", None, None, "30.00"]]
    spans = {(c.row, c.col): (c.row_span, c.col_span) for c in table.grid_cells()}
    assert spans[(2, 0)] == (1, 3) and (2, 1) not in spans and spans[(2, 3)] == (1, 1)
    assert spans[(1, 1)] == (1, 1)  # ruled on both sides: empty, not part of "Washers"


def test_figures_set_midway_beside_a_two_line_label_are_one_row() -> None:
    ops = cells([["Substance", "Air", "Water"]], [72.0, 250.0, 330.0], 100.0)
    ops += [text_at(72, 120, "Chlorine and inorganic"), text_at(72, 132, "compounds (as HCl)")]
    ops += [text_at(250, 126, "10 000"), text_at(330, 126, "-")]
    ops += cells([["Halons", "1", "-"]], [72.0, 250.0, 330.0], 150.0)
    assert tables_of(ops) == [
        _table(
            1,
            [
                ["Substance", "Air", "Water"],
                ["Chlorine and inorganic\ncompounds (as HCl)", "10 000", "-"],
                ["Halons", "1", "-"],
            ],
        )
    ]


def test_dot_leaders_part_a_label_from_its_figure() -> None:
    rows = [["Total population", "12,345"], ["Men", "6,001"], ["Women", "6,344"]]
    ops = []
    for i, (label, value) in enumerate(rows):
        # the dots run up to one space before the figure: no white between the columns
        ops.append(text_at(72, 100 + 16 * i, f"{label} {'.' * (40 - len(label))} {value}"))
    assert tables_of(ops) == [_table(1, rows)]


def test_text_drawn_twice_for_bold_is_read_once() -> None:
    xs = [72.0, 220.0, 330.0]
    ops = cells(COUNTRIES, xs, 100.0)
    ops += [text_at(x + 0.4, 100.0, text) for x, text in zip(xs, COUNTRIES[0], strict=True)]
    assert tables_of(ops) == [_table(1, COUNTRIES)]


def test_rows_of_a_grid_ruled_only_down_its_columns_are_its_text_lines() -> None:
    # rules along the columns and round the table, none between the rows; the header
    # wraps onto a second line in lower case
    xs = [72.0, 200.0, 300.0, 400.0]
    rows = [["Item", "Unit", "Stock"], ["", "price", "level"]] + [
        [name, price, stock]
        for name, price, stock in (("Bolt", "0.25", "120"), ("Nut", "0.05", "900"))
    ]
    ops = [hline(xs[0], xs[-1], 96), hline(xs[0], xs[-1], 96 + 16 * len(rows) + 4)]
    ops += [
        f"0.5 w {x} {PAGE_HEIGHT - 96} m {x} {PAGE_HEIGHT - 100 - 16 * len(rows)} l S" for x in xs
    ]
    ops += cells(rows, [x + 4 for x in xs], 100.0)
    assert tables_of(ops) == [
        _table(1, [["Item", "Unit\nprice", "Stock\nlevel"], rows[2], rows[3]])
    ]


def test_a_one_row_box_before_the_first_table_is_no_table() -> None:
    box = table_ops([["Annual report", "2024"]], top=760.0)  # a ruled box round a heading
    found = tables_of([box, table_ops(ITEMS, top=700.0)], [table_ops([["Pin", "3", "0.01"]])])
    # the box goes; a one-row table after a real one stays (a row carried over a page)
    assert found == [_table(1, ITEMS), _table(2, [["Pin", "3", "0.01"]])]
    assert tables_of([box]) == [_table(1, [["Annual report", "2024"]])]


def test_an_empty_ruled_cell_is_an_empty_string() -> None:
    rows = [["SKU", "Note", "Qty"], ["A1", "", "3"], ["B2", "fragile", "1"]]
    assert tables_of([table_ops(rows)]) == [_table(1, rows)]


@pytest.mark.parametrize(
    "ops",
    [
        paragraph(80.0, PROSE),
        # two columns of prose side by side are text, not a two-column table
        paragraph(80.0, [line[:34] for line in PROSE * 2], x=72.0)
        + paragraph(80.0, [line[34:68] for line in PROSE * 2], x=320.0),
        # a list: dashes, then numbered headings, hanging apart from their text
        [text_at(72, 80 + 14 * i, "-") for i in range(4)]
        + paragraph(80.0, [line[:50] for line in PROSE], x=90.0),
        [text_at(72, 80 + 16 * i, f"{i + 1}.{i + 2}.") for i in range(3)]
        + [text_at(110, 80 + 16 * i, f"Heading number {i}") for i in range(3)],
    ],
    ids=["paragraph", "two-columns", "dashes", "numbered"],
)
def test_prose_is_no_table(ops: list[str]) -> None:
    content = pdf(["\n".join(ops)])
    assert extract_pdf(content, max_pixels=MAX_PIXELS) == []
    with pytest.raises(ExtractionError) as caught:
        extract(content, filename="letter.pdf", content_type="application/pdf", fields=[])
    assert caught.value.code == "no_table_found"


def test_two_unruled_tables_are_both_in_tables_and_only_the_first_in_line_items() -> None:
    ops = cells(ITEMS, [72.0, 220.0, 330.0], 80.0)
    ops += paragraph(170.0, PROSE)
    ops += cells(COUNTRIES, [72.0, 200.0, 300.0], 260.0)
    result = extract_document(pdf(["\n".join(ops)]), filename="two.pdf", content_type="", fields=[])
    assert [(t.page, t.rows, t.confidence) for t in result.tables] == [
        (1, ITEMS, None),
        (1, COUNTRIES, None),
    ]
    assert result.line_items == [dict(zip(ITEMS[0], row, strict=True)) for row in ITEMS[1:]]


def test_the_first_table_gives_line_items() -> None:
    ops = paragraph(60.0, PROSE[:2]) + cells(COUNTRIES, [72.0, 220.0, 330.0], 120.0)
    rows = extract(pdf(["\n".join(ops)]), filename="c.pdf", content_type="", fields=[])
    assert rows[0] == {"Country": "Austria", "Population": "8.9", "Area": "83,879"}
    assert len(rows) == 3


def test_pdfminer_reads_the_same_tables_as_pdfium() -> None:
    # the careful path, for pages whose content is too large to hand to PDFium
    ops = [table_ops(ITEMS, top=720.0), *paragraph(200.0, PROSE)]
    ops += cells(COUNTRIES, [72.0, 220.0, 330.0], 300.0)
    content = pdf(["\n".join(ops)])
    with pdfplumber.open(io.BytesIO(content)) as document:
        careful = read_plumber(document.pages[0])
    fast = read_pdfium(pypdfium2.PdfDocument(content)[0])

    def rules(layout: PageLayout) -> list[tuple[float, ...]]:
        return sorted(
            tuple(round(v, 1) for v in (r.x0, r.top, r.x1, r.bottom)) for r in layout.rules
        )

    assert rules(careful) == rules(fast) and len(rules(fast)) == len(ITEMS) + 1 + len(ITEMS[0]) + 1
    assert "".join(c.text for c in careful.chars) == "".join(c.text for c in fast.chars)
    assert find_tables(careful) == find_tables(fast) == [ITEMS, COUNTRIES]


def test_a_page_tree_pdfium_counts_differently_is_read_through_pdfminer() -> None:
    # /Count says 3, the tree holds 1 page: PDFium believes the count, pdfminer walks the
    # tree; relay reads with pdfminer rather than fail a document it used to read
    content = pdf([table_ops(ITEMS)]).replace(b"/Count 1", b"/Count 3")
    assert len(pypdfium2.PdfDocument(content)) == 3
    assert extract_pdf(content, max_pixels=MAX_PIXELS) == [_table(1, ITEMS)]


def test_a_page_whose_content_inflates_past_the_bound_is_counted_without_holding_it() -> None:
    small, big = pdf([table_ops(ITEMS)]), pdf_bomb(PDFIUM_MAX_CONTENT + (1 << 20))
    with pdfplumber.open(io.BytesIO(small)) as document:
        assert 0 < _content_size(document.pages[0], PDFIUM_MAX_CONTENT) < 4096
    with pdfplumber.open(io.BytesIO(big)) as document:
        assert _content_size(document.pages[0], PDFIUM_MAX_CONTENT) > PDFIUM_MAX_CONTENT


def test_any_layout_gives_rectangular_grids_and_no_error() -> None:
    # characters and rules scattered at random, many on shared lines and columns, some
    # off the page, empty or upside down: whatever a damaged PDF may hold
    rng = random.Random(3)
    for _ in range(300):
        layout = PageLayout(612.0, 792.0)
        for _ in range(rng.randint(0, 60)):
            x = rng.choice([rng.uniform(-50, 700), 100.0, 200.0, 300.0])
            y = rng.choice([rng.uniform(-50, 850), 100.0, 116.0, 132.0])
            w, h = rng.choice([0.0, rng.uniform(0, 10), -1.0]), rng.choice([0.0, 10.0, -2.0])
            layout.chars.append(Char(x, y, x + w, y + h, rng.choice("ab1.- _"), h))
        for _ in range(rng.randint(0, 30)):
            x, y, length = rng.uniform(0, 600), rng.uniform(0, 800), rng.uniform(0, 300)
            vertical = rng.random() < 0.5
            layout.rules.append(
                Rule(x, y, x, y + length) if vertical else Rule(x, y, x + length, y)
            )
        for grid in find_tables(layout):
            assert grid and all(len(row) == len(grid[0]) for row in grid)
