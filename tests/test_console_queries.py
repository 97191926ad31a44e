"""The console's query module over real Redis state: exact filters, pagination without gaps
or repeats, recovery, enable/disable, and the overview's figures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from relay.console.queries import ConsoleQueries, DeliveryFilter
from relay.redis import keyspace
from relay.state import job_queues
from relay.state.all_shards import AllShards
from relay.state.model import Attempt, DeliveryStatus
from relay.state.store import BatchRef
from relay.state.webhooks import AsyncWebhookStore, WebhookStore
from tests.support.api_fixtures import make_settings
from tests.support.helpers import Clients, closed_after, refs_in_distinct_shards


class Q(Clients):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.d = WebhookStore(self.client, self.clock)
        self.hooks = AsyncWebhookStore(self.aclient, self.clock)
        settings = make_settings(url)

        async def wake(shard: int) -> None:
            job_queues.wake(self.client, shard, settings)

        self.q = ConsoleQueries(self.hooks, AllShards(self.aclient), wake)

    def delivery(self, ref: BatchRef, *, fail: bool) -> str:
        """A batch with a webhook and one delivery, attempted once: failed or succeeded."""
        self.client.hset(
            ref.key, mapping={"account": ref.account, "name": ref.name, "created_at": 1}
        )
        self.run(self.hooks.register(ref, "https://hooks.example.com/x", "http://api"))
        self.clock.advance(1000)
        _, ident = self.d.create(ref, 1, b"{}", self.clock() - 500)
        (claimed,) = self.d.claim(ref.shard, limit=1, lease_ms=60_000, token="t")
        code = 500 if fail else 200
        attempt = Attempt(1, self.clock(), 3.0, code, "http_status" if fail else None, "")
        self.d.record(claimed, "t", attempt, outcome="failed" if fail else "succeeded")
        if not fail:
            self.client.hset(keyspace.delivery(ref.shard, ident), "succeeded_at", self.clock())
        return ident


@pytest.fixture
def q(redis_url: str) -> Iterator[Q]:
    yield from closed_after(Q(redis_url))


def test_search_filters_exactly_and_pages_without_gaps(q: Q) -> None:
    refs = refs_in_distinct_shards("acme", 9) + refs_in_distinct_shards("beta", 3)
    failed = [q.delivery(r, fail=i % 3 == 0) for i, r in enumerate(refs)]
    expect = [ident for i, ident in enumerate(failed) if i % 3 == 0 and i < 9][::-1]
    seen: list[str] = []
    cursor = ""
    f = DeliveryFilter(status="failed", account="acme")
    while True:
        page, cursor_next = q.run(q.q.search(f, 2, cursor))
        assert len(page) <= 2
        seen += [d.id for d in page]
        if cursor_next is None:
            break
        cursor = cursor_next
    assert seen == expect  # newest first, each once, none of beta's
    everything, more = q.run(q.q.search(DeliveryFilter(), 100))
    assert len(everything) == 12 and more is None
    one_batch, _ = q.run(q.q.search(DeliveryFilter(account="beta", batch=refs[9].name), 10))
    assert [d.batch_name for d in one_batch] == [refs[9].name]
    window = DeliveryFilter(since_ms=q.clock() - 2500, until_ms=q.clock() + 1)  # until: exclusive
    recent, _ = q.run(q.q.search(window, 10))
    assert len(recent) == 3


def test_recover_makes_the_matching_failed_deliveries_due(q: Q) -> None:
    refs = refs_in_distinct_shards("acme", 4)
    ids = [q.delivery(r, fail=i != 0) for i, r in enumerate(refs)]
    made = q.run(q.q.recover(DeliveryFilter(status="failed", since_ms=1)))
    assert made == 3
    found = [q.d.get(i) for i in ids]
    statuses = [d.status if d else None for d in found]
    assert statuses == [DeliveryStatus.SUCCEEDED] + [DeliveryStatus.PENDING] * 3


def test_webhooks_list_disabled_first_and_the_overview_counts(q: Q) -> None:
    refs = refs_in_distinct_shards("acme", 3)
    for i, r in enumerate(refs):
        q.delivery(r, fail=i == 2)
    q.run(q.q.set_disabled("acme", refs[1].name, True, "moved"))
    rows = q.run(q.q.webhooks(q.clock()))
    assert [r.batch for r in rows] == [refs[1].name, refs[2].name, refs[0].name]
    assert rows[0].webhook.disabled and rows[0].webhook.disabled_reason == "moved"
    o = q.run(q.q.overview(q.clock()))
    assert o.by_outcome == {"succeeded": 2, "rejected": 1}
    assert sum(sum(h.values()) for h in o.hourly) == 3
    assert o.lag_p50 == 0.5 and o.lag_samples == 2
    assert [r.batch for r in o.failing] == [refs[1].name, refs[2].name]
