"""The default extractor, the extractor loader and the plug-in contract (``relay.extract``).

Every document is built in the test, PDFs included: ``_pdf`` writes a minimal PDF by hand
(ruling lines plus Helvetica text) so that pdfplumber's real table finder is exercised
without a PDF-writing dependency or binary fixtures.
"""

from __future__ import annotations

import pickle
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import pytest

from relay.devtools.sample_documents import pdf as _pdf
from relay.devtools.sample_documents import quote_storm, wide_csv
from relay.devtools.sample_documents import table_ops as _table_ops
from relay.devtools.sample_documents import text_ops as _text_ops
from relay.extract import ExtractionError, Extractor, extract, load_extractor, run_extractor
from relay.extract.bounds import ExtractLimits, RowBudget, applied, encode_rows
from relay.extract.csv_tsv import sniffer_sample
from relay.extract.errors import ExtractorConfigError
from relay.extract.pdf import _out_of_memory

Rows = list[dict[str, object]]


def _rows(
    content: bytes, filename: str, content_type: str = "", fields: Sequence[str] = ()
) -> Rows:
    return extract(content, filename=filename, content_type=content_type, fields=list(fields))


def _code(content: bytes, filename: str, content_type: str = "") -> str:
    with pytest.raises(ExtractionError) as caught:
        _rows(content, filename, content_type)
    assert caught.value.message, "every failure carries a human message"
    return caught.value.code


HEADER = ["SKU", "Description", "Qty"]


# --- CSV and TSV --------------------------------------------------------------------------


def test_csv_with_comma() -> None:
    rows = _rows(b"sku,qty,price\nA1,2,9.50\nB2,10,0.99\n", "items.csv", "text/csv")
    assert rows == [
        {"sku": "A1", "qty": "2", "price": "9.50"},
        {"sku": "B2", "qty": "10", "price": "0.99"},
    ]


def test_semicolon_csv_with_decimal_commas_is_sniffed() -> None:
    content = b"sku;price;note\nA1;1,50;x\nB2;2,25;y\nC3;3,00;z\n"
    rows = _rows(content, "export.csv", "text/csv; charset=utf-8")
    assert rows[0] == {"sku": "A1", "price": "1,50", "note": "x"}
    assert [row["price"] for row in rows] == ["1,50", "2,25", "3,00"]


def test_a_sniffed_delimiter_missing_from_the_header_is_overruled() -> None:
    # csv.Sniffer answers "," for this (quotes beside commas); the header has only ";".
    content = b'sku;description\nA1;Shirt,"L",red\nB2;Shirt,"M",blue\n'
    rows = _rows(content, "export.csv", "text/csv")
    assert rows == [
        {"sku": "A1", "description": 'Shirt,"L",red'},
        {"sku": "B2", "description": 'Shirt,"M",blue'},
    ]


def test_tsv_by_content_type_and_by_extension() -> None:
    content = b"sku\tname\nA1\tWidget, large\nB2\tGadget\n"
    expected = [{"sku": "A1", "name": "Widget, large"}, {"sku": "B2", "name": "Gadget"}]
    assert _rows(content, "upload", "text/tab-separated-values") == expected
    assert _rows(content, "items.tab", "application/octet-stream") == expected


def test_quoted_fields_keep_embedded_commas_quotes_and_newlines() -> None:
    content = b'sku,description\r\nA1,"Bolt, M6\r\nzinc plated"\r\nB2,"He said ""hi"""\r\n'
    rows = _rows(content, "items.csv", "text/csv")
    assert rows == [
        {"sku": "A1", "description": "Bolt, M6\r\nzinc plated"},
        {"sku": "B2", "description": 'He said "hi"'},
    ]


def test_utf8_bom_is_not_part_of_the_first_key() -> None:
    rows = _rows("\ufeffsku,name\nA1,Crème\n".encode(), "items.csv", "text/csv")
    assert rows == [{"sku": "A1", "name": "Crème"}]


def test_latin1_bytes_fall_back_to_latin1() -> None:
    rows = _rows("name,city\nJosé,Orléans\n".encode("latin-1"), "people.csv", "text/csv")
    assert rows == [{"name": "José", "city": "Orléans"}]


def test_utf16_tsv_from_excel_is_read() -> None:
    rows = _rows("sku\tqty\nA1\t3\n".encode("utf-16"), "unicode.txt", "text/plain")
    assert rows == [{"sku": "A1", "qty": "3"}]


@pytest.mark.parametrize("content", [b"sku,qty\n", b"sku,qty\n\n  \n,,\n", b"\n\n", b"   "])
def test_header_only_or_blank_is_empty_document(content: bytes) -> None:
    assert _code(content, "items.csv", "text/csv") == "empty_document"


def test_headers_are_stripped_and_disambiguated_rows_are_padded() -> None:
    # Two ragged rows among 20 are within the tolerance (10 %): padded and kept.
    full = b"".join(b"C%d,a,b,c,d\n" % i for i in range(18))
    content = b"\n , \n sku , name,,name,name_2\nA1,x,y,z,w,EXTRA1,EXTRA2\n\nB2\n" + full
    rows = _rows(content, "items.csv", "text/csv")
    assert len(rows) == 20
    assert rows[-1] == {"sku": "C17", "name": "a", "column_3": "b", "name_2": "c", "name_2_2": "d"}
    assert rows[:2] == [
        {
            "sku": "A1",
            "name": "x",
            "column_3": "y",
            "name_2": "z",
            "name_2_2": "w",
            "column_6": "EXTRA1",
            "column_7": "EXTRA2",
        },
        {"sku": "B2", "name": None, "column_3": None, "name_2": None, "name_2_2": None},
    ]


def _malformed(content: bytes, filename: str = "items.csv", content_type: str = "text/csv") -> str:
    with pytest.raises(ExtractionError) as caught:
        _rows(content, filename, content_type)
    assert caught.value.code == "malformed_csv", caught.value
    return caught.value.message


@pytest.mark.parametrize(
    ("content", "line"),
    [
        # The document: it used to succeed as one garbled row.
        (b'sku,qty\n"A-1,2\nB-2,3,4,5\nC-3\n', 2),
        (b'sku,qty\nA-1,2\nB-2,"3\nC-3,4\n', 3),
        (b'sku\tqty\nA-1\t2\nB-2\t"3\n', 3),
    ],
)
def test_an_unclosed_quote_is_malformed_csv_naming_its_line(content: bytes, line: int) -> None:
    message = _malformed(content)
    assert message.startswith("unclosed quote") and f"line {line} " in message


def test_a_quoted_field_closed_on_the_last_line_is_fine() -> None:
    rows = _rows(b'sku,note\nA1,"two\nlines"', "items.csv", "text/csv")
    assert rows == [{"sku": "A1", "note": "two\nlines"}]


@pytest.mark.parametrize(
    ("content", "filename", "content_type", "line"),
    [
        (b"Dear customer\nThank you for your order.\nWe ship it tomorrow\n", "note.csv", "", 1),
        (b"\n\nMeeting notes\nBring the invoices\n", "notes.txt", "text/csv", 3),
        (b"Nothing to see here\nreally nothing\n", "a.tsv", "text/tab-separated-values", 1),
    ],
)
def test_prose_declared_as_a_table_is_malformed_csv_no_delimiter(
    content: bytes, filename: str, content_type: str, line: int
) -> None:
    message = _malformed(content, filename, content_type)
    assert message.startswith("no delimiter found") and f"(line {line})" in message


def test_a_one_column_list_under_a_single_word_header_is_still_a_table() -> None:
    rows = _rows(b"sku\nA1\nB2 large\n", "skus.csv", "text/csv")
    assert rows == [{"sku": "A1"}, {"sku": "B2 large"}]


def test_ragged_rows_beyond_the_tolerance_are_malformed_csv() -> None:
    # The rows without the quote: 2 of 3 rows do not line up with the header.
    message = _malformed(b"sku,qty\nA-1,2\nB-2,3,4,5\nC-3\n")
    assert message.startswith("ragged rows: 2 of 3") and "line 3 has 4" in message
    # A comma header over semicolon rows: every row is one cell.
    message = _malformed(b"sku,qty,price\nA1;2;9.50\nB2;1;3.00\nC3;5;1.25\n")
    assert "3 of 3" in message and "line 2 has 1" in message
    # 3 ragged rows in 20 is past 10 %.
    good = b"".join(b"A%d,1\n" % i for i in range(17))
    assert "3 of 20" in _malformed(b"sku,qty\n" + good + b"X\nY,1,2\nZ\n")


def test_ragged_rows_within_the_tolerance_and_trailing_delimiters_are_read() -> None:
    good = b"".join(b"A%d,1\n" % i for i in range(18))
    rows = _rows(b"sku,qty\n" + good + b"X\nY,1,2\n", "items.csv", "text/csv")
    assert len(rows) == 20
    assert rows[-2:] == [{"sku": "X", "qty": None}, {"sku": "Y", "qty": "1", "column_3": "2"}]
    # A delimiter at the end of every row (or of some) only adds empty cells: not ragged.
    rows = _rows(b"sku,qty\nA1,2,\nB2,3,,\nC3,4\n", "items.csv", "text/csv")
    assert [row["sku"] for row in rows] == ["A1", "B2", "C3"]


def test_values_stay_strings() -> None:
    rows = _rows(b"zip,id\n02134,007\n", "a.csv", "text/csv")
    assert rows == [{"zip": "02134", "id": "007"}]


def test_fields_select_exactly_those_keys_in_order() -> None:
    content = b"sku,qty,price\nA1,2,9.50\n"
    rows = _rows(content, "items.csv", "text/csv", fields=["price", "missing", "sku"])
    assert rows == [{"price": "9.50", "missing": None, "sku": "A1"}]
    assert list(rows[0]) == ["price", "missing", "sku"]


# --- JSON ---------------------------------------------------------------------------------


def test_json_list_keeps_json_values() -> None:
    content = b'[{"sku": "A1", "qty": 2, "price": 9.5, "tags": ["a"], "gift": false, "note": null}]'
    rows = _rows(content, "items.json", "application/json")
    assert rows == [
        {"sku": "A1", "qty": 2, "price": 9.5, "tags": ["a"], "gift": False, "note": None}
    ]


def test_json_line_items_and_fields() -> None:
    content = b'{"invoice": "X-1", "line_items": [{"sku": "A1", "qty": 2}, {"sku": "B2"}]}'
    rows = _rows(content, "invoice.json", "", fields=["sku", "qty"])
    assert rows == [{"sku": "A1", "qty": 2}, {"sku": "B2", "qty": None}]


@pytest.mark.parametrize(
    "content",
    [
        b'[{"sku": "A1"}',
        b"{'sku': 'A1'}",
        b'[{"price": NaN}]',
        b'[{"price": 1e999}]',
    ],
)
def test_invalid_json(content: bytes) -> None:
    assert _code(content, "items.json", "application/json") == "invalid_json"


def test_json_nested_past_the_parser_is_too_deeply_nested_even_unbounded() -> None:
    assert _code(b"[" * 50_000, "items.json", "application/json") == "too_deeply_nested"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b'"just a string"', "the document is a string"),
        (b'{"items": []}', 'without "line_items"'),
        (b'{"line_items": {"sku": "A1"}}', '"line_items" is an object'),
        (b'[{"sku": "A1"}, 42]', "item 2 is a number"),
    ],
)
def test_json_of_the_wrong_shape_says_the_expected_shape(content: bytes, said: str) -> None:
    with pytest.raises(ExtractionError) as caught:
        _rows(content, "items.json", "application/json")
    assert caught.value.code == "invalid_json"
    assert 'expected a list of objects or {"line_items": [...]}' in caught.value.message
    assert said in caught.value.message


@pytest.mark.parametrize("content", [b"[]", b'{"line_items": []}'])
def test_json_without_rows_is_empty_document(content: bytes) -> None:
    assert _code(content, "items.json", "application/json") == "empty_document"


# --- PDF ----------------------------------------------------------------------------------


def test_pdf_table_spanning_two_pages_with_repeated_header() -> None:
    page1 = _table_ops([HEADER, ["A1", "Bolt (M6)", "10"], ["B2", "Nut", "20"]])
    page2 = _table_ops([HEADER, ["C3", "Washer", "30"]])
    rows = _rows(_pdf([page1, page2]), "invoice.pdf", "application/pdf")
    assert rows == [
        {"SKU": "A1", "Description": "Bolt (M6)", "Qty": "10"},
        {"SKU": "B2", "Description": "Nut", "Qty": "20"},
        {"SKU": "C3", "Description": "Washer", "Qty": "30"},
    ]


def test_pdf_continuation_without_header_is_appended_and_fields_apply() -> None:
    page1 = _table_ops([HEADER, ["A1", "Bolt", "10"]])
    page2 = _table_ops([["B2", "Nut", ""], ["C3", "Washer", "30"]])
    rows = _rows(_pdf([page1, page2]), "scan", "application/octet-stream", fields=["Qty", "SKU"])
    assert rows == [
        {"Qty": "10", "SKU": "A1"},
        {"Qty": "", "SKU": "B2"},
        {"Qty": "30", "SKU": "C3"},
    ]


def test_pdf_without_a_table_is_no_table_found() -> None:
    content = _pdf([_text_ops(["Dear customer,", "no table on this page."])])
    assert _code(content, "letter.pdf", "application/pdf") == "no_table_found"


def test_pdf_with_header_only_is_empty_document() -> None:
    assert _code(_pdf([_table_ops([HEADER])]), "empty.pdf", "application/pdf") == "empty_document"


@pytest.mark.parametrize("content", [bytes(range(256)) * 4, b"%PDF-1.4\nnot really a pdf\n"])
def test_bytes_declared_pdf_that_pdfplumber_cannot_open_are_invalid_pdf(content: bytes) -> None:
    assert _code(content, "broken.pdf", "application/pdf") == "invalid_pdf"


# --- format detection ---------------------------------------------------------------------


def test_pdf_magic_wins_over_a_wrong_declared_type() -> None:
    content = _pdf([_table_ops([HEADER, ["A1", "Bolt", "1"]])])
    assert _rows(content, "items.csv", "text/csv") == [
        {"SKU": "A1", "Description": "Bolt", "Qty": "1"}
    ]


def test_octet_stream_is_sniffed() -> None:
    assert _rows(b'[{"a": 1}]', "upload", "application/octet-stream") == [{"a": 1}]
    assert _rows(b"a;b\n1;2\n3;4\n", "upload", "application/octet-stream") == [
        {"a": "1", "b": "2"},
        {"a": "3", "b": "4"},
    ]
    assert _code(b'[{"a": 1}', "upload", "application/octet-stream") == "invalid_json"


def test_extension_rescues_a_csv_sent_as_vnd_ms_excel() -> None:
    rows = _rows(b"a,b\n1,2\n", "export.CSV", "application/vnd.ms-excel")
    assert rows == [{"a": "1", "b": "2"}]


@pytest.mark.parametrize(
    ("content", "filename", "content_type"),
    [
        (bytes(range(256)) * 4, "blob.bin", "application/octet-stream"),
        (b"GIF89a\x01\x00\x01\x00", "anim.gif", "image/gif"),
        (b"{\\rtf1 a, b}", "letter.rtf", "application/rtf"),
        (b"Just a sentence without any table.\n", "notes.txt", "text/plain"),
        (b"\x00\x01\x02garbage", "items.csv", "text/csv"),
    ],
)
def test_anything_else_is_unsupported_format(
    content: bytes, filename: str, content_type: str
) -> None:
    assert _code(content, filename, content_type) == "unsupported_format"


# --- the error type -----------------------------------------------------------------------


def test_extraction_error_carries_code_and_message_and_pickles() -> None:
    error = ExtractionError("bad_total", "totals do not add up")
    assert (error.code, error.message, str(error)) == (
        "bad_total",
        "totals do not add up",
        "bad_total: totals do not add up",
    )
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - bytes made two calls earlier
    assert (copy.code, copy.message) == ("bad_total", "totals do not add up")


# --- loader -------------------------------------------------------------------------------


def test_load_extractor_resolves_the_default_and_dotted_attributes() -> None:
    assert load_extractor("relay.extract:extract") is extract
    loaded = load_extractor("json:JSONDecoder.decode")
    assert loaded is cast(object, __import__("json").JSONDecoder.decode)


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("relay.extract", "expected 'package.module:callable'"),
        ("relay.extract:", "expected 'package.module:callable'"),
        (":extract", "expected 'package.module:callable'"),
        ("a:b:c", "expected 'package.module:callable'"),
        ("relay_no_such_module_x:extract", "no module named 'relay_no_such_module_x'"),
        ("relay.extract:no_such_thing", "has no attribute 'no_such_thing'"),
        ("math:pi", "'pi' is a float, not a callable"),
    ],
)
def test_load_extractor_rejects_bad_specs_with_a_clear_config_error(spec: str, said: str) -> None:
    with pytest.raises(ExtractorConfigError) as caught:
        load_extractor(spec)
    assert said in str(caught.value)
    assert repr(spec) in str(caught.value)


def test_load_extractor_reports_a_plugin_that_fails_to_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "relay_test_plugin_broken.py").write_text("import relay_test_missing_dependency\n")
    (tmp_path / "relay_test_plugin_raises.py").write_text("raise RuntimeError('no licence key')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("relay_test_plugin_broken", "relay_test_plugin_raises"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ExtractorConfigError, match="no module 'relay_test_missing_dependency'"):
        load_extractor("relay_test_plugin_broken:extract")
    with pytest.raises(ExtractorConfigError, match="RuntimeError: no licence key"):
        load_extractor("relay_test_plugin_raises:extract")


def test_loaded_plugin_runs_under_the_contract(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "relay_test_plugin_ok.py").write_text(
        "from relay.extract import ExtractionError\n"
        "def upper(data, *, filename, content_type, fields):\n"
        "    if not data:\n"
        "        raise ExtractionError('nothing_here', 'no bytes')\n"
        "    return [{'text': data.decode().upper(), 'name': filename, 'fields': fields}]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "relay_test_plugin_ok", raising=False)
    plugin = load_extractor("relay_test_plugin_ok:upper")
    ok = run_extractor(plugin, b"abc", filename="a.txt", content_type="text/plain", fields=["x"])
    assert ok == ([{"text": "ABC", "name": "a.txt", "fields": ["x"]}], None)
    failed = run_extractor(plugin, b"", filename="a.txt", content_type="text/plain", fields=[])
    assert failed == (None, ("nothing_here", "no bytes"))


# --- run_extractor ------------------------------------------------------------------------


def _raises_plain(
    content: bytes, /, *, filename: str, content_type: str, fields: list[str]
) -> Rows:
    raise KeyError("price" * 200)


def _returns(value: object) -> Extractor:
    def extractor(
        content: bytes, /, *, filename: str, content_type: str, fields: list[str]
    ) -> Rows:
        return cast(Rows, value)

    return extractor


def _run(
    extractor: Extractor, content: bytes = b"a,b\n1,2\n"
) -> tuple[Rows | None, tuple[str, str] | None]:
    return run_extractor(extractor, content, filename="a.csv", content_type="text/csv", fields=[])


def test_run_extractor_passes_rows_through_and_maps_extraction_errors() -> None:
    assert _run(extract) == ([{"a": "1", "b": "2"}], None)
    assert _run(extract, b"a,b\n") == (
        None,
        ("empty_document", "the table has a header row but no data rows"),
    )


def test_run_extractor_maps_any_other_exception_to_extraction_error() -> None:
    rows, failure = _run(_raises_plain)
    assert rows is None and failure is not None
    code, message = failure
    assert code == "extraction_error"
    assert message.startswith("KeyError: 'pricepriceprice")
    assert len(message) == 500


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (None, "extractor returned NoneType, expected a list of dicts"),
        (({"a": 1},), "extractor returned tuple, expected a list of dicts"),
        ([{"a": 1}, "b"], "extractor returned a list whose item 1 is str, expected a dict"),
        ([{1: "a"}], "with a key that is not a string"),
        ([{"a": object()}], "not JSON-serialisable"),
        ([{"a": float("nan")}], "not JSON-serialisable"),
    ],
)
def test_run_extractor_rejects_a_bad_return_value(value: object, said: str) -> None:
    rows, failure = _run(_returns(value))
    assert rows is None
    assert failure is not None and failure[0] == "extraction_error"
    assert said in failure[1]


# --- bounds --------------------------------------------------------------------------------


def test_csv_sniffer_sees_a_bounded_sample_so_a_quote_storm_is_cheap() -> None:
    # 16 KB of '\n"' cost csv.Sniffer ~7 s here with a 16 KiB sample; the bound is generous.
    started = time.perf_counter()
    code = _code(quote_storm(16 * 1024), "upload", "application/octet-stream")
    assert time.perf_counter() - started < 1.0
    assert code in {"unsupported_format", "invalid_csv", "empty_document"}


def test_sniffer_sample_ends_at_a_line_end_and_keeps_at_most_64_lines() -> None:
    text = "".join(f"a,{i}\n" for i in range(1000))
    sample = sniffer_sample(text)
    assert sample.count("\n") == 63 and sample.endswith("a,63")
    long_lines = ("x" * 100 + "\n") * 100
    assert sniffer_sample(long_lines) == ("x" * 100 + "\n") * 39 + "x" * 100


@pytest.mark.parametrize(
    "row",
    [
        {"a": "b"},
        {"a": None, "long key": ""},
        {'quote"d': 'line\nbreak "x"', "é": "日本語"},
        {"n": 1, "f": 2.5, "t": True, "l": [1, 2], "o": {}},
        {},
    ],
)
def test_row_budget_charges_no_more_than_the_rows_json(row: dict[str, object]) -> None:
    rows = [row, row, row]
    size = len(encode_rows(rows, None))
    budget = RowBudget(ExtractLimits(max_result_bytes=size))
    for r in rows:
        budget.charge(r)  # never refuses what fits
    assert budget.spent <= size
    with pytest.raises(ExtractionError) as caught:
        RowBudget(ExtractLimits(max_result_bytes=1)).charge(row)
    assert caught.value.code == "result_too_large"


def test_result_bound_stops_the_reader_not_just_the_serialiser() -> None:
    limits = ExtractLimits(max_result_bytes=1 << 20)
    with applied(limits), pytest.raises(ExtractionError) as caught:
        _rows(wide_csv(), "wide.csv")
    assert caught.value.code == "result_too_large"
    # Fields count only the kept keys: the same table projected on one column fits.
    key = "a_rather_long_and_descriptive_column_name_0000"
    with applied(ExtractLimits(max_result_bytes=1 << 20, fields=(key,))):
        rows = _rows(wide_csv(padded=True), "wide.csv", fields=[key])
    assert len(rows) == 5_000
    with applied(ExtractLimits(max_result_bytes=1 << 20)), pytest.raises(ExtractionError) as caught:
        _rows(wide_csv(padded=True), "wide.csv")
    assert caught.value.code == "result_too_large"


def test_a_decompression_bomb_pdf_is_a_memory_error_not_invalid_pdf() -> None:
    # pdfplumber wraps pdfminer's MemoryError; the 1 GiB bomb itself runs under the memory
    # limit in tests/test_sandbox.py and tests/e2e/test_bounds.py.
    error = MemoryError("Unable to allocate output buffer.")
    wrapped = RuntimeError("PdfminerException")
    wrapped.__cause__ = error
    assert _out_of_memory(wrapped) and not _out_of_memory(RuntimeError("other"))
