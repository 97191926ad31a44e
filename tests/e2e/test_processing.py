"""End to end: documents processed by real RQ workers in subprocesses."""

from __future__ import annotations

import json

import redis

from relay.devtools.processes import Stack
from relay.devtools.sample_documents import HEADER, pdf, table_ops
from relay.redis import keyspace
from tests.e2e.client import Api
from tests.support.helpers import wait_until


def test_documents_are_extracted_by_a_worker(any_stack: Stack) -> None:
    stack = any_stack
    stack.api()
    stack.worker()
    stack.detector()
    api = Api(stack.api_url, stack.create_key("acme"))
    api.upload("p1", b"sku;qty\nA;1\nB;2\n", "a.csv")
    api.upload("p1", json.dumps({"line_items": [{"sku": "C", "qty": 3}]}).encode(), "b.json")
    api.upload("p1", b"\x00\x01garbage", "c.bin")
    invoice = table_ops([HEADER, ["A1", "Bolt", "10"]], top=720)
    prices = table_ops([["Item", "Unit price"], ["Bolt", "0.10"]], top=500)
    api.upload("p1", pdf([invoice + "\n" + prices]), "d.pdf")
    api.process("p1", fields=["sku", "SKU"])
    batch = wait_until(lambda: api.batch("p1")["all_done"] and api.batch("p1"), 30)
    results = api.http.get("/batches/p1/results").json()
    assert batch["counts"]["succeeded"] == 3, results["documents"]
    assert batch["counts"]["failed"] == 1
    assert batch["status"] == "succeeded" and batch["completion_seq"] == 1
    results = api.http.get("/batches/p1/results").json()
    by_name = {d["filename"]: d for d in results["documents"]}
    assert by_name["a.csv"]["line_items"] == [{"sku": "A", "SKU": None}, {"sku": "B", "SKU": None}]
    assert by_name["a.csv"]["tables"] == [
        {"page": 1, "rows": [["sku", "SKU"], ["A", None], ["B", None]], "confidence": None}
    ]
    assert by_name["b.json"]["line_items"] == [{"sku": "C", "SKU": None}]
    # Two different tables: both in tables, only the first gives line_items.
    assert by_name["d.pdf"]["line_items"] == [{"sku": None, "SKU": "A1"}]
    assert [t["rows"][0] for t in by_name["d.pdf"]["tables"]] == [HEADER, ["Item", "Unit price"]]
    assert by_name["c.bin"]["line_items"] is None and by_name["c.bin"]["tables"] is None
    assert by_name["c.bin"]["processing_error"]["code"] == "unsupported_format"
    for d in results["documents"]:
        assert d["created_at"] <= d["started_at"] <= d["completed_at"]
    api.close()


def test_worker_killed_mid_document_is_processed_by_another(
    stack: Stack, redis: redis.Redis
) -> None:
    stack.env["RELAY_EXTRACTOR"] = "tests.support.slow_extractor:extract"
    stack.api()
    victim = stack.worker()
    stack.detector()
    api = Api(stack.api_url, stack.create_key("acme"))
    doc = api.upload("k1", b"sleep=4\nsku\nA\n")
    api.process("k1")

    def status() -> str:
        r = api.http.get(f"/documents/{doc['id']}")
        found: str = r.json()["status"]
        return found

    wait_until(lambda: status() == "processing", 20, message="never claimed")
    first_start = api.http.get(f"/documents/{doc['id']}").json()["started_at"]
    victim.kill()
    # The lease (3 s) expires; the sweeper puts it back to queued (started_at null).
    wait_until(lambda: status() == "queued", 15, message="lease never expired")
    assert api.http.get(f"/documents/{doc['id']}").json()["started_at"] is None
    stack.worker()
    wait_until(lambda: status() == "succeeded", 30, message="not processed again")
    final = api.http.get(f"/documents/{doc['id']}").json()
    assert final["started_at"] > first_start
    shard = keyspace.shard_of_id("doc", doc["id"])
    assert shard is not None
    assert redis.hget(keyspace.doc(shard, doc["id"]), "claims") == b"2"
    assert api.batch("k1")["all_done"] is True
    api.close()
