"""End to end: XLSX, DOCX and HTML uploads read by a real worker into tables with their
spans, and hostile ones (a ZIP bomb, a sheet past the cell bound, the "billion laughs", an
HTML page of tables nested without end and one of too many cells) failing with their codes
while the worker goes on with the next document."""

from __future__ import annotations

from typing import Any

from relay.devtools.processes import Stack
from tests.e2e.client import Api
from tests.support import office_documents as docs
from tests.support.helpers import wait_until


def _documents(api: Api, batch: str) -> dict[str, dict[str, Any]]:
    r = api.http.get(f"/batches/{batch}/results")
    assert r.status_code == 200, r.text
    return {d["filename"]: d for d in r.json()["documents"]}


def _spans(table: dict[str, Any]) -> list[list[int]]:
    return [
        [c["row"], c["col"], c["row_span"], c["col_span"]]
        for c in table["cells"]
        if (c["row_span"], c["col_span"]) != (1, 1)
    ]


def test_office_documents_and_html_are_read_and_hostile_ones_fail_bounded(stack: Stack) -> None:
    # The cell bound lowered so that the sheet past it is quick to build and to refuse; the
    # archive bounds and the nesting depth are the defaults (256 MiB, 10,000 parts, 64).
    stack.env["RELAY_EXTRACT_MAX_CELLS"] = "50000"
    stack.api()
    worker = stack.worker()
    stack.detector()
    api = Api(stack.api_url, stack.create_key("acme"))
    api.upload("o1", docs.two_sheet_xlsx(), "orders.xlsx")
    api.upload("o1", docs.two_table_docx(), "order.docx")
    api.upload("o1", docs.HTML_PAGE, "prices.html")
    api.upload("o1", docs.zip_bomb_xlsx(300 << 20), "bomb.xlsx")  # 300 MiB in ~1.4 MB
    api.upload("o1", docs.huge_sheet_xlsx(600, 100), "huge.xlsx")  # 60,000 cells
    api.upload("o1", docs.billion_laughs_docx(), "laughs.docx")
    api.upload("o1", docs.deep_html(1000), "deep.html")
    api.upload("o1", docs.huge_html(60_000), "huge.html")
    api.process("o1", fields=["sku", "price"])
    wait_until(lambda: api.batch("o1")["all_done"], 90, message="the batch never finished")
    found = _documents(api, "o1")
    codes = {name: (d["processing_error"] or {}).get("code") for name, d in found.items()}
    assert codes == {
        "orders.xlsx": None,
        "order.docx": None,
        "prices.html": None,
        "bomb.xlsx": "archive_too_large",
        "huge.xlsx": "too_many_cells",
        "laughs.docx": "unsafe_xml",
        "deep.html": "too_deeply_nested",
        "huge.html": "too_many_cells",
    }, found

    orders = found["orders.xlsx"]
    assert orders["line_items"] == [{"sku": "A-1", "price": "9.9"}, {"sku": "B-2", "price": "24"}]
    assert [(t["page"], t["rows"][0]) for t in orders["tables"]] == [
        (1, ["Q1 orders", None, None]),
        (3, ["currency", "rate"]),
    ]
    assert _spans(orders["tables"][0]) == [[0, 0, 1, 3]]

    order = found["order.docx"]
    assert order["line_items"] == [{"sku": "A-1", "price": "9.90"}, {"sku": "B-2", "price": "24"}]
    assert [_spans(t) for t in order["tables"]] == [[[0, 0, 1, 3]], [[1, 0, 2, 1]]]
    assert order["tables"][1]["rows"] == [["group", "item"], ["tools", "hammer"], [None, "saw"]]

    prices = found["prices.html"]
    assert [row[2] for row in prices["tables"][0]["rows"]] == ["Price", "0.10", "0.15 €", "0.05"]
    assert _spans(prices["tables"][0]) == [[0, 0, 1, 2], [1, 0, 2, 1]]
    assert prices["tables"][1]["rows"] == [["phone", "555-0100"]]
    assert prices["line_items"][0] == {"sku": None, "price": None}  # its keys are Item, Price

    # The worker that refused them is the one that reads the next document.
    assert worker.alive
    api.upload("o2", docs.two_sheet_xlsx(), "again.xlsx")
    api.process("o2")
    wait_until(lambda: api.batch("o2")["all_done"], 30, message="the worker did not go on")
    assert _documents(api, "o2")["again.xlsx"]["status"] == "succeeded"
    assert worker.alive
    api.close()
