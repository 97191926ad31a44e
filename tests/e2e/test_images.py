"""End to end: tables in images uploaded over the API and read by a real worker."""

from __future__ import annotations

from PIL import Image

from relay.devtools.drawn_tables import EXPECTED, draw_table, encode
from relay.devtools.processes import Stack
from tests.e2e.client import Api
from tests.support.helpers import wait_until


def test_images_are_read_by_a_worker_with_the_configured_pixel_bound(stack: Stack) -> None:
    # The worker's settings reach the default extractor: a 1,200 x 1,000 image is refused.
    stack.env["RELAY_MAX_IMAGE_PIXELS"] = "1000000"
    stack.api()
    stack.worker()
    stack.detector()
    api = Api(stack.api_url, stack.create_key("acme"))
    table = encode(draw_table(), "PNG")
    api.upload("img", table, "table.png")  # declared image/png
    api.upload("img", table, "items.csv")  # declared text/csv: the bytes say PNG
    api.upload("img", encode(Image.new("L", (1200, 1000), 255), "PNG"), "big.png")
    api.process("img", fields=["qty", "item"])
    batch = wait_until(lambda: api.batch("img")["all_done"] and api.batch("img"), 60)
    results = api.http.get("/batches/img/results").json()
    by_name = {d["filename"]: d for d in results["documents"]}
    want = [{"qty": row["qty"], "item": row["item"]} for row in EXPECTED]
    assert by_name["table.png"]["line_items"] == want, by_name["table.png"]
    assert by_name["items.csv"]["line_items"] == want, by_name["items.csv"]
    assert by_name["big.png"]["processing_error"]["code"] == "image_too_large"
    assert batch["counts"]["succeeded"] == 2 and batch["counts"]["failed"] == 1
    api.close()
