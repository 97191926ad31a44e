"""End to end, real processes: a webhook that keeps failing is disabled after
RELAY_DISABLE_AFTER and attempts stop; webhook.disabled and delivery.failed reach the account's
operational webhook signed (verified with standardwebhooks and Ed25519), retried and recorded
like any delivery; the operational webhook's own failures make no events."""

from __future__ import annotations

from typing import Any

import redis

from relay.devtools.processes import Stack
from relay.redis import keyspace
from tests.e2e.client import Api
from tests.e2e.test_webhooks import CSV, settled, start
from tests.e2e.verify import verify_both
from tests.support.helpers import wait_until
from tests.support.receiver import Receiver, Reply


def _process_with_ops(api: Api, receiver: Receiver, batch: str, path: str) -> None:
    """The account's operational webhook set to the receiver's ``/ops``; ``batch`` uploaded, its
    webhook set to the receiver's ``path``, and processed."""
    ops = api.http.put("/operational-webhook", json={"url": receiver.url("/ops")})
    assert ops.status_code == 201, ops.text
    api.upload(batch, CSV)
    assert api.register(batch, receiver.url(path)).status_code == 201
    api.process(batch)


def _ops_deliveries(api: Api) -> list[dict[str, Any]]:
    r = api.http.get("/operational-webhook/deliveries")
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()["deliveries"]
    return found


def _events(client: redis.Redis) -> list[dict[str, str]]:
    """Every operational event appended to any outbox (kind, account, batch, ...)."""
    out = []
    for s in keyspace.all_shards():
        for _, fields in client.xrange(keyspace.outbox(s)):
            if b"kind" in fields:
                out.append({k.decode(): v.decode() for k, v in fields.items()})
    return out


def test_a_webhook_failing_for_disable_after_is_disabled_and_the_event_verifies(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    api = start(stack, RELAY_DISABLE_AFTER="2s", RELAY_RETRY_SCHEDULE=",".join(["0.3"] * 30))
    receiver.script("/dead", [Reply(500)])
    _process_with_ops(api, receiver, "b1", "/dead")

    hook = wait_until(
        lambda: (h := api.http.get("/batches/b1/webhook").json())["disabled"] and h,
        30,
        message="the webhook was never disabled",
    )
    assert "every attempt failed for 2s" in hook["disabled_reason"]
    # Attempts stop: nothing due or in flight, the delivery canceled, every attempt recorded.
    wait_until(lambda: settled(redis), 10, message="deliveries still in flight")
    (delivery,) = api.deliveries("b1")
    assert delivery["status"] == "canceled" and delivery["next_attempt_at"] is None
    dead = receiver.received("/dead")
    assert len(dead) == len(delivery["attempts"]) >= 2
    assert all(a["status_code"] == 500 for a in delivery["attempts"])
    # Failing for RELAY_DISABLE_AFTER (decided at the record, a few ms after the arrival).
    assert dead[-1].at - dead[0].at >= 1.9
    # Far fewer than the 31 attempts of the schedule were made.
    assert len(dead) < 15

    (event,) = wait_until(lambda: receiver.received("/ops"), 20, message="no webhook.disabled")
    payload = verify_both(event, api.signing())  # v1 with standardwebhooks, and v1a
    assert payload["type"] == "webhook.disabled"
    assert payload["data"] == {
        "batch_name": "b1",
        "url": receiver.url("/dead"),
        "reason": hook["disabled_reason"],
    }
    assert payload["timestamp"].endswith("Z")
    # The event's delivery is in the operational webhook's listing, with its attempt.
    wait_until(lambda: settled(redis), 10, message="event delivery still in flight")
    (recorded,) = _ops_deliveries(api)
    assert recorded["id"] == event.headers["webhook-id"]
    assert recorded["status"] == "succeeded" and recorded["batch_name"] == "~ops"
    assert [a["status_code"] for a in recorded["attempts"]] == [200]
    assert len(receiver.received("/dead")) == len(dead)  # still no more attempts
    api.close()


def test_an_exhausted_delivery_produces_delivery_failed(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    api = start(stack, RELAY_RETRY_SCHEDULE="0.1,0.1")
    receiver.script("/x", [Reply(500), Reply(500), Reply(502)])
    _process_with_ops(api, receiver, "b2", "/x")
    (event,) = wait_until(lambda: receiver.received("/ops"), 30, message="no delivery.failed")
    payload = verify_both(event, api.signing())
    (failed,) = api.deliveries("b2")
    assert failed["status"] == "failed"
    assert payload["type"] == "delivery.failed"
    assert payload["data"] == {
        "id": failed["id"],
        "batch_name": "b2",
        "url": receiver.url("/x"),
        "attempts": 3,
        "error": "http_status",
        "status_code": 502,
    }
    # Exhausting one delivery does not disable the webhook (RELAY_DISABLE_AFTER is 5d).
    assert api.http.get("/batches/b2/webhook").json()["disabled"] is False
    api.close()


def test_a_410_emits_webhook_disabled(stack: Stack, receiver: Receiver) -> None:
    api = start(stack)
    receiver.script("/gone", [Reply(410)])
    _process_with_ops(api, receiver, "b3", "/gone")
    (event,) = wait_until(lambda: receiver.received("/ops"), 30, message="no webhook.disabled")
    payload = verify_both(event, api.signing())
    assert payload["type"] == "webhook.disabled"
    assert payload["data"]["batch_name"] == "b3"
    assert payload["data"]["url"] == receiver.url("/gone")
    assert "410" in payload["data"]["reason"]
    assert len(receiver.received("/gone")) == 1
    api.close()


def test_a_failing_operational_webhook_makes_no_events_about_itself(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    api = start(stack, RELAY_RETRY_SCHEDULE="0.1,0.1")
    receiver.script("/x", [Reply(500)])
    receiver.script("/ops", [Reply(500)])
    _process_with_ops(api, receiver, "b4", "/x")
    (ops_delivery,) = wait_until(
        lambda: [d for d in _ops_deliveries(api) if d["status"] == "failed"],
        30,
        message="the event's delivery never failed",
    )
    wait_until(lambda: settled(redis), 10, message="deliveries still in flight")
    # Three attempts of the one delivery.failed event, all recorded, and nothing more.
    got = receiver.received("/ops")
    assert len(got) == 3 == len(ops_delivery["attempts"])
    assert {r.headers["webhook-id"] for r in got} == {ops_delivery["id"]}
    assert len(_ops_deliveries(api)) == 1
    assert [(e["kind"], e["batch"]) for e in _events(redis)] == [("delivery.failed", "b4")]
    api.close()
