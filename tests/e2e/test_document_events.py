"""End to end, real processes: per-document events (``document.succeeded``,
``document.failed``) chosen on a batch's webhook arrive signed, each before its batch's
``batch.completed`` even when one of them needs a retry; a webhook registered as before gets
``batch.completed`` alone; the feed filtered by type shows the document events."""

from __future__ import annotations

import json
from typing import Any

import redis

from relay.devtools.processes import Stack
from tests.e2e.client import Api
from tests.e2e.test_webhooks import CSV, settled, start
from tests.e2e.verify import verify_both
from tests.support.helpers import relay_cli, wait_until
from tests.support.receiver import Received, Receiver, Reply

ALL = ["batch.completed", "document.succeeded", "document.failed"]


def test_document_events_arrive_signed_and_before_their_batch_event(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    # Retries a second apart, so the refused document event comes back within the test.
    api = start(stack, RELAY_RETRY_SCHEDULE="1,1", RELAY_RETRY_JITTER="0")
    docs = {
        api.upload("d1", CSV, "a.csv")["id"],
        api.upload("d1", CSV, "b.csv")["id"],
        api.upload("d1", b"\x00\x01 not a table", "c.bin")["id"],  # fails: unsupported_format
    }
    # The first POST is refused: a document event, retried a second later. The batch's
    # batch.completed, ready long before, must still come after it.
    receiver.script("/docs", [Reply(500), Reply(200)])
    r = api.http.put("/batches/d1/webhook", json={"url": receiver.url("/docs"), "events": ALL})
    assert r.status_code == 201 and r.json()["events"] == ALL, r.text
    assert api.http.get("/batches/d1/webhook").json()["events"] == ALL
    api.upload("d2", CSV)
    assert api.register("d2", receiver.url("/plain")).json()["events"] == ["batch.completed"]
    api.process("d1")
    api.process("d2")

    def batch_events(path: str) -> list[dict[str, Any]]:
        return [
            p
            for p in (_json(got) for got in receiver.accepted() if got.path == path)
            if p["type"] == "batch.completed"
        ]

    wait_until(
        lambda: batch_events("/docs") and batch_events("/plain"), 30, message="no batch event"
    )
    wait_until(lambda: settled(redis), 10, message="deliveries still in flight")

    signing = api.signing()
    got = receiver.received("/docs")
    refused, accepted = got[0], [g for g in receiver.accepted() if g.path == "/docs"]
    assert _json(refused)["type"] in ("document.succeeded", "document.failed")
    payloads = [verify_both(g, signing) for g in accepted]  # every one signed, v1 and v1a
    assert [p["type"] for p in payloads][-1] == "batch.completed"  # the last to arrive
    assert len(accepted) == 4 and len(got) == 5  # 3 document events + 1, one retried
    ids = [g.headers["webhook-id"] for g in accepted]
    assert len(set(ids)) == 4 and refused.headers["webhook-id"] in ids
    documents = [p for p in payloads if p["type"] != "batch.completed"]
    assert {p["data"]["id"] for p in documents} == docs
    by_type = sorted(p["type"] for p in documents)
    assert by_type == ["document.failed", "document.succeeded", "document.succeeded"]
    for p in documents:
        data = p["data"]
        assert data["batch_name"] == "d1" and p["timestamp"] == data["completed_at"]
        assert data["status"] == p["type"].removeprefix("document.")
        assert data["results_url"].endswith("/api/v1/batches/d1/results")
        code = (data["processing_error"] or {}).get("code")
        assert code == ("unsupported_format" if data["status"] == "failed" else None)
    assert payloads[-1]["data"]["counts"] == {
        "queued": 0, "processing": 0, "succeeded": 2, "failed": 1, "canceled": 0
    }  # fmt: skip
    # The default registration got batch.completed alone.
    plain = receiver.received("/plain")
    assert [_json(g)["type"] for g in plain] == ["batch.completed"]
    verify_both(plain[0], signing)

    # The deliveries operators see: one per event, each with its type and document.
    deliveries = api.deliveries("d1")
    assert sorted(d["type"] for d in deliveries) == sorted(["batch.completed", *by_type])
    assert {d["document_id"] for d in deliveries} == docs | {None}
    assert all(d["status"] == "succeeded" for d in deliveries)
    # ... and on the command line: each line names its event, a document event its document.
    listed = relay_cli(stack.redis_url, "deliveries", "list", "--account", "acme", "--batch", "d1")
    assert listed.returncode == 0, listed.stderr
    lines = [line for line in listed.stdout.splitlines() if line.startswith("msg_")]
    assert sorted(line.split()[3] for line in lines) == sorted(["batch.completed", *by_type])
    assert {line.rsplit("document=", 1)[1] for line in lines if "document=" in line} == docs
    one = next(d for d in deliveries if d["document_id"])
    shown = relay_cli(stack.redis_url, "deliveries", "show", one["id"])
    assert f"{one['id']}  {one['type']}" in shown.stdout
    assert f"document {one['document_id']}" in shown.stdout, shown.stdout

    # The feed: the same ids and bodies, chosen by type; d1's document events before its
    # batch.completed; none for d2, whose webhook did not ask for them.
    failed = _events(api, type="document.failed")
    assert [e["data"]["id"] for e in failed] == [
        p["data"]["id"] for p in documents if p["type"] == "document.failed"
    ]
    assert failed[0]["id"] in ids
    assert len(_events(api, type="document.succeeded", batch_name="d1")) == 2
    d1 = _events(api, batch_name="d1")
    assert [e["type"] for e in d1][-1] == "batch.completed" and len(d1) == 4
    assert [e["type"] for e in _events(api, batch_name="d2")] == ["batch.completed"]
    assert api.http.get("/events", params={"type": "document.done"}).status_code == 422
    api.close()


def _json(got: Received) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(got.body)
    return body


def _events(api: Api, **params: str) -> list[dict[str, Any]]:
    r = api.http.get("/events", params={"limit": 50, **params})
    assert r.status_code == 200, r.text
    events: list[dict[str, Any]] = r.json()["events"]
    return events
