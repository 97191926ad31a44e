"""The console's review pages in a real headless Chromium: batches, a batch's documents, and a
document's pages with every cell outlined on the page image and the grid beside it.

The API runs in-process on uvicorn, a real processing worker as a subprocess with relay's
own extractor: the boxes the page draws are the ones relay computed. The documents are
drawn from known layouts (``tests.support.review_documents``): a PDF (one page upright, one
with ``/Rotate 90``), a scan and a phone photo stored sideways with its EXIF orientation, so
each box can be checked against the ruled cell it must outline and the text it must hold.
With ``RELAY_CONSOLE_SCREENSHOTS=docs/console`` the pages are saved there too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from playwright.sync_api import Browser, Page

from relay.console.overlay import band
from relay.devtools.processes import Stack
from relay.state.api_keys import create_operator_key
from tests.support.api_fixtures import V1, Api, api_factory_fixture, api_fixture  # noqa: F401
from tests.support.browser import browser_fixture, log_in, page_fixture, shot  # noqa: F401
from tests.support.helpers import wait_until
from tests.support.review_documents import (
    DOCUMENTS,
    INVOICE,
    PDF_LAYOUTS,
    STOCK,
    Layout,
    content_of,
)

BATCH = "march-invoices"
HOSTILE_CSV = b'item,note\nbolt,"<script>window.__pwned = 1</script><b>x</b>"\n'
HOSTILE_NAME = "<img src=x onerror=alert(1)>.csv"
ACCENT = "rgb(47, 91, 234)"


class Reviewed(NamedTuple):
    """The processed batch: the API, document ids by filename, and each document's
    ``tables`` as relay stored them."""

    api: Api
    ids: dict[str, str]
    tables: dict[str, list[dict[str, Any]]]


@pytest.fixture
def reviewed(api_factory: Any, tmp_path: Path) -> Iterator[Reviewed]:
    """A processed batch of the three documents, a hostile CSV and a broken PDF."""
    api: Api = api_factory(max_upload_bytes=2_000_000)
    stack = Stack(
        api.settings.redis_url,
        tmp_path,
        env={"RELAY_ENCRYPTION_KEY": api.settings.encryption_key.reveal()},
    )
    try:
        stack.worker("--queues", "processing")
        ids = {}
        for name, (content_type, _) in DOCUMENTS.items():
            doc = api.upload_ok(
                "acme", BATCH, content=content_of(name), filename=name, content_type=content_type
            )
            ids[name] = doc["id"]
        ids["csv"] = api.upload_ok(
            "acme", BATCH, content=HOSTILE_CSV, filename=HOSTILE_NAME, content_type="text/csv"
        )["id"]
        ids["broken"] = api.upload_ok(
            "acme", BATCH, content=b"%PDF-1.4\nnot really", filename="broken.pdf"
        )["id"]
        r = api.client.post(f"{V1}/batches/{BATCH}/process", headers=api.auth("acme"))
        assert r.status_code == 202, r.text

        def done() -> bool:
            body = api.client.get(f"{V1}/batches/{BATCH}", headers=api.auth("acme")).json()
            return bool(body["all_done"])

        # The OCR models load in the worker's extraction child for the first image.
        wait_until(done, 180, 0.2, "the batch was not processed: " + stack.logs())
        r = api.client.get(f"{V1}/batches/{BATCH}/results", headers=api.auth("acme"))
        assert r.status_code == 200, r.text
        tables = {doc["filename"]: doc["tables"] for doc in r.json()["documents"]}
        yield Reviewed(api, ids, tables)
    finally:
        stack.close()


def open_document(page: Page, api: Api, doc_id: str, page_number: int | None = None) -> None:
    url = f"{api.base_url}/console/documents/{doc_id}"
    page.goto(url + (f"?page={page_number}" if page_number else ""))
    page.wait_for_function(
        "() => { const i = document.querySelector('.pageimg img');"
        " return i && i.complete && i.naturalWidth > 0; }"
    )


def boxes_match(page: Page, layout: Layout, table: int, stored: dict[str, Any]) -> None:
    """The boxes drawn for table ``table`` are the cells relay stored for it (``stored``),
    each on the ruled grid the document drew (every edge within half a percent of the page
    of one of its rulings) and holding the text of the layout's cell at its anchor; every
    cell of the layout with text has its box."""
    image = page.locator(".pageimg img").bounding_box()
    assert image is not None
    width, height = layout.size
    xs, ys = layout.edges()
    on_x = [image["x"] + x / width * image["width"] for x in xs]
    on_y = [image["y"] + y / height * image["height"] for y in ys]
    slack = (0.005 * image["width"] + 1, 0.005 * image["height"] + 1)
    drawn = page.locator(f"svg.overlay rect.box[id^='b-t{table}-']")
    assert drawn.count() == len(stored["cells"]), stored["cells"]
    texts = {(r, c) for r, row in enumerate(layout.rows) for c, text in enumerate(row) if text}
    for cell in stored["cells"]:
        key = f"t{table}-r{cell['row']}-c{cell['col']}"
        box = page.locator(f"#b-{key}").bounding_box()
        assert box is not None, key
        # The outline (2 px, not scaled) lies on the box's edge: 1 px out on each side.
        x0, y0 = box["x"] + 1, box["y"] + 1
        x1, y1 = x0 + box["width"] - 2, y0 + box["height"] - 2
        for edge, lines, tolerance in ((x0, on_x, slack[0]), (x1, on_x, slack[0])):
            assert min(abs(edge - line) for line in lines) < tolerance, (key, "x", edge, lines)
        for edge, lines, tolerance in ((y0, on_y, slack[1]), (y1, on_y, slack[1])):
            assert min(abs(edge - line) for line in lines) < tolerance, (key, "y", edge, lines)
        anchor = (cell["row"], cell["col"])
        if anchor in texts:
            tx, ty = layout.text_at(*anchor)
            at = (
                image["x"] + tx / width * image["width"],
                image["y"] + ty / height * image["height"],
            )
            assert x0 < at[0] < x1 and y0 < at[1] < y1, (key, at, (x0, y0, x1, y1))
            texts.discard(anchor)
    assert not texts, f"cells with text and no box: {sorted(texts)}"


def target_id(page: Page) -> str:
    return str(page.evaluate("() => document.querySelector(':target')?.id ?? ''"))


def chosen_ids(page: Page) -> list[str]:
    """What the page's script marks as chosen: the cell and its box."""
    return sorted(page.evaluate("() => [...document.querySelectorAll('.chosen')].map(e => e.id)"))


def review_shot(page: Page, name: str) -> None:
    page.evaluate("() => window.scrollTo(0, 0)")  # the grids are sticky: shown from the top
    shot(page, name)


def grid_texts(page: Page, table: int) -> list[list[str]]:
    """The review page's grid of table ``table``: each row's cells' text."""
    return [
        [cell.strip() for cell in row.locator("td").all_inner_texts()]
        for row in page.locator(f"#table-{table} table.cells tr").all()
    ]


def test_an_operator_finds_a_batch_and_reviews_a_pdf_page_by_page(
    reviewed: Reviewed, page: Page
) -> None:
    api, _, tables = reviewed
    log_in(page, api, create_operator_key(api.redis, "ops"))
    page.click("nav >> text=Batches")
    assert "finished most recently" in page.inner_text("main")
    review_shot(page, "review-batches")
    page.click(f"a:has-text('{BATCH}')")
    rows = page.locator("tr.document")
    assert rows.count() == 5
    assert page.locator("tr.document .badge.s-succeeded").count() == 4
    broken = page.locator("tr.document", has_text="broken.pdf")
    assert "invalid_pdf" in broken.locator("td.err").inner_text()
    pdf_row = page.locator("tr.document", has_text="invoice.pdf")
    assert pdf_row.locator("td.tables").inner_text().strip() == "2"
    assert pdf_row.locator("td.pages").inner_text().strip() == "1, 2"
    # The hostile filename is text, and nothing of it ran.
    assert page.locator("tr.document", has_text=HOSTILE_NAME).count() == 1
    assert page.evaluate("window.__pwned === undefined")
    review_shot(page, "review-batch")

    pdf_row.locator("a", has_text="invoice.pdf").click()
    page.wait_for_function("() => document.querySelector('.pageimg img')?.naturalWidth > 0")
    assert "Page 1 of 2" in page.inner_text(".pagebar")
    first, second = tables["invoice.pdf"]
    boxes_match(page, PDF_LAYOUTS[0], 1, first)
    assert grid_texts(page, 1)[:4] == [list(row) for row in INVOICE[:4]]
    assert grid_texts(page, 1)[4] == ["Total", "42.00"]
    # The grid keeps the spans: "Total" covers three columns, as its ruled box does.
    assert page.locator("#g-t1-r4-c0").get_attribute("colspan") == "3"
    # A PDF's text layer has no confidence: every box is grey.
    assert page.locator("svg.overlay rect.box.c-none").count() == len(first["cells"])

    # Choosing a cell shows its box on the page, and the box leads back to its cell.
    page.click("#g-t1-r2-c0 a")
    assert target_id(page) == "b-t1-r2-c0"
    stroke = page.evaluate("() => getComputedStyle(document.querySelector(':target')).stroke")
    assert stroke == ACCENT
    assert chosen_ids(page) == ["b-t1-r2-c0", "g-t1-r2-c0"]  # the script marks the pair
    review_shot(page, "review-pdf")
    page.locator("#b-t1-r3-c3").dispatch_event("click")
    assert target_id(page) == "g-t1-r3-c3"
    assert chosen_ids(page) == ["b-t1-r3-c3", "g-t1-r3-c3"]
    assert page.locator("#g-t1-r3-c3").inner_text() == "12.00"

    # Page 2 is stored portrait with /Rotate 90: shown landscape, boxes where it shows them.
    page.click(".pagebar a[rel=next]")
    page.wait_for_function("() => document.querySelector('.pageimg img')?.naturalWidth > 0")
    size = page.evaluate(
        "() => { const i = document.querySelector('.pageimg img');"
        " return [i.naturalWidth, i.naturalHeight]; }"
    )
    assert size[0] > size[1], size
    boxes_match(page, PDF_LAYOUTS[1], 2, second)
    assert grid_texts(page, 2) == STOCK


def test_a_scan_and_a_photo_are_outlined_by_confidence(reviewed: Reviewed, page: Page) -> None:
    api, ids, tables = reviewed
    log_in(page, api, create_operator_key(api.redis, "ops"))
    _, scan_layouts = DOCUMENTS["scan.pdf"]
    open_document(page, api, ids["scan.pdf"])
    (scan,) = tables["scan.pdf"]
    boxes_match(page, scan_layouts[0], 1, scan)
    # The grid is the invoice's, "Total" across three columns as its ruled box is.
    assert page.locator("#g-t1-r4-c0").get_attribute("colspan") == "3"
    assert grid_texts(page, 1)[:4] == [list(row) for row in INVOICE[:4]]
    assert grid_texts(page, 1)[4] == ["Total", "42.00"]
    # The boxes are coloured by the recogniser's scores (the covered cells have no box).
    bands = {"high": 0, "mid": 0, "low": 0, "none": 0}
    for cell in scan["cells"]:
        bands[band(scan["confidence"][cell["row"]][cell["col"]])] += 1
    for name, n in bands.items():
        assert page.locator(f"svg.overlay rect.box.c-{name}").count() == n, name
    assert bands["high"] >= 1
    legend = page.inner_text(".bands")
    assert "0.9 or more" in legend and "below 0.6" in legend
    # The cell read with the lowest score.
    scored = [c for c in scan["cells"] if scan["confidence"][c["row"]][c["col"]] is not None]
    poorest = min(scored, key=lambda c: scan["confidence"][c["row"]][c["col"]])
    key = f"t1-r{poorest['row']}-c{poorest['col']}"
    page.click(f"#g-{key} a")
    assert target_id(page) == f"b-{key}"
    review_shot(page, "review-scan")

    _, photo_layouts = DOCUMENTS["photo.jpg"]
    open_document(page, api, ids["photo.jpg"])
    size = page.evaluate(
        "() => { const i = document.querySelector('.pageimg img');"
        " return [i.naturalWidth, i.naturalHeight]; }"
    )
    # Stored sideways (900 x 1200), shown as its EXIF orientation says (1200 x 900).
    assert size[0] * 3 == size[1] * 4, size
    (photo,) = tables["photo.jpg"]
    boxes_match(page, photo_layouts[0], 1, photo)
    assert grid_texts(page, 1)[:4] == [list(row) for row in INVOICE[:4]]
    page.click("#g-t1-r1-c2 a")
    assert target_id(page) == "b-t1-r1-c2"
    review_shot(page, "review-image")


def test_choosing_a_cell_works_without_javascript(reviewed: Reviewed, browser: Browser) -> None:
    api, ids, _ = reviewed
    context = browser.new_context(
        java_script_enabled=False, viewport={"width": 1280, "height": 900}
    )
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        log_in(page, api, create_operator_key(api.redis, "ops"))
        open_document(page, api, ids["photo.jpg"])
        page.click("#g-t1-r3-c0 a")
        assert page.url.endswith("#b-t1-r3-c0")
        assert page.locator("svg.overlay rect.box:target").count() == 1
        assert page.locator("#b-t1-r3-c0").evaluate("e => getComputedStyle(e).stroke") == ACCENT
        assert page.locator(".chosen").count() == 0  # no script ran
        box = page.locator("#b-t1-r3-c0").bounding_box()
        assert box is not None and 0 <= box["y"] < 900  # scrolled into view
    finally:
        context.close()


def test_a_csv_shows_its_grid_without_geometry_and_nothing_it_holds_runs(
    reviewed: Reviewed, page: Page
) -> None:
    api, ids, _ = reviewed
    log_in(page, api, create_operator_key(api.redis, "ops"))
    page.goto(f"{api.base_url}/console/documents/{ids['csv']}")
    assert "has no pages to show" in page.inner_text(".meta")
    assert page.locator(".pageimg").count() == 0
    assert "no geometry" in page.inner_text(".grid .note")
    cells = page.locator("table.cells td").all_inner_texts()
    assert "<script>window.__pwned = 1</script><b>x</b>" in cells
    assert page.locator("table.cells b, main script").count() == 0
    assert page.evaluate("window.__pwned === undefined")
    assert HOSTILE_NAME in page.inner_text("h1")


def test_after_its_batch_is_deleted_a_document_shows_its_grid_and_no_page(
    reviewed: Reviewed, page: Page
) -> None:
    api, ids, _ = reviewed
    log_in(page, api, create_operator_key(api.redis, "ops"))
    open_document(page, api, ids["scan.pdf"])  # its page count is remembered now
    r = api.client.delete(f"{V1}/batches/{BATCH}", headers=api.auth("acme"))
    assert r.status_code == 202, r.text
    page.goto(f"{api.base_url}/console/documents/{ids['scan.pdf']}")
    assert "no longer kept" in page.inner_text(".meta")
    assert page.locator(".pageimg").count() == 0
    assert page.locator("table.cells td").count() > 0
    image = page.request.get(f"{api.base_url}/console/documents/{ids['scan.pdf']}/pages/1")
    assert image.status == 409 and "no longer kept" in image.text()


def test_the_page_image_route_needs_an_operator_session(reviewed: Reviewed, page: Page) -> None:
    api, ids, _ = reviewed
    url = f"{api.base_url}/console/documents/{ids['invoice.pdf']}/pages/1"
    assert page.request.get(url).status == 401
    # A customer's key opens no console page either.
    r = api.client.get(url.replace(api.base_url, ""), headers=api.auth("acme"))
    assert r.status_code == 401
    log_in(page, api, create_operator_key(api.redis, "ops"))
    image = page.request.get(url + "?width=300")
    assert image.status == 200 and image.headers["content-type"] == "image/png"
    assert page.request.get(url.replace("/pages/1", "/pages/3")).status == 404


def test_the_batches_of_one_account(reviewed: Reviewed, page: Page) -> None:
    api, ids, _ = reviewed
    api.upload_ok("acme", "still-open")  # never processed: not among the finished ones
    log_in(page, api, create_operator_key(api.redis, "ops"))
    page.goto(f"{api.base_url}/console/batches")
    assert page.locator("tbody tr", has_text="still-open").count() == 0
    page.fill("input[name=account]", "acme")
    page.click("button:has-text('Show')")
    names = page.locator("tbody tr td:first-child a").all_inner_texts()
    assert names == ["still-open", BATCH]  # newest first, open or finished
    page.goto(f"{api.base_url}/console/batches?account=NOT%20AN%20ACCOUNT")
    assert "An account is" in page.inner_text(".flash.bad")
    page.goto(f"{api.base_url}/console/batches/acme/no-such-batch")
    assert "No such batch" in page.inner_text("h1")
    page.goto(f"{api.base_url}/console/documents/{ids['broken']}")
    assert "invalid_pdf" in page.inner_text(".meta")  # its source is kept, but no PDF
    assert page.locator(".pageimg").count() == 0
