"""Delivery state on a real Redis: one delivery per completion, supersede, lease, outcomes,
manual retry, removal of the webhook, late registration."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from relay.exceptions import DeliveryNotFound, NotRetryable, WebhookNotFound
from relay.redis import keyspace
from relay.state.model import Attempt, DeliveryStatus
from relay.state.store import BatchRef
from relay.state.webhooks import (
    WAITING_RECHECK_MS,
    ClaimedDelivery,
    WebhookStore,
    operational_ref,
)
from tests.support.delivery_seed import WebhookClients
from tests.support.helpers import closed_after

REF = BatchRef("acme", "b1")
URL = "https://hooks.example.com/relay"


class H(WebhookClients):
    def batch(self, ref: BatchRef = REF, *, done_seq: int = 0) -> None:
        """A batch record as the scripts leave it (done at ``done_seq`` when > 0)."""
        self.client.hset(
            ref.key,
            mapping={
                "account": ref.account,
                "name": ref.name,
                "created_at": 1,
                "completed_at": 2 if done_seq else "",
                "completion_seq": done_seq,
                "total": 1,
                "succeeded": 1 if done_seq else 0,
                "queued": 0 if done_seq else 1,
                "fields": "[]",
            },
        )

    def register(self, ref: BatchRef = REF, url: str = URL) -> tuple[bool, bool]:
        """(created, due)."""
        done = self.run(self.hooks.register(ref, url, "http://api"))
        return done.created, done.due

    def claim(self, token: str = "t", lease_ms: int = 60_000) -> list[ClaimedDelivery]:
        return self.d.claim(REF.shard, limit=10, lease_ms=lease_ms, token=token)

    def attempt(self, d: ClaimedDelivery, code: int | None) -> Attempt:
        return Attempt(
            d.number, self.clock(), 1.0, code, None if code == 200 else "http_status", ""
        )


@pytest.fixture
def h(redis_url: str) -> Iterator[H]:
    yield from closed_after(H(redis_url))


def test_one_delivery_per_completion(h: H) -> None:
    h.batch()
    assert h.d.create(REF, 1, b"{}") == (False, "")  # no webhook yet: nothing to deliver
    h.register()
    created, ident = h.d.create(REF, 1, b"{}")
    assert created and ident.startswith("msg_")
    assert h.d.create(REF, 1, b"{}") == (False, ident)  # idempotent on (batch, seq)
    assert keyspace.shard_of_id("msg", ident) == REF.shard


def test_a_newer_completion_supersedes_a_pending_one(h: H) -> None:
    h.batch()
    h.register()
    _, first = h.d.create(REF, 1, b"{}")
    _, second = h.d.create(REF, 2, b"{}")
    assert h.status(first) is DeliveryStatus.SUPERSEDED
    assert h.status(second) is DeliveryStatus.PENDING
    assert [c.id for c in h.claim()] == [second]
    with pytest.raises(NotRetryable):
        h.d.retry(first)


def test_claim_is_a_lease_and_a_lost_lease_makes_it_due_again(h: H) -> None:
    h.batch()
    h.register()
    _, ident = h.d.create(REF, 1, b'{"a":1}')
    (c,) = h.claim("w1", lease_ms=50)
    assert c.id == ident and c.number == 1 and c.body == b'{"a":1}' and c.url == URL
    assert h.claim("w2") == []  # leased
    h.clock.advance(49)
    assert h.claim("w2") == []  # still leased, 1 ms before the lease runs out
    h.clock.advance(1)
    (again,) = h.claim("w2")  # the first worker was lost: due again, same id
    assert again.id == ident and again.number == 1
    # The lost worker's late answer is recorded but moves nothing.
    assert h.d.record(c, "w1", h.attempt(c, 200), outcome="succeeded").moved is False
    assert h.status(ident) is DeliveryStatus.PENDING
    assert h.d.record(again, "w2", h.attempt(again, 200), outcome="succeeded").moved is True
    found = h.d.get(ident)
    assert found is not None and found.status is DeliveryStatus.SUCCEEDED
    assert len(found.attempts) == 2 and found.next_attempt_at is None


def test_retry_outcome_schedules_the_next_attempt(h: H) -> None:
    h.batch()
    h.register()
    _, ident = h.d.create(REF, 1, b"{}")
    (c,) = h.claim()
    at = h.clock() + 60_000
    h.d.record(c, "t", h.attempt(c, 500), outcome="retry", next_at=at)
    found = h.d.get(ident)
    assert found is not None and found.next_attempt_at == at
    assert h.claim() == []  # not due yet
    assert h.client.zscore(keyspace.due(REF.shard), ident) == at
    h.clock.advance(60_000)
    (again,) = h.claim()  # due now
    assert again.id == ident and again.number == 2


def test_gone_disables_the_webhook_and_later_completions_make_nothing(h: H) -> None:
    h.batch()
    h.register()
    _, ident = h.d.create(REF, 1, b"{}")
    (c,) = h.claim()
    h.d.record(c, "t", h.attempt(c, 410), outcome="gone", reason="the receiver answered 410 Gone")
    assert h.status(ident) is DeliveryStatus.FAILED
    hook = h.run(h.hooks.get(REF))
    assert hook is not None and hook.disabled and "410" in hook.disabled_reason
    assert h.d.create(REF, 2, b"{}") == (False, "")
    with pytest.raises(NotRetryable):
        h.d.retry(ident)
    h.register()  # registering again enables it
    assert h.d.retry(ident).status is DeliveryStatus.PENDING


def test_manual_retry_restarts_the_schedule_with_the_same_id(h: H) -> None:
    h.batch()
    h.register()
    _, ident = h.d.create(REF, 1, b"{}")
    for _ in range(2):
        (c,) = h.claim()
        h.d.record(c, "t", h.attempt(c, 500), outcome="retry", next_at=h.clock())
    (c,) = h.claim()
    assert c.round_attempts == 2 and c.number == 3
    h.d.record(c, "t", h.attempt(c, 500), outcome="failed")
    assert h.status(ident) is DeliveryStatus.FAILED
    retried = h.d.retry(ident)
    assert retried.status is DeliveryStatus.PENDING and retried.id == ident
    (c,) = h.claim()
    assert c.number == 4 and c.round_attempts == 0


def test_removing_the_webhook_cancels_the_pending_delivery(h: H) -> None:
    h.batch()
    h.register()
    _, ident = h.d.create(REF, 1, b"{}")
    assert h.run(h.hooks.delete(REF)) is True
    assert h.status(ident) is DeliveryStatus.CANCELED
    assert h.claim() == []
    assert h.run(h.hooks.delete(REF)) is False
    with pytest.raises(NotRetryable):
        h.d.retry(ident)  # no webhook to deliver to


def test_registration_on_a_done_batch_delivers_its_latest_completion_once(h: H) -> None:
    h.batch(done_seq=2)
    assert h.register() == (True, True)
    (c,) = h.claim()
    assert c.seq == 2
    h.d.record(c, "t", h.attempt(c, 200), outcome="succeeded")
    assert h.register() == (False, False)  # delivered already: not again
    assert h.claim() == []


def test_registration_revives_a_failed_delivery_of_the_latest_completion(h: H) -> None:
    h.batch(done_seq=1)
    h.register()
    (c,) = h.claim()
    h.d.record(c, "t", h.attempt(c, 500), outcome="failed")
    assert h.register(url="https://other.example.com/") == (False, True)
    (again,) = h.claim()
    assert again.id == c.id and again.url == "https://other.example.com/"


def test_not_done_batch_registration_delivers_nothing(h: H) -> None:
    h.batch()
    assert h.register() == (True, False)
    assert h.claim() == []


def test_stored_attempts_are_capped_keeping_the_first_and_the_latest(h: H) -> None:
    h.batch()
    h.register()
    _, ident = h.d.create(REF, 1, b"{}")
    assert h.d.max_attempts == 20  # RELAY_MAX_STORED_ATTEMPTS' default
    for n in range(1, 31):
        (c,) = h.claim(f"w{n}")
        assert c.number == n  # counted on the delivery, not from the (capped) list
        assert c.round_attempts == n - 1
        outcome = "failed" if n == 30 else "retry"
        h.d.record(c, f"w{n}", h.attempt(c, 500), outcome=outcome, next_at=0)
    found = h.d.get(ident)
    assert found is not None and found.status is DeliveryStatus.FAILED
    assert [a.number for a in found.attempts] == [1, *range(12, 31)]
    assert found.attempt_count == 30
    assert h.client.llen(keyspace.delivery_attempts(REF.shard, ident)) == 20
    # The API shows the kept ones, oldest first.
    (listed,), _ = h.loop.run_until_complete(h.hooks.deliveries(REF, start=0, limit=10))
    assert [a["number"] for a in listed.to_json()["attempts"]] == [1, *range(12, 31)]
    # A manual retry of the failed delivery starts a fresh round; numbers keep counting.
    h.d.retry(ident)
    (c,) = h.claim("w31")
    assert (c.number, c.round_attempts) == (31, 0)
    h.d.record(c, "w31", h.attempt(c, 200), outcome="succeeded")
    found = h.d.get(ident)
    assert found is not None and found.status is DeliveryStatus.SUCCEEDED
    assert [a.number for a in found.attempts] == [1, *range(13, 32)]


def test_a_small_cap_keeps_the_first_and_the_latest(h: H) -> None:
    h.batch()
    h.register()
    store = WebhookStore(h.client, max_attempts=3)
    _, ident = store.create(REF, 1, b"{}")
    for n in range(1, 8):
        (c,) = store.claim(REF.shard, limit=1, lease_ms=60_000, token=f"w{n}")
        store.record(c, f"w{n}", h.attempt(c, 503), outcome="retry", next_at=0)
    found = store.get(ident)
    assert found is not None
    assert [a.number for a in found.attempts] == [1, 6, 7]
    assert found.attempt_count == 7


def test_an_attempt_recorded_after_the_delivery_was_purged_leaves_nothing(h: H) -> None:
    h.batch()
    h.register()
    _, ident = h.d.create(REF, 1, b"{}")
    (c,) = h.claim("w1")
    h.client.delete(keyspace.delivery(REF.shard, ident))  # as retention's purge does
    assert h.d.record(c, "w1", h.attempt(c, 200), outcome="succeeded").moved is False
    assert h.client.exists(keyspace.delivery_attempts(REF.shard, ident)) == 0


def test_disabling_cancels_the_pending_delivery_and_enabling_allows_a_retry(h: H) -> None:
    h.batch()
    h.register()
    _, ident = h.d.create(REF, 1, b"{}")
    h.run(h.hooks.set_disabled(REF, True, "receiver moved"))
    hook = h.run(h.hooks.get(REF))
    assert hook is not None and hook.disabled and hook.disabled_reason == "receiver moved"
    assert h.status(ident) is DeliveryStatus.CANCELED
    # The status indexes moved with it: the search finds it canceled, not pending.
    assert [d.id for d in h.d.search(status="canceled")[0]] == [ident]
    assert h.d.search(status="pending")[0] == []
    assert h.claim() == []
    with pytest.raises(NotRetryable):
        h.d.retry(ident)  # disabled
    h.run(h.hooks.set_disabled(REF, False))
    hook = h.run(h.hooks.get(REF))
    assert hook is not None and not hook.disabled and hook.disabled_reason == ""
    assert h.claim() == []  # enabling makes nothing due by itself
    assert h.run(h.hooks.retry_any(ident)).status is DeliveryStatus.PENDING
    assert [c.id for c in h.claim()] == [ident]


def test_disabling_a_missing_webhook_is_refused(h: H) -> None:
    h.batch()
    with pytest.raises(WebhookNotFound):
        h.run(h.hooks.set_disabled(REF, True, "x"))
    with pytest.raises(DeliveryNotFound):
        h.run(h.hooks.retry_any("msg_0nope"))


def test_due_shards_are_the_shards_with_a_delivery_due_now_first_one_first(h: H) -> None:
    before = keyspace.shard_map()
    keyspace.use(keyspace.ShardMap(((16, 0), (64, 1))))  # shards 0-63 in use after a raise
    try:
        now = h.clock()
        for shard, at in ((3, now - 1), (40, now), (50, now + 60_000)):  # 50: not yet due
            h.client.zadd(keyspace.due(shard), {f"msg_{shard}": at})
        assert h.d.due_shards() == (3, 40)
        assert h.d.due_shards(first=40) == (40, 3)
    finally:
        keyspace.use(before)


def test_a_registration_repeating_the_verification_in_progress_writes_nothing(h: H) -> None:
    h.batch()
    first = h.run(h.hooks.register(REF, URL, "http://api", verify=True))
    assert first.created and first.due and not first.repeated
    assert h.run(h.hooks.pending_verification(REF, URL)) == first.hook
    before = {k: h.client.dump(k) for k in h.client.scan_iter(count=1000)}
    again = h.run(h.hooks.register(REF, URL, "http://api", verify=True))
    assert again.repeated and not again.created and not again.due and again.hook == first.hook
    assert {k: h.client.dump(k) for k in h.client.scan_iter(count=1000)} == before
    # Another URL, or no verify, is no repeat: it replaces the registration.
    assert h.run(h.hooks.pending_verification(REF, URL + "/2")) is None
    other = h.run(h.hooks.register(REF, URL + "/2", "http://api", verify=True))
    assert not other.repeated and other.hook.url == URL + "/2"
    assert len(h.client.zrange(keyspace.due(REF.shard), 0, -1)) == 1  # the first one superseded


def test_a_pending_verification_without_its_challenge_is_started_again(h: H) -> None:
    """A pending verification whose challenge is not pending any more (a registration that
    died between its two round trips) is no repeat: registering again starts one."""
    h.batch()
    h.run(h.hooks.register(REF, URL, "http://api", verify=True))
    (challenge,) = h.claim()
    h.d.record(challenge, "t", h.attempt(challenge, 500), outcome="failed", verify=False)
    assert h.run(h.hooks.pending_verification(REF, URL)) is None
    again = h.run(h.hooks.register(REF, URL, "http://api", verify=True))
    assert not again.repeated and again.hook.verification == "pending"
    assert len(h.claim("t2")) == 1  # a new challenge is due


def test_a_repeated_operational_verification_writes_nothing(h: H) -> None:
    ops = operational_ref("acme")
    first = h.run(h.hooks.register_operational_webhook("acme", URL, verify=True))
    assert first.created and first.challenged and not first.repeated
    before = {k: h.client.dump(k) for k in h.client.scan_iter(count=1000)}
    again = h.run(h.hooks.register_operational_webhook("acme", URL, verify=True))
    assert again.repeated and not again.challenged and not again.created
    assert {k: h.client.dump(k) for k in h.client.scan_iter(count=1000)} == before
    assert h.run(h.hooks.pending_verification(ops, URL)) is not None


EVENT_IDS = [keyspace.new_id("msg", REF.shard) for _ in range(3)]


def test_a_batch_completed_waits_for_the_batch_document_events(redis_url: str) -> None:
    """A batch's batch.completed is claimed only once the batch's document events have
    settled: one pending holds it until its delivery ends (then it is due at once); one
    raised but never made into a delivery holds it for RELAY_DOCUMENT_EVENTS_WAIT at most; a
    type the webhook does not ask for gets no delivery and holds nothing."""
    h = H(redis_url, document_events_wait_ms=60_000)
    try:
        h.batch()
        hooks = ("batch.completed", "document.failed")
        h.run(h.hooks.register(REF, URL, "http://api", events=hooks))
        owed = keyspace.batch_document_events(REF.shard, REF.account, REF.name)
        # Three documents ended with events raised (what end_documents writes).
        h.client.zadd(owed, {"doc_1": h.clock(), "doc_2": h.clock(), "doc_3": h.clock()})
        _, failed = h.d.create_document(REF, "doc_1", "document.failed", b"{}", EVENT_IDS[0])
        # document.succeeded is not asked for: no delivery, and it holds nothing back.
        unasked = h.d.create_document(REF, "doc_2", "document.succeeded", b"{}", EVENT_IDS[1])
        assert unasked == (False, "")
        assert h.client.zscore(owed, "doc_1") == 0  # its delivery is pending
        assert h.client.zscore(owed, "doc_2") is None
        _, completed = h.d.create(REF, 1, b"{}")
        (c,) = h.claim()  # the batch.completed waits
        assert c.id == failed
        assert h.claim() == []
        waiting = h.get(completed)
        assert waiting.status is DeliveryStatus.PENDING and waiting.next_attempt_at is not None
        # doc_3's event has no delivery (its outbox entry lost, say): it holds the batch
        # event for RELAY_DOCUMENT_EVENTS_WAIT at most; doc_1's ends now.
        done = h.d.record(c, "t", h.attempt(c, 200), outcome="succeeded")
        assert done.moved and not done.released  # doc_3 still holds it
        h.clock.advance(59_999)
        assert h.claim() == []  # looked at again: still within the bound
        h.clock.advance(WAITING_RECHECK_MS)  # looked at again: past it
        (last,) = h.claim()
        assert last.id == completed and h.client.exists(owed) == 0
        # A pending document event holds it past that bound, and releases it when it ends.
        h.client.zadd(owed, {"doc_4": h.clock()})
        _, later = h.d.create_document(REF, "doc_4", "document.failed", b"{}", EVENT_IDS[2])
        _, second = h.d.create(REF, 2, b"{}")
        (c4,) = h.claim(lease_ms=600_000)  # an attempt that lasts (leased for 10 min)
        assert c4.id == later
        h.clock.advance(120_000)
        assert h.claim() == []  # doc_4's delivery is pending (leased): still waiting
        released = h.d.record(c4, "t", h.attempt(c4, 500), outcome="failed")
        assert released.moved and released.released  # failed for good: it settled
        (batch_event,) = h.claim()
        assert batch_event.id == second
    finally:
        h.close()
