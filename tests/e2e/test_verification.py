"""End to end, real processes: endpoint verification. A webhook registered with verify is
pending until its receiver echoes the signed webhook.verify challenge; notifications created
meanwhile wait, none lost, and go once it is verified. A wrong or missing echo never gets a
notification: the webhook is disabled with the reason and a webhook.disabled event."""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from relay.devtools.processes import Stack
from tests.e2e.test_webhooks import CSV, settled, start
from tests.e2e.verify import verify_both
from tests.support.helpers import wait_until
from tests.support.receiver import Receiver, Reply


def test_pending_until_the_echo_then_verified_and_what_waited_is_delivered(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    api = start(stack, RELAY_VERIFY_SCHEDULE=",".join(["0.5"] * 60))
    receiver.script("/v", [Reply(200, body=b"hello")])  # 2xx, but no echo yet
    api.upload("b1", CSV)
    r = api.http.put("/batches/b1/webhook", json={"url": receiver.url("/v"), "verify": True})
    assert r.status_code == 201, r.text
    assert r.json()["verification"] == {"status": "pending", "verified_at": None}
    wait_until(lambda: len(receiver.received("/v")) >= 2, 20, message="no challenge")
    challenge_sent = receiver.received("/v")[0]
    payload = verify_both(challenge_sent, api.signing())  # signed like any event
    assert payload["type"] == "webhook.verify"
    assert payload["data"]["batch_name"] == "b1" and len(payload["data"]["challenge"]) >= 20

    # Two completions while pending: both wait (nothing but challenges reaches the receiver).
    api.process("b1")
    wait_until(lambda: api.batch("b1")["all_done"], 20, message="first completion")
    api.upload("b1", CSV)
    api.process("b1")
    wait_until(
        lambda: api.batch("b1")["all_done"] and api.batch("b1")["completion_seq"] == 2,
        20,
        message="second completion",
    )
    wait_until(lambda: len(api.deliveries("b1")) >= 3, 20, message="deliveries not created")
    assert set(receiver.types("/v")) == {"webhook.verify"}
    assert api.webhook("b1")["verification"]["status"] == "pending"

    receiver.script("/v", [Reply(200, echo=True)])  # now it answers the challenge
    wait_until(
        lambda: api.webhook("b1")["verification"]["status"] == "verified",
        20,
        message="never verified",
    )
    assert api.webhook("b1")["verification"]["verified_at"] is not None

    def notifications() -> list[dict[str, Any]]:
        bodies = [json.loads(r.body) for r in receiver.received("/v")]
        return [b for b in bodies if b["type"] == "batch.completed"]

    wait_until(
        lambda: len(notifications()) >= 2, 20, message="the waiting notifications never went"
    )
    completed = notifications()
    assert sorted(c["data"]["completion_seq"] for c in completed) == [1, 2]
    wait_until(lambda: settled(redis), 10, message="deliveries still in flight")
    kinds = [d["status"] for d in api.deliveries("b1")]
    assert kinds.count("succeeded") == 3  # the challenge and both notifications
    api.close()


def test_a_wrong_or_missing_echo_is_never_delivered_to_and_ends_disabled_with_the_event(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    api = start(stack, RELAY_VERIFY_SCHEDULE="0.5,0.5,0.5")
    receiver.script("/w", [Reply(200, body=b"not the challenge")])  # a wrong echo
    receiver.script("/m", [Reply(204, body=b"")])  # a 2xx with no echo at all
    ops = api.http.put("/operational-webhook", json={"url": receiver.url("/ops")})
    assert ops.status_code == 201, ops.text
    batches = {"b2": "/w", "b4": "/m"}
    for batch in batches:
        api.upload(batch, CSV)
        api.process(batch)
    for batch in batches:
        wait_until(
            lambda b=batch: api.batch(b)["all_done"],  # type: ignore[misc]
            30,
            message=f"{batch} not done",
        )
    # Registered on a completed batch: its notification is made at once, while pending (a
    # completion racing the short challenge schedule could come after the webhook is
    # disabled on a busy machine, and make no notification at all).
    for batch, path in batches.items():
        r = api.http.put(
            f"/batches/{batch}/webhook", json={"url": receiver.url(path), "verify": True}
        )
        assert r.status_code == 201

    for batch in batches:
        hook = wait_until(
            lambda b=batch: (h := api.webhook(b))["disabled"] and h,  # type: ignore[misc]
            30,
            message=f"{batch} never disabled",
        )
        assert hook["verification"]["status"] == "failed"
        assert "endpoint verification failed" in hook["disabled_reason"]
        assert "did not echo the challenge" in hook["disabled_reason"]
    wait_until(lambda: settled(redis), 10, message="deliveries still in flight")
    for batch, path in batches.items():
        # Only challenges reached it: 4 attempts (the schedule), never the notification.
        assert receiver.types(path) == ["webhook.verify"] * 4
        statuses = sorted(d["status"] for d in api.deliveries(batch))
        assert statuses == ["canceled", "failed"]  # the notification canceled, the challenge failed

    wait_until(
        lambda: len(receiver.received("/ops")) == 2, 20, message="no webhook.disabled for each"
    )
    events = receiver.received("/ops")
    bodies = [verify_both(event, api.signing()) for event in events]
    assert {b["type"] for b in bodies} == {"webhook.disabled"}
    assert sorted(b["data"]["batch_name"] for b in bodies) == sorted(batches)
    feed = api.http.get("/operational-events").json()["events"]
    assert [e["type"] for e in feed] == ["webhook.disabled"] * 2
    assert {e["id"] for e in feed} == {event.headers["webhook-id"] for event in events}
    api.close()


def test_the_operational_webhook_is_verified_too_and_its_events_wait(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    api = start(stack, RELAY_VERIFY_SCHEDULE=",".join(["0.5"] * 60))
    receiver.script("/ops", [Reply(200, body=b"hello")])  # no echo yet
    receiver.script("/gone", [Reply(410)])
    r = api.http.put("/operational-webhook", json={"url": receiver.url("/ops"), "verify": True})
    assert r.status_code == 201 and r.json()["verification"]["status"] == "pending"
    api.upload("b3", CSV)
    assert api.register("b3", receiver.url("/gone")).status_code == 201
    api.process("b3")  # its delivery gets a 410: the webhook is disabled, an event is raised
    wait_until(lambda: api.webhook("b3")["disabled"], 30, message="b3 never disabled")
    # The event is in the operator's feed at once, but its delivery waits for the echo.
    wait_until(lambda: api.http.get("/operational-events").json()["events"], 20, message="no event")
    time.sleep(1.5)  # three more challenge attempts: still only challenges
    assert set(receiver.types("/ops")) == {"webhook.verify"}
    receiver.script("/ops", [Reply(200, echo=True)])
    wait_until(
        lambda: "webhook.disabled" in receiver.types("/ops"), 20, message="event not delivered"
    )
    ops = api.http.get("/operational-webhook").json()
    assert ops["verification"]["status"] == "verified"
    (event,) = [r for r in receiver.received("/ops") if b"webhook.disabled" in r.body]
    feed = api.http.get("/operational-events").json()["events"]
    assert feed[0]["id"] == event.headers["webhook-id"]
    api.close()
