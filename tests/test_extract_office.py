"""XLSX, DOCX and HTML documents (``relay.extract.office``, ``html_``, ``archive``): their
tables with merged cells as spans, how they are recognised, and the hostile ones (ZIP
bombs, entity expansion, sheets of millions of cells, tables nested without end) failing
fast with their codes. Every document is built in the test (``tests.support.office_documents``);
the worker's side of it is ``tests/e2e/test_office.py``."""

from __future__ import annotations

import io
import time
from collections.abc import Hashable
from typing import Any

import pytest

from relay.extract import ExtractionError, detect_format, extract_document
from relay.extract.bounds import ExtractLimits, applied
from relay.extract.result import Cell, Table
from relay.extract.tables import Extraction, first_table_records, spanned_table
from tests.support import office_documents as docs

# The bounds a worker applies by default, as the sandbox does (``ExtractLimits`` carries the
# archive and cell bounds even outside it; the depth is the sandbox's own).
WORKER = ExtractLimits(max_depth=64)


def _read(content: bytes, filename: str, content_type: str = "", **kw: Any) -> Extraction:
    with applied(kw.pop("limits", WORKER)):
        return extract_document(
            content, filename=filename, content_type=content_type, fields=kw.pop("fields", [])
        )


def _failure(content: bytes, filename: str, content_type: str = "", **kw: Any) -> ExtractionError:
    with pytest.raises(ExtractionError) as caught:
        _read(content, filename, content_type, **kw)
    assert caught.value.message, "every failure carries a human message"
    return caught.value


def _spans(table: Table) -> list[tuple[int, int, int, int]]:
    """The cells of ``table`` that span more than one position."""
    return [(c.row, c.col, c.row_span, c.col_span) for c in table.grid_cells() if not c.plain]


# --- XLSX ----------------------------------------------------------------------------------


def test_every_sheet_with_a_value_is_a_table_and_a_merged_heading_one_spanning_cell() -> None:
    result = _read(docs.two_sheet_xlsx(), "orders.xlsx")
    orders, rates = result.tables
    assert (orders.page, rates.page) == (1, 3)  # the sheet's place; "Empty" is sheet 2
    assert orders.rows == [
        ["Q1 orders", None, None],
        ["sku", "qty", "price"],
        ["A-1", "2", "9.9"],
        ["B-2", "1", "24"],
    ]
    assert _spans(orders) == [(0, 0, 1, 3)]
    assert orders.bbox is None and orders.confidence is None
    assert rates.rows == [["currency", "rate"], ["EUR", "1.1"], ["USD", "1"]]
    assert _spans(rates) == []
    # The heading is a title, not the header: line_items start below it.
    assert result.line_items == [
        {"sku": "A-1", "qty": "2", "price": "9.9"},
        {"sku": "B-2", "qty": "1", "price": "24"},
    ]
    # The spans survive the stored form and come back in the API's.
    cells = orders.to_json()["cells"]
    assert isinstance(cells, list) and orders.stored_json()["cells"]
    assert cells[0] == {"row": 0, "col": 0, "row_span": 1, "col_span": 3, "bbox": None}


def test_fields_apply_to_a_workbook_and_sheets_are_never_joined() -> None:
    result = _read(docs.two_sheet_xlsx(), "orders.xlsx", fields=["price", "sku", "rate"])
    assert result.line_items == [
        {"price": "9.9", "sku": "A-1", "rate": None},
        {"price": "24", "sku": "B-2", "rate": None},
    ]


def test_cell_values_read_as_text_the_way_excel_shows_them() -> None:
    import datetime as dt

    import openpyxl

    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append(["when", "at", "n", "x", "ok", "formula"])
    sheet.append(
        [dt.date(2024, 1, 31), dt.datetime(2024, 1, 31, 14, 30), 7, 0.1 + 0.2, True, "=1+1"]
    )
    sheet["H5"] = "far"  # a cell away from the table: empty columns between are kept
    out = io.BytesIO()
    workbook.save(out)
    (table,) = _read(out.getvalue(), "values.xlsx").tables
    assert table.rows[1][:6] == ["2024-01-31", "2024-01-31 14:30:00", "7", "0.3", "TRUE", None]
    assert table.rows[-1][-1] == "far" and len(table.rows[0]) == 8


def test_a_sheet_whose_declared_size_lies_is_read_by_its_cells() -> None:
    cells = '<row r="2"><c r="B2" t="inlineStr"><is><t>x</t></is></c></row>'
    cells += '<row r="3"><c r="B3"><v>1</v></c></row>'
    content = docs.xlsx_with_sheet(docs.sheet_of(cells, dimension="A1:XFD1048576"))
    started = time.process_time()
    (table,) = _read(content, "lying.xlsx").tables
    assert table.rows == [["x"], ["1"]]  # the empty first row and column A are dropped
    assert time.process_time() - started < 0.5  # not a million rows of 16,384 columns


# --- DOCX ----------------------------------------------------------------------------------


def test_every_word_table_in_order_with_merged_cells_as_spans() -> None:
    result = _read(docs.two_table_docx(), "order.docx")
    lines, groups = result.tables
    assert (lines.page, groups.page) == (1, 1)
    assert lines.rows == [
        ["Lines", None, None],
        ["sku", "qty", "price"],
        ["A-1", "2", "9.90"],
        ["B-2", "1", "24"],
    ]
    assert _spans(lines) == [(0, 0, 1, 3)]  # gridSpan
    assert groups.rows == [["group", "item"], ["tools", "hammer"], [None, "saw"]]
    assert _spans(groups) == [(1, 0, 2, 1)]  # vMerge
    assert result.line_items == [
        {"sku": "A-1", "qty": "2", "price": "9.90"},
        {"sku": "B-2", "qty": "1", "price": "24"},
    ]


def test_a_table_nested_in_a_word_cell_is_a_table_after_its_holder() -> None:
    import docx

    document = docx.Document()
    outer = document.add_table(rows=2, cols=2)
    for r, row in enumerate([["name", "parts"], ["kit", "see below"]]):
        for c, value in enumerate(row):
            outer.cell(r, c).text = value
    inner = outer.cell(1, 1).add_table(rows=2, cols=1)
    inner.cell(0, 0).text, inner.cell(1, 0).text = "part", "bolt"
    document.add_table(rows=1, cols=1).cell(0, 0).text = "last"
    out = io.BytesIO()
    document.save(out)
    tables = _read(out.getvalue(), "kit.docx").tables
    assert [t.rows for t in tables] == [
        [["name", "parts"], ["kit", "see below"]],
        [["part"], ["bolt"]],
        [["last"]],
    ]


# --- HTML ----------------------------------------------------------------------------------


def test_every_html_table_with_colspan_and_rowspan_as_spans() -> None:
    result = _read(docs.HTML_PAGE, "prices.html")
    prices, contact = result.tables
    assert prices.rows == [
        ["Item", None, "Price"],
        ["Bolts", "M6", "0.10"],
        [None, "M8", "0.15 €"],
        ["Nuts", "M6\nzinc", "0.05"],
    ]
    assert _spans(prices) == [(0, 0, 1, 2), (1, 0, 2, 1)]
    assert contact.rows == [["phone", "555-0100"]]
    assert result.line_items == [
        {"Item": "Bolts", "column_2": "M6", "Price": "0.10"},
        {"Item": None, "column_2": "M8", "Price": "0.15 €"},
        {"Item": "Nuts", "column_2": "M6\nzinc", "Price": "0.05"},
    ]


def test_html_spans_are_clamped_and_cut_at_their_row_group_as_browsers_do() -> None:
    page = (
        b"<table><thead><tr><th rowspan=0>a<th>b</thead>"  # rowspan=0: to the end of thead
        b"<tbody><tr><td rowspan=9>c<td>d<tr><td>e</tbody>"  # 9 rows asked, 2 there
        b"<tr><td colspan=x>f<td colspan=-3>g</table>"  # no number: 1; below 1: 1
    )
    (table,) = _read(page, "t.html").tables
    assert table.rows == [["a", "b"], ["c", "d"], [None, "e"], ["f", "g"]]
    assert _spans(table) == [(1, 0, 2, 1)]


def test_an_html_page_is_decoded_by_its_charset_and_nested_tables_come_after() -> None:
    page = (
        '<html><head><meta charset="windows-1252"></head><body>'
        "<table><tr><td>caf\xe9<table><tr><td>inner</td></tr></table></td><td>2</td></tr>"
        "<tr><td>x<td>y</table><table><tr><td>last</table>"
    ).encode("cp1252")
    tables = _read(page, "page.html").tables
    assert [t.rows for t in tables] == [[["café", "2"], ["x", "y"]], [["inner"]], [["last"]]]


# --- which format --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "filename", "content_type", "kind"),
    [
        (docs.two_sheet_xlsx, "upload.bin", "application/octet-stream", "zip"),
        (docs.two_sheet_xlsx, "a.xlsx", "", "xlsx"),
        (docs.two_table_docx, "a.docx", "", "docx"),
        (
            docs.two_table_docx,
            "a",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "docx",
        ),
        (lambda: docs.HTML_PAGE, "a.csv", "text/csv", "html"),  # the markup wins
        (lambda: b"  <!-- saved -->\n<TABLE><tr><td>1", "x", "", "html"),
        (lambda: b"<div>1</div>", "x.htm", "", "html"),
    ],
)
def test_the_format_is_recognised_by_content_then_type_then_name(
    build: Any, filename: str, content_type: str, kind: str
) -> None:
    assert detect_format(build(), filename=filename, content_type=content_type) == kind


def test_content_decides_which_office_format_whatever_was_declared() -> None:
    xlsx_type = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    result = _read(docs.two_table_docx(), "order.xlsx", xlsx_type)  # a DOCX all the same
    assert [len(t.rows) for t in result.tables] == [4, 3]


@pytest.mark.parametrize(
    ("content", "filename", "code", "said"),
    [
        (b"PK\x03\x04\x14\x00\x06\x00" + bytes(64), "sheet.xlsx", "invalid_xlsx", "ZIP"),
        (b"not a zip at all", "order.docx", "invalid_docx", "ZIP"),
        (docs.zip_of({"a.txt": b"hello"}), "files.zip", "unsupported_format", "neither"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512), "old.xls", "unsupported_format", ".xls"),
        (b"<html><body>a, b</body></html>", "page.html", "no_table_found", "HTML"),
        (b"<table><tr><td>  </td></tr></table>", "page.html", "no_table_found", "HTML"),
        (b"<table><tr><td>only</td><td>header</td></tr></table>", "a.html", "empty_document", ""),
        (
            docs.zip_of({"[Content_Types].xml": b"<x/>", "xl/workbook.xml": b"<"}),
            "b.xlsx",
            "invalid_xlsx",
            "",
        ),
        (
            docs.zip_of({"[Content_Types].xml": b"<x/>", "word/document.xml": b"<"}),
            "b.docx",
            "invalid_docx",
            "",
        ),
    ],
)
def test_what_cannot_be_read_fails_with_its_code(
    content: bytes, filename: str, code: str, said: str
) -> None:
    failure = _failure(content, filename)
    assert failure.code == code and said in failure.message, failure


# --- hostile files -------------------------------------------------------------------------


def test_a_zip_bomb_is_refused_from_its_directory_before_anything_is_unpacked() -> None:
    bomb = docs.zip_bomb_xlsx(64 << 20)  # 64 MiB of zeros in ~300 KB
    limits = ExtractLimits(max_unzipped_bytes=16 << 20)
    started = time.process_time()
    failure = _failure(bomb, "bomb.xlsx", limits=limits)
    assert failure.code == "archive_too_large" and "16,777,216" in failure.message
    assert time.process_time() - started < 0.5  # 64 MiB would take longer to inflate
    too_many = _failure(
        docs.many_parts_xlsx(50), "parts.xlsx", limits=ExtractLimits(max_zip_entries=40)
    )
    assert too_many.code == "archive_too_large" and "parts" in too_many.message


def test_a_part_larger_than_its_directory_says_is_never_read_past_that() -> None:
    sheet = docs.sheet_xml(200, 20)
    content = docs.understated(docs.xlsx_with_sheet(sheet), "xl/worksheets/sheet1.xml", 100)
    assert _failure(content, "lying.xlsx").code == "invalid_xlsx"  # a CRC error at 100 bytes


def test_entity_expansion_and_external_entities_are_refused_before_parsing(tmp_path: Any) -> None:
    started = time.process_time()
    laughs = _failure(docs.billion_laughs_docx(), "laughs.docx")
    assert laughs.code == "unsafe_xml" and "word/document.xml" in laughs.message
    assert time.process_time() - started < 0.5  # expanded, it would be 3 GB of "lol"
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret")
    external = _failure(docs.external_entity_xlsx(str(secret)), "xxe.xlsx")
    assert external.code == "unsafe_xml" and "the secret" not in external.message
    # XML in an encoding the check cannot read is refused rather than left to another parser.
    utf7 = b'<?xml version="1.0" encoding="UTF-7"?><w:document/>'
    odd = docs.rewritten(docs.two_table_docx(), {"word/document.xml": utf7})
    assert _failure(odd, "odd.docx").code == "unsafe_xml"


def test_a_sheet_of_more_cells_than_allowed_fails_while_it_is_read() -> None:
    limits = ExtractLimits(max_cells=10_000)
    big = docs.xlsx_with_sheet(docs.sheet_xml(300, 50))  # 15,000 cells, dimension "A1"
    failure = _failure(big, "big.xlsx", limits=limits)
    assert failure.code == "too_many_cells" and "10,000" in failure.message
    # Empty rows count too: a cell at row 20,000 is 20,000 rows to walk.
    far = docs.xlsx_with_sheet(docs.sheet_of('<row r="20000"><c r="A20000"><v>1</v></c></row>'))
    assert _failure(far, "far.xlsx", limits=limits).code == "too_many_cells"
    assert (
        len(
            _read(docs.xlsx_with_sheet(docs.sheet_xml(100, 50)), "ok.xlsx", limits=limits)
            .tables[0]
            .rows
        )
        == 100
    )


def test_html_that_would_be_a_grid_of_millions_or_nests_without_end_fails_fast() -> None:
    limits = ExtractLimits(max_depth=64, max_cells=10_000)
    started = time.process_time()
    assert _failure(docs.huge_html(20_000), "huge.html", limits=limits).code == "too_many_cells"
    spans = _failure(docs.spans_html(65534, 1000), "spans.html", limits=limits)
    assert spans.code == "too_many_cells"
    deep = _failure(docs.deep_html(10_000), "deep.html", limits=limits)
    assert deep.code == "too_deeply_nested" and "64" in deep.message
    assert time.process_time() - started < 2
    assert len(_read(docs.deep_html(64), "deep.html", limits=limits).tables) == 64


@pytest.mark.parametrize("junk", [b"<x" * 500_000, b"</" * 500_000, b"<![" * 300_000])
def test_markup_that_stalls_or_crashes_html_parser_reads_in_linear_time(junk: bytes) -> None:
    # Python 3.11's html.parser takes ~30 s for 200 KB of "<x", and "<![" makes it raise.
    started = time.process_time()
    page = b"<table><tr><th>a</th></tr><tr><td>1" + junk + b"</td></tr></table>"
    assert len(_read(page, "junk.html").tables) == 1
    assert time.process_time() - started < 2


def test_a_word_cell_spanning_a_million_columns_costs_nothing_before_it_is_refused() -> None:
    cell = '<w:tc><w:tcPr><w:gridSpan w:val="1000000000"/></w:tcPr><w:p/></w:tc>'
    document = docs.word_document_xml(f"<w:tbl><w:tr>{cell}</w:tr></w:tbl>")
    content = docs.rewritten(docs.two_table_docx(), {"word/document.xml": document})
    assert _failure(content, "wide.docx").code == "too_many_cells"


# --- the table rules these formats share ----------------------------------------------------


def test_a_spanned_table_keeps_its_spans_through_cleaning_and_trimming() -> None:
    rows: list[list[str | None]] = [
        [None, "Title", None, None],
        [None, None, None, None],  # blank: dropped, the span below loses it
        [None, "a", "b", None],
        [None, "1", "2", None],
    ]
    owner: list[list[Hashable]] = [
        [(0, 0), "t", "t", "t"],
        [(1, 0), (1, 1), (1, 2), (1, 3)],
        [(2, 0), "a", (2, 2), (2, 3)],
        [(3, 0), "a", (3, 2), (3, 3)],
    ]
    table = spanned_table(1, rows, owner)
    assert table is not None
    assert table.rows == [["Title", None], ["a", "b"], [None, "2"]]
    assert table.cells == (Cell(0, 0, 1, 2), Cell(1, 0, 2, 1), Cell(1, 1), Cell(2, 1))


def test_line_items_start_below_title_rows_and_come_from_the_first_table_with_rows() -> None:
    lone = Table(1, [["Report", None]])
    titled = Table(1, [["Orders", None], ["sku", "qty"], ["A", "1"]])
    assert first_table_records([lone, titled], "the page") == [{"sku": "A", "qty": "1"}]
    one_column = Table(1, [["sku"], ["A"]])  # one cell per row is no title in one column
    assert first_table_records([one_column], "the page") == [{"sku": "A"}]
