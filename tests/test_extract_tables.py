"""``tables`` beside ``line_items`` (``relay.extract.tables``): which tables continue the first,
what CSV and JSON carry, plug-ins that report tables, and ``RELAY_MAX_PAGES``."""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from typing import Any

import pytest
from PIL import Image

from relay.devtools.sample_documents import HEADER, blank_pages_pdf, pdf, table_ops
from relay.extract import ExtractionError, extract_document, run_extractor
from relay.extract.loader import call_extractor
from relay.extract.result import Table
from relay.extract.tables import Extraction, split_tables

PRICES = ["Item", "Unit price", "Currency"]


def _document(content: bytes, filename: str, fields: Sequence[str] = ()) -> Extraction:
    return extract_document(content, filename=filename, content_type="", fields=list(fields))


def _code(content: bytes, filename: str, **kw: Any) -> str:
    with pytest.raises(ExtractionError) as caught:
        extract_document(content, filename=filename, content_type="", fields=[], **kw)
    return caught.value.code


# --- PDFs ----------------------------------------------------------------------------------


def test_a_pdf_with_two_different_tables_returns_both_and_only_the_first_in_line_items() -> None:
    invoice = table_ops([HEADER, ["A1", "Bolt", "10"], ["B2", "Nut", "20"]], top=720)
    prices = table_ops([PRICES, ["Bolt", "0.10", "EUR"]], top=500)
    result = _document(pdf([invoice + "\n" + prices]), "two.pdf")
    assert result.line_items == [
        {"SKU": "A1", "Description": "Bolt", "Qty": "10"},
        {"SKU": "B2", "Description": "Nut", "Qty": "20"},
    ]
    assert [(t.page, t.rows, t.confidence) for t in result.tables] == [
        (1, [HEADER, ["A1", "Bolt", "10"], ["B2", "Nut", "20"]], None),
        (1, [PRICES, ["Bolt", "0.10", "EUR"]], None),
    ]


def test_a_table_split_over_two_pages_is_one_list_of_line_items_and_two_tables() -> None:
    page1 = table_ops([HEADER, ["A1", "Bolt", "10"]])
    page2 = table_ops([HEADER, ["B2", "Nut", "20"]])  # the header repeated
    page3 = table_ops([["C3", "Washer", "30"]])  # no header: data from its first row
    result = _document(pdf([page1, page2, page3]), "split.pdf")
    assert [row["SKU"] for row in result.line_items] == ["A1", "B2", "C3"]
    assert [(t.page, len(t.rows)) for t in result.tables] == [(1, 2), (2, 2), (3, 1)]


def test_a_different_table_on_the_next_page_stays_out_of_line_items() -> None:
    page1 = table_ops([HEADER, ["A1", "Bolt", "10"]])
    page2 = table_ops([PRICES, ["Bolt", "0.10", "EUR"]])  # same width, another header
    result = _document(pdf([page1, page2]), "two-pages.pdf")
    assert result.line_items == [{"SKU": "A1", "Description": "Bolt", "Qty": "10"}]
    assert [t.rows[0] for t in result.tables] == [HEADER, PRICES]


# --- the rule itself, on tables as an engine hands them over --------------------------------


def _t(page: int, *rows: list[str | None]) -> Table:
    return Table(page, [list(row) for row in rows])


@pytest.mark.parametrize(
    ("later", "continues"),
    [
        (_t(2, ["SKU", "Qty"], ["B", "2"]), True),  # repeated header
        (_t(2, [" sku ", "QTY"], ["B", "2"]), False),  # another header (names differ)
        (_t(2, ["B", "2"]), True),  # data from the first row
        (_t(2, ["B", None]), True),  # a row with an empty cell is no header
        (_t(2, ["B", "2", "x"]), False),  # another number of columns
        (_t(1, ["B", "2"]), False),  # the same page: another table
        (_t(3, ["B", "2"]), False),  # a page skipped: not a page break
        (_t(2, ["Name", "Place"], ["B", "2"]), False),  # a header of its own
    ],
)
def test_what_continues_the_first_table(later: Table, continues: bool) -> None:
    first = _t(1, ["SKU", "Qty"], ["A", "1"])
    rows, tables = split_tables([first, later], "the PDF")
    assert len(tables) == 2
    assert len(rows) == (1 + (len(later.rows) - (later.rows[0][0] == "SKU")) if continues else 1)


def test_only_an_unbroken_run_of_continuations_joins_line_items() -> None:
    tables = [
        _t(1, ["SKU", "Qty"], ["A", "1"]),
        _t(2, ["B", "2"]),
        _t(2, ["Name", "Place"], ["x", "y"]),  # another table ends the run
        _t(3, ["C", "3"]),
    ]
    rows, kept = split_tables(tables, "the PDF")
    assert rows == [{"SKU": "A", "Qty": "1"}, {"SKU": "B", "Qty": "2"}]
    assert len(kept) == 4


def test_tables_are_cleaned_with_their_confidences_and_made_rectangular() -> None:
    raw = Table(
        4,
        [[" SKU ", "Qty"], [None, " "], ["A", None, "x"]],
        [[0.9, 0.8], [None, 0.1], [0.7, None, 0.5]],
    )
    (cleaned,) = split_tables([raw, Table(5, [[None]])], "the image").tables
    assert cleaned == Table(
        4, [["SKU", "Qty", None], ["A", None, "x"]], [[0.9, 0.8, None], [0.7, None, 0.5]]
    )


def test_a_first_table_of_one_row_leaves_line_items_to_the_next_table_with_rows() -> None:
    """A lone row read as a table (a heading, a line of figures) does not fail the document
    with ``empty_document`` while a later table has rows; it stays in ``tables``."""
    heading = _t(1, ["Table 3", "2009"])
    rows, kept = split_tables([heading, _t(1, ["SKU", "Qty"], ["A", "1"])], "the image")
    assert rows == [{"SKU": "A", "Qty": "1"}]
    assert [t.rows[0] for t in kept] == [["Table 3", "2009"], ["SKU", "Qty"]]


def test_no_table_and_a_header_alone_fail_as_before() -> None:
    with pytest.raises(ExtractionError, match="no table found in the PDF"):
        split_tables([Table(1, [[None, " "]])], "the PDF")
    with pytest.raises(ExtractionError) as caught:
        split_tables([Table(1, [["SKU", "Qty"]])], "the PDF")
    assert caught.value.code == "empty_document"
    with pytest.raises(ExtractionError) as caught:
        split_tables([Table(1, [["SKU", "Qty"]]), Table(2, [["Name"]])], "the PDF")
    assert caught.value.code == "empty_document"


# --- CSV, TSV, JSON ------------------------------------------------------------------------


def test_csv_results_include_their_table() -> None:
    result = _document(b"sku,qty,note\nA,1,\nB,2,x\n", "items.csv")
    assert result.line_items == [
        {"sku": "A", "qty": "1", "note": ""},
        {"sku": "B", "qty": "2", "note": "x"},
    ]
    assert result.tables == [
        Table(1, [["sku", "qty", "note"], ["A", "1", ""], ["B", "2", "x"]], None)
    ]
    projected = _document(b"sku,qty\nA,1\n", "items.csv", fields=["qty", "gone"])
    assert projected.tables == [Table(1, [["qty", "gone"], ["1", None]], None)]


def test_json_values_become_text_in_the_table() -> None:
    result = _document(b'[{"a": 1.5, "b": true}, {"b": null, "c": {"d": [1]}}]', "x.json")
    assert result.tables == [
        Table(1, [["a", "b", "c"], ["1.5", "true", None], [None, None, '{"d":[1]}']], None)
    ]


# --- plug-ins ------------------------------------------------------------------------------


def _plugin(value: object) -> object:
    def extractor(content: bytes, /, *, filename: str, content_type: str, fields: list[str]):  # type: ignore[no-untyped-def]
        return value

    return extractor


def _call(value: object) -> Extraction:
    return call_extractor(
        _plugin(value),  # type: ignore[arg-type]
        b"x",
        filename="x",
        content_type="",
        fields=[],
    )


def test_a_plugin_may_return_rows_or_rows_and_tables() -> None:
    assert _call([{"a": 1}]) == Extraction([{"a": 1}], [])
    table = {"page": 2, "rows": [["a"], [None]], "confidence": [[0.5], [None]]}
    assert _call({"line_items": [{"a": 1}], "tables": [table]}) == Extraction(
        [{"a": 1}], [Table(2, [["a"], [None]], [[0.5], [None]])]
    )
    assert _call({"line_items": []}) == Extraction([], [])
    ok = run_extractor(
        _plugin({"line_items": [{"a": 1}], "tables": []}),  # type: ignore[arg-type]
        b"x",
        filename="x",
        content_type="",
        fields=[],
    )
    assert ok == ([{"a": 1}], None)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"rows": []}, 'a dict without "line_items"'),
        ({"line_items": {}}, '"line_items" as dict'),
        ({"line_items": [], "tables": {}}, '"tables" as dict'),
        ({"line_items": [], "tables": [[]]}, "table (item 0) that is list"),
        ({"line_items": [], "tables": [{"page": 0, "rows": []}]}, "page is not a positive"),
        ({"line_items": [], "tables": [{"page": True, "rows": []}]}, "page is not a positive"),
        ({"line_items": [], "tables": [{"page": 1, "rows": [["a"], ["b", "c"]]}]}, "different"),
        ({"line_items": [], "tables": [{"page": 1, "rows": [[1]]}]}, "a cell that is int"),
        (
            {"line_items": [], "tables": [{"page": 1, "rows": [["a"]], "confidence": [[2]]}]},
            "outside 0-1",
        ),
        (
            {"line_items": [], "tables": [{"page": 1, "rows": [["a"]], "confidence": [[]]}]},
            "shape of its rows",
        ),
    ],
)
def test_a_plugin_table_that_breaks_the_contract_is_extraction_error(
    value: object, said: str
) -> None:
    with pytest.raises(ExtractionError) as caught:
        _call(value)
    assert caught.value.code == "extraction_error"
    assert said in caught.value.message


# --- RELAY_MAX_PAGES -----------------------------------------------------------------------


def test_a_5000_blank_page_pdf_fails_too_many_pages_in_seconds() -> None:
    content = blank_pages_pdf(5_000)
    assert len(content) < 1_000_000
    started = time.monotonic()
    assert _code(content, "blank.pdf") == "too_many_pages"
    assert time.monotonic() - started < 10  # generous: ~0.1 s on a quiet machine
    # Within the bound the pages are read.
    assert _code(blank_pages_pdf(3), "blank.pdf", max_pages=3) == "no_table_found"
    assert _code(blank_pages_pdf(4), "blank.pdf", max_pages=3) == "too_many_pages"


def test_a_tiff_of_more_pages_than_allowed_fails_before_any_is_decoded() -> None:
    frames = [Image.new("L", (64, 64), 255) for _ in range(4)]
    out = io.BytesIO()
    frames[0].save(out, format="TIFF", save_all=True, append_images=frames[1:])
    assert _code(out.getvalue(), "scan.tiff", max_pages=3) == "too_many_pages"
