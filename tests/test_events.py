"""The event feeds on a real Redis, the detector in the test's process: one entry per event
whatever the shard and however often an outbox entry is handled, the same id as the
deliveries, completions of the same instant in different shards, ``after`` exact, retention.
The HTTP side (and long polling) runs in tests/test_api_events.py and tests/e2e/."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from relay.exceptions import EventNotFound
from relay.redis import keyspace
from relay.runtime.detector import GROUP, Detector
from relay.state.event_feed import EventLog
from relay.state.store import BatchRef
from tests.support.helpers import closed_after, worker_context
from tests.test_detector import H


@pytest.fixture
def h(redis_url: str) -> Iterator[H]:
    yield from closed_after(H(redis_url))


def _feed(h: H, account: str = "acme", **kw: object) -> list[dict[str, Any]]:
    page = h.ctx.events.page(account, limit=200, **kw)  # type: ignore[arg-type]
    return [dict(event) for event in page.events]


def _two_shards(account: str = "acme") -> tuple[str, str]:
    """Two batch names of ``account`` in different shards."""
    first = "s-0"
    other = next(
        f"s-{i}"
        for i in range(1, 100)
        if keyspace.shard_for_batch(account, f"s-{i}") != keyspace.shard_for_batch(account, first)
    )
    return first, other


def test_every_completion_is_in_the_feed_once_with_its_delivery_id(h: H) -> None:
    h.complete(register=True)  # b1, with a webhook
    h.complete(BatchRef("acme", "other"), register=False)  # no webhook: in the feed anyway
    detector = Detector(h.ctx, "d1")
    assert detector.read_once(10) == 2
    events = _feed(h)
    assert [e["data"]["batch_name"] for e in events] == ["b1", "other"]
    (delivery_id,) = h.deliveries()
    assert events[0]["id"] == delivery_id  # the webhook-id
    stored = h.client.hget(keyspace.delivery(REF_SHARD, delivery_id), "body")
    assert stored is not None
    body = {k: v for k, v in events[0].items() if k != "id"}
    assert body == json.loads(stored)
    assert events[0]["type"] == "batch.completed"
    # A detector that dies after the append and before XACK handles the entry again: the
    # feed and the delivery stay one each.
    for s in keyspace.all_shards():
        for entry_id, fields in h.client.xrange(keyspace.outbox(s)):
            detector.handle(s, entry_id, fields)
    assert [e["id"] for e in _feed(h)] == [e["id"] for e in events]
    assert len(h.deliveries()) == 1


REF_SHARD = BatchRef("acme", "b1").shard


def test_a_late_webhook_delivers_the_completion_with_the_event_id(h: H) -> None:
    h.complete(register=False)
    Detector(h.ctx, "d1").read_once(10)
    h.register()
    (delivery_id,) = h.deliveries()
    assert [e["id"] for e in _feed(h)] == [delivery_id]


def test_same_instant_in_two_shards_both_recorded_in_order(h: H) -> None:
    """Two completions with the same outbox time in different shards (and one earlier,
    read in the same call): each once, ordered by the outbox, ties by shard."""
    a, b = _two_shards()
    sa, sb = keyspace.shard_for_batch("acme", a), keyspace.shard_for_batch("acme", b)
    for name, shard, seq, entry in [
        (b, sb, 1, "5000-0"),
        (a, sa, 1, "5000-0"),
        (b, sb, 2, "5000-1"),
    ]:
        snapshot = {"account": "acme", "name": name, "completed_at": 5000, "completion_seq": seq}
        h.client.xadd(
            keyspace.outbox(shard),
            {"account": "acme", "batch": name, "seq": seq, "snapshot": json.dumps(snapshot)},
            id=entry,
        )
    assert Detector(h.ctx, "d1").read_once(10) == 3
    events = _feed(h)
    entries = [
        h.client.hget(keyspace.event_positions("acme", keyspace.FEED_BATCHES), e["id"])
        for e in events
    ]
    assert len(set(entries)) == 3  # three events, three entries
    seqs = [(e["data"]["batch_name"], e["data"]["completion_seq"]) for e in events]
    assert seqs == ([(a, 1), (b, 1), (b, 2)] if sa < sb else [(b, 1), (a, 1), (b, 2)])
    assert len({e["id"] for e in events}) == 3


def test_after_is_exact_and_unknown_ids_are_refused(h: H) -> None:
    for i in range(5):
        h.complete(BatchRef("acme", f"b{i}"), register=False)
    h.complete(BatchRef("globex", "g1"), register=False)
    Detector(h.ctx, "d1").read_once(10)
    log = h.ctx.events
    ids = [str(e["id"]) for e in _feed(h)]
    assert len(ids) == 5
    seen: list[object] = []
    after = None
    while True:
        page = log.page("acme", after=after, limit=2)
        seen += [e["id"] for e in page.events]
        if not page.has_more:
            break
        after = page.next_cursor
    assert seen == ids
    # Another account's event id is no position in this feed.
    (foreign,) = [e["id"] for e in _feed(h, "globex")]
    with pytest.raises(EventNotFound):
        log.page("acme", after=str(foreign))
    with pytest.raises(EventNotFound):
        log.page("acme", after=keyspace.new_id("msg", 3))


def test_filters_and_retention(h: H) -> None:
    h.complete(BatchRef("acme", "keep"), register=False)
    h.complete(BatchRef("acme", "other"), register=False)
    Detector(h.ctx, "d1").read_once(10)
    only = _feed(h, batch="keep")
    assert [e["data"]["batch_name"] for e in only] == ["keep"]
    assert _feed(h, type_="batch.completed") == _feed(h)
    first_id = _feed(h)[0]["id"]
    # Retention: a log whose entries are all older than the cutoff is emptied, and an id
    # that aged out reads from the oldest event kept (all of which come after it).
    log = EventLog(h.client, retention_ms=1000, clock=lambda: 10**14)  # far ahead
    assert log.trim(keyspace.events_shard("acme")) == 2
    assert log.page("acme").events == []
    assert not h.client.exists(keyspace.event_log("acme", keyspace.FEED_BATCHES))
    h.complete(BatchRef("acme", "later"), register=False)
    Detector(h.ctx, "d1").read_once(10)
    page = log.page("acme", after=str(first_id))
    assert [e["data"]["batch_name"] for e in page.events] == ["later"]
    assert (
        h.client.xpending(keyspace.outbox(BatchRef("acme", "later").shard), GROUP)["pending"] == 0
    )


def test_the_retention_sweeper_trims_the_feeds(h: H, redis_url: str) -> None:
    """The detector's sweep drops feed entries older than RELAY_RETENTION (here 1 s)."""
    h.complete(BatchRef("acme", "old"), register=False)
    Detector(h.ctx, "d1").read_once(10)
    assert len(_feed(h)) == 1
    ctx = worker_context(redis_url, RELAY_RETENTION="1s")
    try:
        time.sleep(1.1)
        Detector(ctx, "d2").sweep_retention()
        assert _feed(h) == []
        assert not h.client.exists(keyspace.event_log("acme", keyspace.FEED_BATCHES))
        assert h.client.zcard(keyspace.event_logs(keyspace.events_shard("acme"))) == 0
    finally:
        ctx.redis.close()


def test_a_completion_made_again_keeps_its_id_and_is_one_event_and_one_delivery(h: H) -> None:
    """A completion lost with a failed-over primary is made again on the new one: another
    outbox entry, another completed_at, the same batch and completion_seq. Its event and
    delivery keep the id the receiver may have seen (a replay), recorded once."""
    h.complete(register=True)
    detector = Detector(h.ctx, "d1")
    assert detector.read_once(10) == 1
    ((entry_id, fields),) = h.client.xrange(keyspace.outbox(REF_SHARD))
    snapshot = json.loads(fields[b"snapshot"])
    redo = {**snapshot, "completed_at": int(snapshot["completed_at"]) + 700}
    entry = h.client.xadd(keyspace.outbox(REF_SHARD), {**fields, b"snapshot": json.dumps(redo)})
    assert entry != entry_id
    detector.handle(
        REF_SHARD, entry, h.client.xrange(keyspace.outbox(REF_SHARD), entry, entry)[0][1]
    )
    events = _feed(h)
    (delivery_id,) = h.deliveries()
    assert [e["id"] for e in events] == [delivery_id]
    assert delivery_id == keyspace.completion_id(
        REF_SHARD, "acme", "b1", int(snapshot["created_at"]), int(fields[b"seq"])
    )


def test_a_batch_made_again_under_its_name_never_reuses_an_id(h: H) -> None:
    """The same name, the same completion_seq, another batch (created at another time):
    another event and another delivery, even if the old delivery record is still there."""
    h.complete(register=True)
    detector = Detector(h.ctx, "d1")
    assert detector.read_once(10) == 1
    ((_, fields),) = h.client.xrange(keyspace.outbox(REF_SHARD))
    snapshot = json.loads(fields[b"snapshot"])
    # The old batch's delivery index by seq is gone (purged), its delivery record is kept.
    h.client.delete(keyspace.batch_delivery_by_seq(REF_SHARD, "acme", "b1"))
    again = {**snapshot, "created_at": int(snapshot["created_at"]) + 60_000}
    entry = h.client.xadd(keyspace.outbox(REF_SHARD), {**fields, b"snapshot": json.dumps(again)})
    detector.handle(
        REF_SHARD, entry, h.client.xrange(keyspace.outbox(REF_SHARD), entry, entry)[0][1]
    )
    ids = [str(e["id"]) for e in _feed(h)]
    assert len(ids) == 2 and len(set(ids)) == 2
    assert sorted(h.deliveries()) == sorted(ids)


def test_a_delivery_id_made_twice_is_one_delivery(h: H) -> None:
    """create_delivery is idempotent on the id too: the same completion's id, its seq index
    lost, does not make (nor overwrite) a second delivery."""
    h.complete(register=True)
    Detector(h.ctx, "d1").read_once(10)
    (delivery_id,) = h.deliveries()
    key = keyspace.delivery(REF_SHARD, delivery_id)
    h.client.hset(key, "status", "succeeded")
    h.client.delete(keyspace.batch_delivery_by_seq(REF_SHARD, "acme", "b1"))
    created, ident = h.ctx.webhooks.create(
        BatchRef("acme", "b1"), 1, b"{}", delivery_id=delivery_id
    )
    assert (created, ident) == (False, delivery_id)
    assert h.client.hget(key, "status") == b"succeeded"
    assert h.deliveries() == [delivery_id]
