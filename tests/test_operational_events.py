"""Auto-disable and operational events on a real Redis, with the stores' clock: the decision
record_attempt.lua takes (failing since, RELAY_DISABLE_AFTER, 410, exhausted schedule), the
events it appends to the outbox, and the detector turning them into deliveries to the
account's operational webhook (and never about that webhook's own deliveries)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from relay.redis import keyspace
from relay.runtime.context import WorkerContext
from relay.runtime.detector import Detector, ensure_groups
from relay.state.blobs import BlobStore
from relay.state.model import Attempt, DeliveryStatus
from relay.state.retention import Retention
from relay.state.store import BatchRef
from relay.state.webhooks import (
    ClaimedDelivery,
    disable_reason,
    operational_ref,
)
from tests.support.delivery_seed import WebhookClients
from tests.support.helpers import closed_after, worker_context

REF = BatchRef("acme", "b1")
URL = "https://hooks.example.com/relay"
OPS_URL = "https://ops.example.com/events"
AFTER_MS = 2_000


class H(WebhookClients):
    def __init__(self, url: str) -> None:
        super().__init__(url, disable_after_ms=AFTER_MS)
        self.client.hset(
            REF.key,
            mapping={
                "account": "acme",
                "name": "b1",
                "created_at": 1,
                "completed_at": 2,
                "completion_seq": 1,
            },
        )
        self.run(self.hooks.register(REF, URL, "http://api"))

    def claim(self, ref: BatchRef = REF, limit: int = 10) -> ClaimedDelivery:
        (c,) = self.d.claim(ref.shard, limit=limit, lease_ms=60_000, token="t")
        return c

    def fail(self, ref: BatchRef = REF, *, outcome: str = "retry", code: int = 500) -> str:
        """Claim the due delivery, record a failed attempt; returns the delivery id."""
        c = self.claim(ref)
        attempt = Attempt(c.number, self.clock(), 1.0, code, "http_status", "")
        assert self.d.record(c, "t", attempt, outcome=outcome, next_at=0, reason="gone!").moved
        return c.id

    def succeed(self) -> None:
        c = self.claim()
        self.d.record(
            c, "t", Attempt(c.number, self.clock(), 1.0, 200, None, ""), outcome="succeeded"
        )

    def hook(self, ref: BatchRef = REF) -> dict[str, str]:
        h = self.client.hgetall(keyspace.webhook(ref.shard, ref.account, ref.name))
        return {k.decode(): v.decode() for k, v in h.items()}

    def events(self, ref: BatchRef = REF) -> list[dict[str, str]]:
        out = []
        for _, fields in self.client.xrange(keyspace.outbox(ref.shard)):
            if b"kind" in fields:
                out.append({k.decode(): v.decode() for k, v in fields.items()})
        return out


@pytest.fixture
def h(redis_url: str) -> Iterator[H]:
    yield from closed_after(H(redis_url))


def test_failing_for_disable_after_disables_and_stops_the_attempts(h: H) -> None:
    _, ident = h.d.create(REF, 1, b"{}")
    start = h.clock()
    h.fail()
    assert h.hook()["failing_since"] == str(start)
    h.clock.advance(AFTER_MS - 1)
    h.fail()  # 1 ms short: retried
    assert h.hook()["disabled"] == "0" and h.status(ident) is DeliveryStatus.PENDING
    assert h.events() == []
    h.clock.advance(1)
    h.fail()
    hook = h.hook()
    assert hook["disabled"] == "1"
    assert hook["disabled_reason"] == disable_reason(AFTER_MS)
    assert "2s" in hook["disabled_reason"]
    # Attempts stop: the delivery is canceled and nothing is due.
    assert h.status(ident) is DeliveryStatus.CANCELED
    assert h.d.claim(REF.shard, limit=10, lease_ms=60_000, token="x") == []
    assert h.client.zcard(keyspace.due(REF.shard)) == 0
    (event,) = h.events()
    assert event["kind"] == "webhook.disabled"
    assert (event["account"], event["batch"], event["url"]) == ("acme", "b1", URL)
    assert event["reason"] == hook["disabled_reason"]
    assert event["at"] == str(h.clock())
    # New completions of a disabled webhook make no delivery and no more events.
    assert h.d.create(REF, 2, b"{}") == (False, "")
    assert len(h.events()) == 1


def test_a_success_clears_failing_since(h: H) -> None:
    h.d.create(REF, 1, b"{}")
    h.fail()
    h.clock.advance(AFTER_MS - 500)
    h.succeed()
    assert h.hook()["failing_since"] == ""
    h.clock.advance(1_000)  # past the first failure + RELAY_DISABLE_AFTER
    h.d.create(REF, 2, b"{}")
    h.fail()  # the first failure since the success: counts from here
    assert h.hook()["disabled"] == "0"
    assert h.hook()["failing_since"] == str(h.clock())


def test_registering_again_enables_and_restarts_the_count(h: H) -> None:
    h.d.create(REF, 1, b"{}")
    h.fail()
    h.clock.advance(AFTER_MS)
    h.fail()
    assert h.hook()["disabled"] == "1"
    h.run(h.hooks.register(REF, URL, "http://api"))  # re-enables; delivers seq 1 again
    hook = h.hook()
    assert hook["disabled"] == "0" and hook["failing_since"] == ""
    h.fail()
    assert h.hook()["disabled"] == "0"  # a fresh first failure
    assert len(h.events()) == 1


def test_failing_across_deliveries_counts_from_the_first_failure(h: H) -> None:
    # The count is the webhook's, not one delivery's: an exhausted delivery, then the next.
    h.d.create(REF, 1, b"{}")
    first = h.fail(outcome="failed", code=503)
    h.clock.advance(AFTER_MS)
    _, second = h.d.create(REF, 2, b"{}")
    h.fail()
    assert h.status(first) is DeliveryStatus.FAILED
    assert h.status(second) is DeliveryStatus.CANCELED
    assert [e["kind"] for e in h.events()] == ["delivery.failed", "webhook.disabled"]


def test_an_exhausted_delivery_emits_delivery_failed(h: H) -> None:
    _, ident = h.d.create(REF, 1, b"{}")
    h.fail(code=500)
    h.fail(outcome="failed", code=502)
    assert h.status(ident) is DeliveryStatus.FAILED
    assert h.hook()["disabled"] == "0"
    (event,) = h.events()
    assert event["kind"] == "delivery.failed"
    assert event["id"] == ident and event["batch"] == "b1" and event["url"] == URL
    assert event["attempts"] == "2"
    assert (event["status_code"], event["error"]) == ("502", "http_status")


def test_an_exhausted_delivery_with_no_http_answer_has_no_status_code(h: H) -> None:
    h.d.create(REF, 1, b"{}")
    c = h.claim()
    attempt = Attempt(c.number, h.clock(), 1.0, None, "connection", "refused")
    h.d.record(c, "t", attempt, outcome="failed")
    (event,) = h.events()
    assert (event["status_code"], event["error"]) == ("", "connection")


def test_a_410_disables_at_once_and_emits_webhook_disabled(h: H) -> None:
    _, ident = h.d.create(REF, 1, b"{}")
    h.fail(outcome="gone", code=410)
    assert h.status(ident) is DeliveryStatus.FAILED
    assert h.hook()["disabled_reason"] == "gone!"
    (event,) = h.events()
    assert event["kind"] == "webhook.disabled" and event["reason"] == "gone!"


def test_no_event_when_the_webhook_was_removed_meanwhile(h: H) -> None:
    h.d.create(REF, 1, b"{}")
    c = h.claim()
    h.run(h.hooks.delete(REF))
    h.d.record(c, "t", Attempt(1, h.clock(), 1.0, 410, "http_status", ""), outcome="gone")
    assert h.events() == []


def test_operational_deliveries_make_no_events_about_themselves(h: H) -> None:
    ops = operational_ref("acme")
    assert h.d.create_event("acme", "3-1-0", b"{}") == (False, "")  # none registered
    assert h.run(h.hooks.register_operational_webhook("acme", OPS_URL)).created is True
    assert h.run(h.hooks.register_operational_webhook("acme", OPS_URL)).created is False
    created, first = h.d.create_event("acme", "3-1-0", b'{"n":1}')
    assert created and keyspace.shard_of_id("msg", first) == ops.shard
    assert h.d.create_event("acme", "3-1-0", b'{"n":1}') == (False, first)  # idempotent
    _, second = h.d.create_event("acme", "3-2-0", b'{"n":2}')
    # Each event is its own delivery: none supersedes another.
    assert h.status(first) is DeliveryStatus.PENDING
    assert h.status(second) is DeliveryStatus.PENDING
    # The operational webhook fails: exhausted, then disabled, and no event about it.
    c = h.claim(ops, limit=1)
    attempt = Attempt(c.number, h.clock(), 1.0, 500, "http_status", "")
    h.d.record(c, "t", attempt, outcome="failed")
    h.clock.advance(AFTER_MS)
    c = h.claim(ops)
    h.d.record(c, "t", Attempt(c.number, h.clock(), 1.0, 500, "http_status", ""), outcome="retry")
    assert h.hook(ops)["disabled"] == "1"
    for s in keyspace.all_shards():
        assert not [f for _, f in h.client.xrange(keyspace.outbox(s)) if b"kind" in f], s


def test_the_detector_delivers_events_to_the_operational_webhook(h: H, redis_url: str) -> None:
    ctx = worker_context(redis_url, h.clock, RELAY_DISABLE_AFTER="2s")
    assert ctx.webhooks.disable_after_ms == AFTER_MS
    ensure_groups(h.client)
    detector = Detector(ctx, "d1")
    h.d.create(REF, 1, b"{}")
    h.fail(outcome="failed", code=500)  # delivery.failed, no operational webhook yet
    assert detector.read_once(10) == 1
    ops = operational_ref("acme")
    ops_deliveries = keyspace.batch_deliveries(ops.shard, "acme", ops.name)
    assert h.client.zcard(ops_deliveries) == 0  # dropped: nobody to tell
    h.run(h.hooks.register_operational_webhook("acme", OPS_URL))
    h.d.create(REF, 2, b"{}")
    h.clock.advance(AFTER_MS)
    h.fail()  # disabled
    assert detector.read_once(10) == 1
    (ident,) = (i.decode() for i in h.client.zrange(ops_deliveries, 0, -1))
    found = ctx.webhooks.get(ident)
    assert found is not None and found.status is DeliveryStatus.PENDING
    assert found.account == "acme" and found.batch_name == "~ops" and found.url == OPS_URL
    (c,) = ctx.webhooks.claim(ops.shard, limit=10, lease_ms=1_000, token="t")
    event = json.loads(c.body)
    assert event["type"] == "webhook.disabled"
    assert event["data"] == {"batch_name": "b1", "url": URL, "reason": disable_reason(AFTER_MS)}
    assert event["timestamp"].endswith("Z")
    # Acknowledged: read again, nothing; a second handling of the same entry adds nothing.
    assert detector.read_once(10) == 0
    ctx.redis.close()


def test_event_deliveries_are_purged_after_the_retention_once_they_ended(h: H) -> None:
    retention = Retention(h.client, BlobStore(""), retention_ms=10_000, clock=h.clock)
    ops = operational_ref("acme")
    h.run(h.hooks.register_operational_webhook("acme", OPS_URL))
    before = set(h.client.keys("relay:*"))
    _, first = h.d.create_event("acme", "3-1-0", b'{"n":1}')
    _, second = h.d.create_event("acme", "3-2-0", b'{"n":2}')
    c = h.claim(ops, limit=1)  # one of the two (due at the same ms): it ends, the other not
    ended, pending = c.id, ({first, second} - {c.id}).pop()
    event_of_pending = "3-2-0" if pending == second else "3-1-0"
    h.d.record(c, "t", Attempt(c.number, h.clock(), 1.0, 200, None, ""), outcome="succeeded")
    h.clock.advance(10_000 - 1)
    assert retention.purge_events(ops.shard) == 0  # not yet past the retention
    h.clock.advance(1)
    assert retention.purge_events(ops.shard) == 1  # the ended one; the pending one stays
    assert h.d.get(ended) is None and h.d.get(pending) is not None
    assert [d.id for d in h.d.search(account="acme", batch=ops.name)[0]] == [pending]
    by_seq = keyspace.batch_delivery_by_seq(ops.shard, "acme", ops.name)
    assert h.client.hkeys(by_seq) == [event_of_pending.encode()]
    # Once the pending one has ended too, nothing of either is left.
    c = h.claim(ops, limit=1)
    h.d.record(c, "t", Attempt(c.number, h.clock(), 1.0, 200, None, ""), outcome="succeeded")
    assert retention.purge_events(ops.shard) == 1
    assert set(h.client.keys("relay:*")) == before


def _detector(h: H, redis_url: str) -> tuple[WorkerContext, Detector]:
    ctx = worker_context(redis_url, h.clock, RELAY_DISABLE_AFTER="2s")
    ensure_groups(h.client)
    return ctx, Detector(ctx, "d1")


def _redone(
    h: H, detector: Detector, c: ClaimedDelivery, attempt: Attempt, outcome: str
) -> list[bytes]:
    """Record ``attempt`` of ``c``, then lose that write as a failed-over primary would (the
    webhook, the delivery, its attempts and the outbox back as they were: the event's entry
    gone, the detector's group before it) and record it again. Returns the two entry ids."""
    touched = [
        keyspace.webhook(REF.shard, REF.account, REF.name),
        keyspace.delivery(REF.shard, c.id),
        keyspace.delivery_attempts(REF.shard, c.id),
        keyspace.outbox(REF.shard),
    ]
    before = {k: h.client.dump(k) for k in touched}
    entries = []
    for again in (False, True):
        if again:
            for k, dumped in before.items():
                if dumped is None:  # made by the lost write
                    h.client.delete(k)
                else:
                    h.client.restore(k, 0, dumped, replace=True)
            time.sleep(0.002)  # a new entry id (Redis time), as on another primary
        assert h.d.record(c, "t", attempt, outcome=outcome, reason="gone!").moved
        entries.append(h.client.xrange(keyspace.outbox(REF.shard))[-1][0])
        assert detector.read_once(10) == 1
    return entries


@pytest.mark.parametrize("kind", ["webhook.disabled", "delivery.failed"])
def test_an_operational_event_redone_after_a_failover_keeps_its_id(
    h: H, redis_url: str, kind: str
) -> None:
    """The fact, recorded twice (once on a primary that lost it, once on its successor),
    is one event: one id, listed once in the operator's feed, one delivery to its webhook."""
    ctx, detector = _detector(h, redis_url)
    ops = operational_ref("acme")
    h.run(h.hooks.register_operational_webhook("acme", OPS_URL))
    h.d.create(REF, 1, b"{}")
    if kind == "webhook.disabled":
        h.fail()
        h.clock.advance(AFTER_MS)  # the next failure disables
        outcome = "retry"
    else:
        outcome = "failed"
    c = h.claim()
    attempt = Attempt(c.number, h.clock(), 1.0, 500, "http_status", "")
    first, second = _redone(h, detector, c, attempt, outcome)
    assert first != second  # two entries: an id taken from the entry would differ
    feed = ctx.events.page("acme", keyspace.FEED_OPERATIONAL)
    assert [e["type"] for e in feed.events] == [kind]
    ops_deliveries = keyspace.batch_deliveries(ops.shard, "acme", ops.name)
    (ident,) = (i.decode() for i in h.client.zrange(ops_deliveries, 0, -1))
    assert feed.events[0]["id"] == ident  # its webhook-id
    assert keyspace.shard_of_id("msg", ident) == ops.shard
    ctx.redis.close()


def test_a_second_disable_and_a_second_failure_are_other_events(h: H, redis_url: str) -> None:
    """What names an event counts: the webhook disabled again after it was registered
    again, and a delivery failed again after a retry by hand, are new events (new ids)."""
    ctx, detector = _detector(h, redis_url)
    h.run(h.hooks.register_operational_webhook("acme", OPS_URL))
    _, ident = h.d.create(REF, 1, b"{}")
    h.fail(outcome="failed")  # delivery.failed after attempt 1
    h.d.retry(ident)  # by hand: the same delivery
    assert h.fail(outcome="failed") == ident  # delivery.failed after attempt 2
    for _ in range(2):
        h.d.create(REF, 2, b"{}")
        h.fail(outcome="gone", code=410)  # webhook.disabled
        h.run(h.hooks.register(REF, URL, "http://api"))  # enabled again
    assert detector.read_once(10) == 4
    feed = ctx.events.page("acme", keyspace.FEED_OPERATIONAL).events
    assert [e["type"] for e in feed] == [*["delivery.failed"] * 2, *["webhook.disabled"] * 2]
    assert len({e["id"] for e in feed}) == 4
    assert h.hook()["disables"] == "2"
    ctx.redis.close()
