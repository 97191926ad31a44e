"""End to end: retention with real API, worker and detector processes (RELAY_RETENTION=4s).

Finished, notified batches disappear (404 for the batch, its documents and deliveries) and
leave no key behind; an unfinished batch stays; a batch whose delivery is still retrying
stays until the delivery ends."""

from __future__ import annotations

import json
import time

import redis

from relay.devtools.processes import Stack
from relay.redis import keyspace
from relay.state import job_queues
from relay.timefmt import parse_rfc3339
from tests.e2e.client import Api
from tests.support.helpers import wait_until
from tests.support.receiver import Receiver, Reply

CSV = b"sku,qty\nA-1,2\n"


def _relay_keys(client: redis.Redis) -> set[bytes]:
    """Every ``relay:*`` key except the drain jobs' wake-up markers (``relay:{rN}:wake``,
    a 10 s TTL each, present or not depending on the moment)."""
    return {k for k in client.scan_iter(match="relay:*", count=1000) if not k.endswith(b":wake")}


def _gone(api: Api, name: str) -> bool:
    r = api.http.get(f"/batches/{name}")
    return r.status_code == 404 and r.json()["error"]["type"] == "not_found"


def test_finished_notified_batches_are_purged_and_leave_no_key(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    # The retry comes 25 s after the first attempt: the others' purge (4 s retention, a few
    # seconds on a quiet machine, over 7 s beside another `make test`) is over by then.
    stack.env.update({"RELAY_RETENTION": "4s", "RELAY_RETRY_SCHEDULE": "25,7"})
    stack.api()
    stack.worker()
    stack.detector()
    api = Api(stack.api_url, stack.create_key("acme"))
    # Warm-up: what exists once per account or process (the API key and its index, the
    # accounts set, the signing material, the rate-limit windows of the key and of the
    # account's writes (they expire with their windows), the metrics hash, the shard counts,
    # the 16 outbox streams with their consumer group) is made by a first batch, purged too.
    api.signing()
    api.upload("warm-up", CSV)
    api.register("warm-up", receiver.url("/warm"))
    api.process("warm-up")
    wait_until(lambda: _gone(api, "warm-up"), 30, 0.2, "the warm-up batch was not purged")
    # Its event (the account's feed, kept as long as the batch) is trimmed by its own sweep,
    # which a busy machine may run a moment after the batch's purge.
    outboxes = {keyspace.outbox(s).encode() for s in keyspace.all_shards()}
    wait_until(
        lambda: {k for k in _relay_keys(redis) if b"{" in k} == outboxes,
        30,
        0.2,
        "the warm-up batch's event was not trimmed",
    )
    # The processing wake-ups (a marker and a list, each with a TTL) go when a job takes them
    # or their TTL passes: on a busy machine, after the purge.
    wakeups = {keyspace.process_wake().encode(), keyspace.processing_wakeups().encode()}
    wait_until(
        lambda: not wakeups & _relay_keys(redis),
        job_queues.WAKE_TTL_MS / 1000 + 5,
        0.2,
        "the processing wake-ups did not go",
    )
    before = _relay_keys(redis)
    families = sorted({k.decode().split(":")[1] for k in before if b"{" not in k})
    assert families == [
        "accounts",
        "apikey",
        "apikeys",
        "metrics",
        "quota",
        "ratelimit",
        "shards",
        "signing",
    ]
    assert sorted(k for k in before if b"{" in k) == sorted(
        keyspace.outbox(s).encode() for s in keyspace.all_shards()
    )

    names = [f"r{i}" for i in range(40)]
    docs: dict[str, str] = {}
    for name in names:
        docs[name] = api.upload(name, CSV)["id"]
        assert api.register(name, receiver.url()).status_code == 201
        api.process(name)
    open_doc = api.upload("open", CSV)["id"]  # never processed: unfinished
    receiver.script("/retrying", [Reply(503), Reply(200)])
    api.upload("retrying", CSV)
    api.register("retrying", receiver.url("/retrying"))
    api.process("retrying")

    wait_until(lambda: len(receiver.received("/hook")) >= 40, 30, message="not all notified")
    hooks = receiver.received("/hook")
    assert len({r.headers["webhook-id"] for r in hooks}) == len(hooks) == 40
    # Each batch's completion (the event's timestamp), from the notification itself: the
    # batch may already be purged when a busy machine gets here.
    completed_at = {
        (body := json.loads(r.body))["data"]["batch_name"]: parse_rfc3339(body["timestamp"])
        for r in hooks
    }
    assert sorted(completed_at) == sorted(names)
    wait_until(lambda: len(receiver.received("/retrying")) == 1, 20, message="first attempt")

    # Each batch goes, and never before its retention (4 s after its completion).
    gone_at: dict[str, float] = {}

    def all_gone() -> bool:
        for name in names:
            if name not in gone_at and _gone(api, name):
                gone_at[name] = time.time()
        return len(gone_at) == len(names)

    wait_until(all_gone, 30, 0.2, "batches not purged")
    for name in names:
        completed = completed_at[name]
        assert completed is not None
        assert gone_at[name] * 1000 >= completed + 4000, name
    for name in names:
        assert api.http.get(f"/documents/{docs[name]}").status_code == 404
        r = api.http.get(f"/batches/{name}/webhook/deliveries")
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
        assert api.http.get(f"/batches/{name}/results").status_code == 404
    # The delivery still retrying (next attempt 25 s after the first) keeps its batch past
    # the 4 s retention; the unfinished batch stays whatever its age.
    assert not _gone(api, "retrying")
    (pending,) = api.deliveries("retrying")
    assert pending["status"] == "pending" and len(pending["attempts"]) == 1
    assert api.batch("open")["all_done"] is False
    assert api.http.get(f"/documents/{open_doc}").status_code == 200

    # Once its delivery succeeds, the retrying batch goes too.
    wait_until(lambda: len(receiver.accepted()) >= 42, 90, message="the retry never succeeded")
    wait_until(lambda: _gone(api, "retrying"), 30, 0.2, "the retried batch was not purged")
    api.http.delete("/batches/open")  # its only document was queued: canceled, finished
    wait_until(lambda: _gone(api, "open"), 30, 0.2, "the deleted batch was not purged")
    # The outbox entries acknowledged meanwhile and the events of the batches are trimmed by
    # the sweeps that follow.
    # (The deleted batch's own event ages for RELAY_RETENTION after the deletion first: on a
    # machine busy with another test run its sweep may come well after.)
    wait_until(lambda: _relay_keys(redis) <= before, 60, 0.2, "keys left behind")
    after = _relay_keys(redis)
    assert after <= before, sorted(after - before)
    assert len(after) <= len(before)
    api.close()
