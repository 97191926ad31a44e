"""End to end, real processes (API, worker, detector, a receiver): metadata given on upload
comes back in the results, in the signed batch.completed webhook (the batch's, exact bytes
on every attempt) and in the event feed (the same body); metadata past the bounds is 422."""

from __future__ import annotations

import json
from typing import Any

import httpx
import redis

from relay.devtools.processes import Stack
from tests.e2e.client import Api
from tests.e2e.test_webhooks import CSV, delivered_once, start
from tests.e2e.verify import verify_both
from tests.support.helpers import wait_until
from tests.support.receiver import Receiver, Reply


def _upload(api: Api, batch: str, **fields: Any) -> httpx.Response:
    return api.http.post(
        "/documents",
        files={"file": ("doc.csv", CSV, "text/csv")},
        data={"batch_name": batch, **{k: json.dumps(v) for k, v in fields.items()}},
    )


def test_metadata_rides_to_the_results_the_webhook_and_the_feed(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    api = start(stack)
    batch_meta = {"customer": "ACME Ltd", "order": "PO-2026-11", "priority": 2, "rush": True}
    docs = {}
    for i in range(2):
        r = _upload(api, "m1", metadata={"line": i, "ref": f"INV-{i}"}, batch_metadata=batch_meta)
        assert r.status_code == 201, r.text
        docs[r.json()["id"]] = {"line": i, "ref": f"INV-{i}"}
    # The first attempt fails: the second must carry the same bytes, metadata included.
    receiver.script("/hook", [Reply(503), Reply(200)])
    assert api.register("m1", receiver.url()).status_code == 201
    api.process("m1")
    got = wait_until(lambda: receiver.received()[1:], 30, message="no second attempt")
    first, second = receiver.received()[:2]
    assert first.body == second.body
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    payload = verify_both(second, api.signing())
    assert payload["type"] == "batch.completed"
    assert payload["data"]["metadata"] == batch_meta
    assert payload["data"]["counts"]["succeeded"] == 2
    # The feed: the same id and the same body as the webhook.
    r = api.http.get("/events", params={"batch_name": "m1"})
    assert r.status_code == 200, r.text
    (event,) = r.json()["events"]
    assert event["id"] == got[0].headers["webhook-id"]
    assert {k: v for k, v in event.items() if k != "id"} == json.loads(second.body)
    # The results: the batch's metadata and each document's own.
    results = api.http.get("/batches/m1/results").json()
    assert results["metadata"] == batch_meta
    assert {d["id"]: d["metadata"] for d in results["documents"]} == docs
    assert all(d["status"] == "succeeded" for d in results["documents"])
    for doc_id, meta in docs.items():
        assert api.http.get(f"/documents/{doc_id}").json()["metadata"] == meta
    deliveries = api.deliveries("m1")
    assert [d["status"] for d in deliveries] == ["succeeded"]
    assert [a["status_code"] for a in deliveries[0]["attempts"]] == [503, 200]
    api.close()


def test_metadata_past_the_bounds_is_422_and_creates_nothing(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    api = start(stack, RELAY_METADATA_MAX_KEYS="3", RELAY_METADATA_MAX_BYTES="100")
    r = _upload(api, "m2", metadata={"a": 1, "b": 2, "c": 3, "d": 4})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == {
        "type": "invalid_metadata",
        "message": "metadata has 4 keys; at most 3 are allowed",
    }
    r = _upload(api, "m2", batch_metadata={"note": "x" * 200})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["type"] == "invalid_metadata"
    assert "at most 100 are allowed" in r.json()["error"]["message"]
    r = _upload(api, "m2", batch_metadata={"nested": {"no": 1}})
    assert r.status_code == 422 and r.json()["error"]["type"] == "invalid_metadata"
    assert api.http.get("/batches/m2").status_code == 404
    assert api.http.get("/batches").json()["batches"] == []
    # Within the bounds the same stack takes it, and a batch's other metadata is 409.
    assert _upload(api, "m2", batch_metadata={"a": 1, "b": 2, "c": 3}).status_code == 201
    r = _upload(api, "m2", batch_metadata={"a": 1})
    assert r.status_code == 409 and r.json()["error"]["type"] == "batch_metadata_conflict"
    assert api.batch("m2")["document_count"] == 1
    assert api.register("m2", receiver.url()).status_code == 201
    api.process("m2")
    (got,) = wait_until(receiver.received, 30, message="no delivery arrived")
    assert verify_both(got, api.signing())["data"]["metadata"] == {"a": 1, "b": 2, "c": 3}
    assert len(delivered_once(api, redis, "m2")) == 1
    api.close()
