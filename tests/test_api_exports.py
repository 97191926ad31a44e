"""``GET /documents/{id}/tables/{n}`` and ``GET /batches/{name}/export`` on the real API
(uvicorn) and a real Redis, the documents processed by a real worker process: every file read
back by an independent reader (``tests/support/exported.py``) and compared with the tables
``GET /batches/{name}/results`` serves; ownership, 409, 422, the bounds and a busy server.

The spans test finishes its document through the workers' own store (``Store.claim_turn``
and ``Store.finish``, as a worker does) with a result whose tables carry ``cells``, so that
merges are checked end to end whatever the engines produce today.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from relay.api import exports
from relay.api.state import STATE_KEY, AppState
from relay.config import RateLimit
from relay.devtools.processes import Stack, stop_all
from relay.devtools.sample_documents import HEADER, pdf, table_ops
from relay.redis import keyspace
from relay.state.blobs import BlobStore
from relay.state.claims import Store
from tests.support.api_fixtures import V1, Api, ApiFactory, api_factory_fixture  # noqa: F401
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
from tests.support.helpers import wait_until

XLSX_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
# Cells a spreadsheet would run, a quote, a comma, a line break, text that looks like data.
TRICKY_CSV = (
    'sku,qty,note\nA-1,2,"=HYPERLINK(""http://x"")"\nB-2,-5,"two, parts"\n'
    'C-3,0012,"line one\nline two"\nD-4,+7,Zürich ✓\n'
).encode()


@pytest.fixture(name="api")
def api_fixture(api_factory: ApiFactory) -> Api:
    """The app, with a status window the polling below never fills."""
    return api_factory(status_rate_limit=RateLimit(100_000, 60_000))


@pytest.fixture(name="worker")
def worker_fixture(redis_url: str, tmp_path: Path) -> Iterator[Stack]:
    """A real ``relay worker`` process on the test's Redis."""
    stack = Stack(redis_url=redis_url, tmp=tmp_path)
    stack.worker()
    yield stack
    # A stop signal landing while RQ logs is lost (tests/test_worker.py): killed after 3 s
    # rather than the default 15, nothing here depends on a graceful stop.
    stop_all(stack.procs, timeout=3)


def processed(api: Api, account: str, batch: str) -> None:
    """Hand the batch to the workers and wait until every document is done."""
    auth = api.auth(account)
    assert api.client.post(f"{V1}/batches/{batch}/process", headers=auth).status_code == 202

    def done() -> bool:
        found: bool = api.client.get(f"{V1}/batches/{batch}", headers=auth).json()["all_done"]
        return found

    wait_until(done, 90, 0.1, f"batch {batch} not processed")


def results(api: Api, account: str, batch: str) -> list[dict[str, Any]]:
    """Every document of the batch with its tables (GET .../results, all pages)."""
    docs: list[dict[str, Any]] = []
    cursor = ""
    while True:
        page = api.client.get(
            f"{V1}/batches/{batch}/results",
            headers=api.auth(account),
            params={"limit": 200, "cursor": cursor},
        ).json()
        docs += page["documents"]
        if page["next_cursor"] is None:
            return docs
        cursor = page["next_cursor"]


def table(api: Api, account: str, doc_id: str, n: int | str, **params: str) -> httpx.Response:
    return api.client.get(
        f"{V1}/documents/{doc_id}/tables/{n}", headers=api.auth(account), params=params
    )


def export(api: Api, account: str, batch: str, **params: str) -> httpx.Response:
    return api.client.get(f"{V1}/batches/{batch}/export", headers=api.auth(account), params=params)


def assert_download(r: httpx.Response, media_type: str, filename: str) -> None:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].split(";")[0] == media_type
    assert r.headers["content-disposition"] == f'attachment; filename="{filename}"'
    assert r.headers["content-length"] == str(len(r.content))
    assert r.headers["x-content-type-options"] == "nosniff"
    assert {"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"} <= set(r.headers)


def assert_error(r: httpx.Response, status: int, error_type: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]["type"] == error_type
    assert "ratelimit-remaining" in r.headers


# -- one table, every format ------------------------------------------------------------------


def test_every_format_of_every_table_reads_back_as_the_results_show_it(
    api: Api, worker: Stack
) -> None:
    api.upload_ok("acme", "b1", content=TRICKY_CSV, filename="items.csv")
    invoice = table_ops([HEADER, ["A1", "Bolt", "10"], ["B|2", "Nut <M8>", "5"]], top=720)
    prices = table_ops([["Item", "Unit price"], ["Bolt", "0.10"]], top=500)
    api.upload_ok(
        "acme",
        "b1",
        content=pdf([invoice + "\n" + prices]),
        filename="Rechnung März.pdf",
        content_type="application/pdf",
    )
    api.upload_ok("acme", "b1", content=b"\x00\x01garbage", filename="c.bin", content_type=None)
    processed(api, "acme", "b1")
    by_name = {d["filename"]: d for d in results(api, "acme", "b1")}
    assert len(by_name["items.csv"]["tables"]) == 1
    assert len(by_name["Rechnung März.pdf"]["tables"]) == 2
    checked = 0
    for doc in (by_name["items.csv"], by_name["Rechnung März.pdf"]):
        stem = doc["filename"].rsplit(".", 1)[0]
        for n, stored in enumerate(doc["tables"], start=1):
            want = expected(stored["rows"])
            base = f"{stem}_p{stored['page']}_t{n}"
            r = table(api, "acme", doc["id"], n, format="csv")
            cells = read_csv(r.content)
            assert [[unguard(c) for c in row] for row in cells] == want
            assert not r.content.startswith(b"\xef\xbb\xbf")
            r = table(api, "acme", doc["id"], n, format="xlsx")
            grid, spans, _ = read_xlsx(r.content)
            assert grid == want and spans == {}
            r = table(api, "acme", doc["id"], n, format="md")
            assert read_markdown(r.content) == want
            r = table(api, "acme", doc["id"], n, format="html")
            grid, spans, _, _ = read_html(r.content)
            assert grid == want and spans == {}
            assert r.headers["content-security-policy"].startswith("default-src 'none'")
            r = table(api, "acme", doc["id"], n, format="json")
            assert r.json() == stored
            for fmt, media in [
                ("csv", "text/csv"),
                ("xlsx", XLSX_TYPE),
                ("md", "text/markdown"),
                ("html", "text/html"),
                ("json", "application/json"),
            ]:
                r = table(api, "acme", doc["id"], n, format=fmt)
                if doc["filename"].isascii():
                    assert_download(r, media, f"{base}.{fmt}")
                else:
                    assert r.status_code == 200
                    disposition = r.headers["content-disposition"]
                    assert disposition.startswith('attachment; filename="Rechnung M_rz_p1_t')
                    assert "filename*=UTF-8''Rechnung%20M%C3%A4rz_p1_t" in disposition
                checked += 1
    assert checked == 3 * 5
    items = by_name["items.csv"]
    # The default is CSV; the formula is guarded, the numbers and the rest are not.
    r = table(api, "acme", items["id"], 1)
    assert_download(r, "text/csv", "items_p1_t1.csv")
    assert r.headers["content-type"] == "text/csv; charset=utf-8; header=present"
    assert read_csv(r.content) == [
        ["sku", "qty", "note"],
        ["A-1", "2", '\'=HYPERLINK("http://x")'],
        ["B-2", "-5", "two, parts"],
        ["C-3", "0012", "line one\nline two"],
        ["D-4", "+7", "Zürich ✓"],
    ]
    with_bom = table(api, "acme", items["id"], 1, bom="true").content
    assert with_bom.startswith(b"\xef\xbb\xbf") and read_csv(with_bom) == read_csv(r.content)
    # XLSX keeps every cell as text: the formula is not one, 0012 keeps its zeros.
    grid, _, ws = read_xlsx(table(api, "acme", items["id"], 1, format="xlsx").content)
    assert grid[1][2] == '=HYPERLINK("http://x")' and grid[3][1] == "0012"
    assert all(cell.data_type == "s" for row in ws.iter_rows() for cell in row if cell.value)
    # A failed document has no tables: 409, its code in the message.
    failed = by_name["c.bin"]
    r = table(api, "acme", failed["id"], 1)
    assert_error(r, 409, "document_not_succeeded")
    assert "failed (unsupported_format)" in r.json()["error"]["message"]
    # The same batch as one workbook: an Index, then the three tables, the failure listed.
    r = export(api, "acme", "b1")
    assert_download(r, XLSX_TYPE, "b1.xlsx")
    book = load_xlsx(r.content)
    assert book.sheetnames == [
        "Index",
        "items.csv p1 t1",
        "Rechnung März.pdf p1 t1",
        "Rechnung März.pdf p1 t2",
    ]
    index, _ = sheet_grid(book["Index"], text_only=False)
    assert index[1:] == [
        ["items.csv p1 t1", items["id"], "items.csv", 1, 1, 5, 3, "succeeded"],
        [
            "Rechnung März.pdf p1 t1",
            by_name["Rechnung März.pdf"]["id"],
            "Rechnung März.pdf",
            1,
            1,
            3,
            3,
            "succeeded",
        ],
        [
            "Rechnung März.pdf p1 t2",
            by_name["Rechnung März.pdf"]["id"],
            "Rechnung März.pdf",
            1,
            2,
            2,
            2,
            "succeeded",
        ],
        ["", failed["id"], "c.bin", "", "", "", "", "failed: unsupported_format"],
    ]


# -- spans ------------------------------------------------------------------------------------

SPANNED_ROWS: list[list[str | None]] = [
    ["Region", "2025", None, "Note"],
    [None, "H1", "H2", None],
    ["North", "10", "12", "ok"],
    [None, "11", "13", "late"],
]
SPANNED_CELLS = [
    {"row": 0, "col": 0, "row_span": 2, "col_span": 1, "bbox": None},
    {"row": 0, "col": 1, "row_span": 1, "col_span": 2, "bbox": [10.0, 0.0, 50.0, 8.0]},
    {"row": 0, "col": 3, "row_span": 2, "col_span": 1, "bbox": None},
    {"row": 1, "col": 1, "row_span": 1, "col_span": 1, "bbox": None},
    {"row": 1, "col": 2, "row_span": 1, "col_span": 1, "bbox": None},
    {"row": 2, "col": 0, "row_span": 2, "col_span": 1, "bbox": None},
]
SPANS = {(0, 0): (2, 1), (0, 1): (1, 2), (0, 3): (2, 1), (2, 0): (2, 1)}


def test_spans_are_merged_in_xlsx_and_html_and_left_empty_in_csv_and_markdown(api: Api) -> None:
    doc = api.upload_ok("acme", "geo", content=b"%PDF-1.4 spans", filename="plan.pdf")
    assert api.client.post(f"{V1}/batches/geo/process", headers=api.auth("acme")).status_code == 202
    # Processed as a worker processes it, with a result whose table carries its geometry.
    store = Store(api.redis, BlobStore(""))
    claims, _ = store.claim_turn(
        keyspace.shard_for_batch("acme", "geo"), "tok", 30_000, documents=1, max_bytes=0
    )
    assert [c.doc_id for c in claims] == [doc["id"]]
    stored = {
        "page": 2,
        "rows": SPANNED_ROWS,
        "confidence": None,
        "bbox": [0.0, 0.0, 100.0, 40.0],
        "cells": SPANNED_CELLS,
    }
    ok, _ = store.finish(claims[0], line_items=[{"Region": "North"}], tables=[stored], error=None)
    assert ok
    want = expected(SPANNED_ROWS)
    r = table(api, "acme", doc["id"], 1, format="xlsx")
    assert_download(r, XLSX_TYPE, "plan_p2_t1.xlsx")
    grid, spans, ws = read_xlsx(r.content)
    assert grid == want and spans == SPANS
    assert ws.title == "plan.pdf p2 t1"
    grid, spans, head_rows, captions = read_html(
        table(api, "acme", doc["id"], 1, format="html").content
    )
    assert grid == want and spans == SPANS and head_rows == 2
    assert captions == ["plan.pdf p2 t1"]
    assert read_csv(table(api, "acme", doc["id"], 1).content) == want
    assert read_markdown(table(api, "acme", doc["id"], 1, format="md").content) == want
    assert table(api, "acme", doc["id"], 1, format="json").json() == stored
    book = load_xlsx(export(api, "acme", "geo").content)
    assert sheet_grid(book["plan.pdf p2 t1"]) == (want, SPANS)


# -- a batch of fifty tables --------------------------------------------------------------------


def test_a_batch_of_fifty_tables_exports_whole_and_the_bounds_refuse_more(
    api: Api, api_factory: ApiFactory, worker: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages of 7 documents, results fetched a few hundred bytes at a time: the export reads
    # the batch in many rounds, as it would a large one.
    monkeypatch.setattr(exports, "DOCUMENTS_PER_PAGE", 7)
    monkeypatch.setattr(exports, "RESULT_GROUP_BYTES", 300)
    for i in range(50):
        rows = "".join(f"item-{i}-{j},{i * j}\n" for j in range(i % 4 + 1))
        api.upload_ok("acme", "b50", content=f"sku,qty\n{rows}".encode(), filename=f"d{i:02}.csv")
    api.upload_ok("acme", "b50", content=b"\x00\x01", filename="bad.bin", content_type=None)
    processed(api, "acme", "b50")
    docs = results(api, "acme", "b50")
    assert len(docs) == 51 and sum(len(d["tables"] or []) for d in docs) == 50
    r = export(api, "acme", "b50", format="xlsx")
    assert_download(r, XLSX_TYPE, "b50.xlsx")
    book = load_xlsx(r.content)
    assert len(book.sheetnames) == 51 and book.sheetnames[0] == "Index"
    index, _ = sheet_grid(book["Index"], text_only=False)
    assert len(index) == 1 + 51
    for doc, row in zip(docs, index[1:], strict=True):
        assert row[1:3] == [doc["id"], doc["filename"]]
        if doc["tables"]:
            assert row[0] == f"{doc['filename']} p1 t1"
            assert sheet_grid(book[row[0]]) == (expected(doc["tables"][0]["rows"]), {})
        else:
            assert row[0] == "" and row[-1] == "failed: unsupported_format"
    r = export(api, "acme", "b50", format="zip", bom="true")
    assert_download(r, "application/zip", "b50.zip")
    with zipfile.ZipFile(io.BytesIO(r.content)) as archive:
        assert archive.testzip() is None
        names = archive.namelist()
        assert names == [f"d{i:02}_p1_t1.csv" for i in range(50)] + ["index.csv"]
        for doc in docs[:50]:
            data = archive.read(f"{doc['filename'][:-4]}_p1_t1.csv")
            assert data.startswith(b"\xef\xbb\xbf")
            assert read_csv(data) == expected(doc["tables"][0]["rows"])
        index_csv = read_csv(archive.read("index.csv"))
    assert index_csv[0] == [
        "file",
        "document_id",
        "filename",
        "page",
        "table",
        "rows",
        "columns",
        "status",
    ]
    assert len(index_csv) == 52 and index_csv[-1][-1] == "failed: unsupported_format"

    # The bounds: an API whose exports hold at most 50 tables serves this batch; at most 49,
    # a clear 422 and no file, in both formats. Cells and bytes count single tables too.
    exact = api_factory(export_max_tables=50)
    assert export(exact, "acme", "b50").status_code == 200
    tight = api_factory(export_max_tables=49)
    for fmt in ("xlsx", "zip"):
        r = export(tight, "acme", "b50", format=fmt)
        assert_error(r, 422, "export_too_large")
        assert "RELAY_EXPORT_MAX_TABLES" in r.json()["error"]["message"]
    first = docs[3]  # four rows of two cells (8 cells, 47 bytes)
    few_cells = api_factory(export_max_cells=7)
    r = table(few_cells, "acme", first["id"], 1, format="xlsx")
    assert_error(r, 422, "export_too_large")
    assert "RELAY_EXPORT_MAX_CELLS" in r.json()["error"]["message"]
    assert export(few_cells, "acme", "b50").status_code == 422
    few_bytes = api_factory(export_max_bytes=20)
    r = table(few_bytes, "acme", first["id"], 1)
    assert_error(r, 422, "export_too_large")
    assert "RELAY_EXPORT_MAX_BYTES" in r.json()["error"]["message"]


# -- who may read, and what is refused ------------------------------------------------------------


def test_only_the_owner_reads_and_odd_requests_get_clear_errors(api: Api) -> None:
    queued = api.upload_ok("acme", "b1")
    # Not processed yet: no tables (409); the batch's export lists it.
    r = table(api, "acme", queued["id"], 1)
    assert_error(r, 409, "document_not_succeeded")
    assert f"document {queued['id']} is queued" in r.json()["error"]["message"]
    r = export(api, "acme", "b1")
    index, _ = sheet_grid(load_xlsx(r.content)["Index"], text_only=False)
    assert index[1:] == [["", queued["id"], "items.csv", "", "", "", "", "queued"]]
    head = api.client.head(f"{V1}/batches/b1/export", headers=api.auth("acme"))
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == r.headers["content-length"]
    # Another account's document and batch are 404, exactly as ones that do not exist.
    unknown_doc = table(api, "acme", "doc_0aaaaaaaaaaaaaaaaaaaa", 1)
    assert_error(unknown_doc, 404, "not_found")
    r = table(api, "intruder", queued["id"], 1)
    assert_error(r, 404, "not_found")
    assert r.json() == unknown_doc.json()
    for fmt in ("xlsx", "zip"):
        unknown_batch = export(api, "acme", "nope", format=fmt)
        assert_error(unknown_batch, 404, "not_found")
        r = export(api, "intruder", "b1", format=fmt)
        assert_error(r, 404, "not_found")
        assert r.json() == unknown_batch.json()
    for n in ("0", "01", "x", "-1", "1.0", "9999999999"):
        assert_error(table(api, "acme", queued["id"], n), 404, "not_found")
    assert api.client.get(f"{V1}/batches/b1/export").status_code == 401
    assert api.client.get(f"{V1}/documents/{queued['id']}/tables/1").status_code == 401
    # Unknown formats and flags: 422, naming what is taken.
    for params in ({"format": "pdf"}, {"format": "CSV"}, {"format": ""}, {"bom": "1"}):
        r = table(api, "acme", queued["id"], 1, **params)
        assert_error(r, 422, "validation_error")
    r = export(api, "acme", "b1", format="csv")
    assert_error(r, 422, "validation_error")
    assert r.json()["error"]["message"] == "format must be one of: xlsx, zip"
    assert_error(export(api, "acme", "b1", bom="yes"), 422, "validation_error")


def test_a_server_building_its_share_of_exports_answers_503_with_retry_after(api: Api) -> None:
    api.upload_ok("acme", "b1")
    st = getattr(api.app.state, STATE_KEY)
    assert isinstance(st, AppState)
    assert export(api, "acme", "b1").status_code == 200
    assert st.exports.busy == 0  # given back
    st.exports.busy = st.exports.size  # every slot taken (as by exports being built)
    try:
        r = export(api, "acme", "b1")
        assert_error(r, 503, "export_busy")
        assert r.headers["retry-after"] == "5"
    finally:
        st.exports.busy = 0
    assert export(api, "acme", "b1", format="zip").status_code == 200
