"""The exports' rendering (``relay.exports``) on tables built here, read back by independent
readers (``tests/support/exported.py``): spans, escaping, the formula guard, names, bounds,
and the workbook's and archive's shape. The API's side, on documents a real worker
processed, is ``tests/test_api_exports.py``."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

from relay.exports.batch import ArchiveExport, Source, WorkbookExport
from relay.exports.formats import CSV, HTML, JSON, MARKDOWN, XLSX, Format, write_table
from relay.exports.grid import ExportLimits, ExportTooLarge, Meter, read_table, spans_of
from relay.exports.names import FileNames, SheetNames, content_disposition, file_stem
from relay.exports.text import guard_formula
from tests.support.exported import (
    expected,
    load_xlsx,
    read_csv,
    read_html,
    read_markdown,
    read_xlsx,
    sheet_grid,
    unguard,
)

LIMITS = ExportLimits(max_tables=1000, max_cells=2_000_000, max_bytes=1 << 27)

# A header cell over two columns, a row label over two rows, a block of 2 x 2 in the body.
SPANNED: dict[str, Any] = {
    "page": 3,
    "rows": [
        ["Region", "2025", None, "Note"],
        ["", "H1", "H2", ""],
        ["North", "10", "12", "ok"],
        [None, "11", "13", None],
        ["South", "merged block", None, "x"],
        ["", None, None, "y"],
    ],
    "confidence": None,
    "bbox": [0, 0, 100, 60],
    "cells": [
        {"row": 0, "col": 0, "row_span": 2, "col_span": 1, "bbox": None},
        {"row": 0, "col": 1, "row_span": 1, "col_span": 2, "bbox": None},
        {"row": 0, "col": 3, "row_span": 2, "col_span": 1, "bbox": None},
        {"row": 1, "col": 1, "row_span": 1, "col_span": 1, "bbox": None},
        {"row": 2, "col": 0, "row_span": 2, "col_span": 1, "bbox": None},
        {"row": 2, "col": 3, "row_span": 2, "col_span": 1, "bbox": None},
        {"row": 4, "col": 1, "row_span": 2, "col_span": 2, "bbox": None},
    ],
}
SPANS = {
    (0, 0): (2, 1),
    (0, 1): (1, 2),
    (0, 3): (2, 1),
    (2, 0): (2, 1),
    (2, 3): (2, 1),
    (4, 1): (2, 2),
}


def render(fmt: Format, table: dict[str, Any], **kwargs: Any) -> bytes:
    out = io.BytesIO()
    write_table(fmt, table, out, filename="report.pdf", n=2, limits=LIMITS, **kwargs)
    return out.getvalue()


# -- spans ----------------------------------------------------------------------------------


def test_spans_are_read_from_cells_and_every_span_is_one_without_them() -> None:
    assert spans_of(SPANNED, read_table(SPANNED).rows) == SPANS
    plain = {k: v for k, v in SPANNED.items() if k != "cells"}
    grid = read_table(plain)
    assert grid.spans == {} and grid.covered == frozenset()
    assert grid.span(0, 1) == (1, 1)


def test_spans_that_do_not_fit_are_ignored_or_cut() -> None:
    rows: list[list[str | None]] = [["a", None, "c"], [None, None, "f"], ["g", "h", "i"]]
    cells: list[Any] = [
        {"row": 0, "col": 0, "row_span": 2, "col_span": 2},  # kept
        {"row": 0, "col": 1, "row_span": 1, "col_span": 1},  # inside the first: a 1x1 anchor
        {"row": 1, "col": 1, "row_span": 2, "col_span": 1},  # overlaps the first: ignored
        {"row": 1, "col": 2, "row_span": 9, "col_span": 9},  # cut at the edge, covers "i": ignored
        {"row": 2, "col": 0, "row_span": 1, "col_span": 5},  # covers "h": ignored
        {"row": 5, "col": 0, "row_span": 2, "col_span": 1},  # outside the grid
        {"row": True, "col": 0, "row_span": 2, "col_span": 1},  # not an int
        {"row": 0, "col": 2, "row_span": 0, "col_span": 1},  # no span of 0
        "junk",
        None,
    ]
    assert spans_of({"cells": cells}, rows) == {(0, 0): (2, 2)}
    tail: list[list[str | None]] = [["a", "b"], [None, None]]
    found = spans_of({"cells": [{"row": 0, "col": 1, "row_span": 7, "col_span": 3}]}, tail)
    assert found == {(0, 1): (2, 1)}  # cut to the grid's two rows and last column


def test_hostile_cells_cost_at_most_a_few_passes_over_the_grid() -> None:
    rows: list[list[str | None]] = [[None] * 100 for _ in range(100)]
    rows[99][99] = "corner"  # every span below reaches it, so none is kept
    cells = [
        {"row": r, "col": c, "row_span": 100, "col_span": 100} for r in range(50) for c in range(50)
    ] * 10
    assert spans_of({"cells": cells}, rows) == {}


def test_a_table_is_read_whatever_its_rows_hold() -> None:
    grid = read_table({"page": 2, "rows": [["a", 1, None], ["é\ud800"], "junk"], "cells": 5})
    assert grid.rows == [["a", None, None], ["é\ufffd", None, None], [None, None, None]]
    assert (grid.page, grid.width, grid.height, grid.cells) == (2, 3, 3, 9)
    assert grid.text_bytes == 1 + len("é\ufffd".encode())
    empty = read_table({"rows": []})
    assert (empty.page, empty.width, empty.height) == (1, 0, 0)
    nothing = {"page": 1, "rows": []}
    assert render(CSV, nothing) == b"" and render(MARKDOWN, nothing) == b""
    assert read_html(render(HTML, nothing))[0] == []
    assert read_xlsx(render(XLSX, nothing))[0] == [[""]]  # openpyxl's empty sheet: A1


# -- the formats ----------------------------------------------------------------------------


def test_csv_is_rfc_4180_with_covered_cells_empty() -> None:
    data = render(CSV, SPANNED)
    assert data.endswith(b"\r\n") and b"\n" not in data.replace(b"\r\n", b"")
    assert read_csv(data) == expected(SPANNED["rows"])
    tricky: dict[str, Any] = {
        "page": 1,
        "rows": [["a,b", 'say "hi"', "two\nlines", "tab\tin", "", None, "é€😀"]],
    }
    assert read_csv(render(CSV, tricky)) == [expected(tricky["rows"])[0]]
    with_bom = render(CSV, tricky, bom=True)
    assert with_bom.startswith(b"\xef\xbb\xbf") and read_csv(with_bom) == read_csv(
        render(CSV, tricky)
    )


@pytest.mark.parametrize(
    ("cell", "written"),
    [
        ('=HYPERLINK("http://x")', '\'=HYPERLINK("http://x")'),
        ("+1+1", "'+1+1"),
        ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("\uff1d1+1", "'\uff1d1+1"),
        ("-12.50", "-12.50"),
        ("+3", "+3"),
        ("-1,234.00", "-1,234.00"),
        ("-5%", "-5%"),
        ("-.5", "-.5"),
        ("-", "-"),
        ("--", "--"),
        ("a=b", "a=b"),
        ("", ""),
    ],
)
def test_csv_guards_cells_a_spreadsheet_would_run(cell: str, written: str) -> None:
    assert guard_formula(cell) == written
    assert read_csv(render(CSV, {"page": 1, "rows": [[cell, "x"]]})) == [[written, "x"]]
    assert unguard(written) == cell


def test_markdown_is_a_gfm_table_that_reads_back() -> None:
    data = render(MARKDOWN, SPANNED)
    assert read_markdown(data) == expected(SPANNED["rows"])
    hostile = [
        ["a|b", "back\\slash", "*bold* _it_ `code`"],
        ["<script>x</script>", "two\r\nlines", "[link](http://x) &amp; ~~s~~"],
    ]
    data = render(MARKDOWN, {"page": 1, "rows": hostile})
    assert b"<script>" not in data and b"a|b" not in data
    assert read_markdown(data) == [
        ["a|b", "back\\slash", "*bold* _it_ `code`"],
        ["<script>x</script>", "two\nlines", "[link](http://x) &amp; ~~s~~"],
    ]


def test_html_has_the_spans_as_rowspan_and_colspan_and_escapes_everything() -> None:
    data = render(HTML, SPANNED)
    grid, spans, head_rows, captions = read_html(data)
    assert grid == expected(SPANNED["rows"])
    assert spans == SPANS
    assert head_rows == 2  # the header's row spans reach the second row
    assert captions == ["report.pdf p3 t2"]
    hostile: dict[str, Any] = {
        "page": 1,
        "rows": [["<b>x</b>", "\"'&"], ["<script>alert(1)</script>", "a\nb"]],
    }
    data = render(HTML, hostile)
    assert b"<script>" not in data and b"<b>" not in data
    grid, spans, head_rows, _ = read_html(data)
    assert grid == expected(hostile["rows"]) and spans == {} and head_rows == 1


def test_xlsx_merges_the_spans_and_writes_every_cell_as_text() -> None:
    data = render(XLSX, SPANNED)
    grid, spans, ws = read_xlsx(data)
    assert grid == expected(SPANNED["rows"])
    assert spans == SPANS
    assert ws.title == "report.pdf p3 t2"
    assert ws["A1"].font.b and not ws["A3"].font.b  # the header row is bold
    assert ws.freeze_panes == "A2"
    texts = ["=1+1", "0012", "1e5", "TRUE", "http://example.com", "2026-01-02", "-3"]
    grid, _, ws = read_xlsx(render(XLSX, {"page": 1, "rows": [texts]}))
    assert grid == [texts]
    assert all(cell.data_type == "s" for cell in ws[1])


def test_a_cell_longer_than_excel_holds_is_cut_in_xlsx_only() -> None:
    long = "x" * 40_000
    grid, _, _ = read_xlsx(render(XLSX, {"page": 1, "rows": [[long]]}))
    assert grid == [["x" * 32_767]]
    assert read_csv(render(CSV, {"page": 1, "rows": [[long]]})) == [[long]]


def test_json_is_the_table_as_stored() -> None:
    import json

    assert json.loads(render(JSON, SPANNED)) == SPANNED


# -- names ----------------------------------------------------------------------------------


def test_sheet_names_follow_excels_rules_and_stay_unique() -> None:
    names = SheetNames()
    first = names.take("invoice.pdf", " p2 t1")
    assert first == "invoice.pdf p2 t1"
    assert names.take("INVOICE.pdf", " p2 t1") == "INVOICE.pdf p2 t1 (2)"
    long = names.take("a_really_long_supplier_invoice_name_2026.pdf", " p12 t3")
    assert len(long) <= 31 and long.endswith("… p12 t3") and long.startswith("a_really")
    odd = names.take("q[1]: a/b\\c*d?.pdf", " p1 t1")
    assert not set(odd) & set("[]:*?/\\") and len(odd) <= 31
    assert names.take("'quoted'", "") == "quoted"
    assert names.take("Index", "") == "Index (2)"  # the index sheet's name is reserved
    astral = names.take("😀" * 20, " p1 t1")
    assert len(astral.encode("utf-16-le")) // 2 <= 31
    many = {names.take("x" * 40, " p1 t1").lower() for _ in range(200)}
    assert len(many) == 200 and all(len(n) <= 31 for n in many)


def test_file_names_and_the_download_header() -> None:
    assert file_stem("invoice.pdf") == "invoice"
    assert file_stem("../etc/passwd") == "passwd"
    assert file_stem('a<b>:"c"|d?*.csv') == "a_b___c__d__"
    assert file_stem(".hidden") == "hidden"
    assert file_stem("-rf.csv") == "_rf" and file_stem("=cmd.csv") == "_cmd"
    assert file_stem("...") == "document"
    assert file_stem("x" * 300 + ".pdf") == "x" * 100
    names = FileNames(reserved=("index.csv",))
    assert names.take("index", "csv") == "index_2.csv"
    assert names.take("a", "csv") == "a.csv" and names.take("A", "csv") == "A_2.csv"
    assert content_disposition("b1.xlsx") == 'attachment; filename="b1.xlsx"'
    header = content_disposition('Rechnung "März".csv')
    assert header == (
        "attachment; filename=\"Rechnung _M_rz_.csv\"; filename*=UTF-8''Rechnung%20_M%C3%A4rz_.csv"
    )
    assert "\r" not in content_disposition("a\r\nSet-Cookie: x.csv")


# -- bounds ---------------------------------------------------------------------------------


def test_the_meter_refuses_the_table_that_passes_a_bound() -> None:
    grid = read_table({"page": 1, "rows": [["ab", "cd"], ["ef", None]]})  # 4 cells, 6 bytes
    meter = Meter(ExportLimits(max_tables=2, max_cells=100, max_bytes=100))
    meter.charge(grid)
    meter.charge(grid)
    with pytest.raises(ExportTooLarge, match="RELAY_EXPORT_MAX_TABLES"):
        meter.charge(grid)
    Meter(ExportLimits(max_tables=9, max_cells=4, max_bytes=6)).charge(grid)  # just fits
    with pytest.raises(ExportTooLarge, match="RELAY_EXPORT_MAX_CELLS"):
        Meter(ExportLimits(max_tables=9, max_cells=3, max_bytes=100)).charge(grid)
    with pytest.raises(ExportTooLarge, match="RELAY_EXPORT_MAX_BYTES"):
        Meter(ExportLimits(max_tables=9, max_cells=9, max_bytes=5)).charge(grid)
    out = io.BytesIO()
    with pytest.raises(ExportTooLarge):
        write_table(
            CSV,
            {"page": 1, "rows": [["a"] * 10]},
            out,
            filename="f",
            n=1,
            limits=ExportLimits(1, 9, 100),
        )
    assert out.getvalue() == b""  # refused before anything was written


# -- a batch --------------------------------------------------------------------------------


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_workbook_holds_an_index_and_a_sheet_per_table_without_an_open_file_each() -> None:
    out = io.BytesIO()
    export = WorkbookExport(out, LIMITS, title="b1")
    before = _open_fds()
    small = {"page": 1, "rows": [["k", "v"], ["a", "1"]]}
    for i in range(120):
        export.add(Source(f"doc_{i}", f"file{i % 7}.csv", "succeeded"), [small])
    assert _open_fds() <= before + 2  # each finished sheet's temporary file was closed
    export.add(Source("doc_q", "late.csv", "queued"), None)
    export.add(Source("doc_f", "bad.bin", "failed", "unsupported_format"), None)
    export.add(Source("doc_s", "empty.pdf", "succeeded"), [])
    export.finish()
    export.close()
    book = load_xlsx(out.getvalue())
    assert book.sheetnames[0] == "Index" and len(book.sheetnames) == 121
    index, _ = sheet_grid(book["Index"], text_only=False)
    ws = book["Index"]
    assert index[0] == [
        "sheet",
        "document_id",
        "filename",
        "page",
        "table",
        "rows",
        "columns",
        "status",
    ]
    assert len(index) == 1 + 120 + 3
    assert index[1][1:] == ["doc_0", "file0.csv", 1, 1, 2, 2, "succeeded"]
    assert [r[-1] for r in index[-3:]] == [
        "queued",
        "failed: unsupported_format",
        "succeeded: no table",
    ]
    assert ws["A2"].hyperlink.location == "'file0.csv p1 t1'!A1"
    for row in index[1:121]:
        assert sheet_grid(book[row[0]]) == ([["k", "v"], ["a", "1"]], {})


def test_an_archive_holds_a_csv_per_table_and_its_index(tmp_path: Path) -> None:
    out = io.BytesIO()
    export = ArchiveExport(out, LIMITS, bom=True)
    export.add(Source("doc_1", "=evil.pdf", "succeeded"), [SPANNED, SPANNED])
    export.add(Source("doc_2", "evil.pdf", "succeeded"), [SPANNED])
    export.add(Source("doc_3", "x.bin", "failed", "unsupported_format"), None)
    export.finish()
    export.close()
    out.seek(0)
    with zipfile.ZipFile(out) as archive:
        assert archive.testzip() is None
        names = archive.namelist()
        assert names == ["_evil_p3_t1.csv", "_evil_p3_t2.csv", "evil_p3_t1.csv", "index.csv"]
        for name in names[:-1]:
            assert read_csv(archive.read(name)) == expected(SPANNED["rows"])
        index = read_csv(archive.read("index.csv"))
    assert index[0][0] == "file" and len(index) == 5
    assert index[1][:3] == ["_evil_p3_t1.csv", "doc_1", "'=evil.pdf"]  # guarded in the index
    assert index[4] == ["", "doc_3", "x.bin", "", "", "", "", "failed: unsupported_format"]


def test_an_export_refused_midway_leaves_no_open_or_stored_file() -> None:
    small = {"page": 1, "rows": [["k", "v"], ["a", "1"]]}
    limits = ExportLimits(max_tables=5, max_cells=1000, max_bytes=1000)
    for make in (
        lambda out: WorkbookExport(out, limits, title="b"),
        lambda out: ArchiveExport(out, limits),
    ):
        before = _open_fds()
        export = make(io.BytesIO())
        tmp = getattr(export, "_tmp", None)
        with pytest.raises(ExportTooLarge, match="RELAY_EXPORT_MAX_TABLES"):
            for i in range(10):
                export.add(Source(f"doc_{i}", "f.csv", "succeeded"), [small])
        export.close()
        assert _open_fds() == before
        if tmp is not None:
            assert not Path(tmp.name).exists()
