"""Delivery search and recovery on a real Redis: the indexes the scripts keep, pages that
are exact (no duplicates, none missing, ties included) and cost O(page), recovery of exactly
the matching deliveries."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from relay.exceptions import InvalidCursor
from relay.redis import keyspace
from relay.state.delivery_search import RecoverRun
from relay.state.model import Delivery, DeliveryStatus
from relay.state.webhooks import WebhookStore
from tests.support.delivery_seed import Seeder
from tests.support.helpers import closed_after


@pytest.fixture(name="h")
def seeder(redis_url: str) -> Iterator[Seeder]:
    yield from closed_after(Seeder(redis_url))


def pages(store: WebhookStore, limit: int, **filters: Any) -> list[list[Delivery]]:
    """Every page of a search, following the cursors to the end."""
    out: list[list[Delivery]] = []
    cursor: str | None = None
    while True:
        found, cursor = store.search(limit=limit, cursor=cursor, **filters)
        out.append(found)
        if cursor is None:
            return out
        assert len(out) < 1000


def flat(paged: list[list[Delivery]]) -> list[str]:
    return [d.id for page in paged for d in page]


def test_failed_pages_are_exact_and_scoped_to_the_account(h: Seeder) -> None:
    refs = [h.batch("acme", f"b{i}") for i in range(6)]
    other = h.batch("other", "b0")
    failed: list[str] = []
    for i in range(42):
        ref = refs[i % len(refs)]
        if i % 7 in (2, 5):  # 12 of 42
            failed.append(h.delivery(ref, "failed"))
        else:
            h.delivery(ref, "succeeded")
        h.delivery(other, "failed")
    assert len(failed) == 12
    paged = pages(h.d, 5, account="acme", status="failed")
    assert [len(p) for p in paged] == [5, 5, 2]
    ids = flat(paged)
    assert ids == list(reversed(failed))  # exactly the 12, newest first, no duplicates
    assert all(d.status is DeliveryStatus.FAILED and d.account == "acme" for p in paged for d in p)
    assert all(d.attempts for p in paged for d in p)  # loaded with their attempts
    succeeded = flat(pages(h.d, 7, account="acme", status="succeeded"))
    assert len(succeeded) == 30 and not set(succeeded) & set(failed)
    assert len(flat(pages(h.d, 9, account="acme"))) == 42
    assert not set(flat(pages(h.d, 50, account="nobody", status="failed")))
    assert set(flat(pages(h.d, 50, account="other"))).isdisjoint(failed)
    everyone = flat(pages(h.d, 11, status="failed"))  # operator-wide
    assert len(everyone) == 54 and set(failed) <= set(everyone)


def test_ties_and_a_cursor_whose_delivery_moved_on(h: Seeder) -> None:
    refs = [h.batch("acme", f"b{i}") for i in range(20)]
    made = [h.delivery(ref, "failed", tick=0) for ref in refs]  # one millisecond for all
    made += [h.delivery(ref, "failed", tick=1) for ref in refs[:5]]
    want = sorted(((h.get(i).created_at, i) for i in made), reverse=True)
    ids = flat(pages(h.d, 3, account="acme", status="failed"))
    assert ids == [i for _, i in want]
    # The delivery a cursor names leaves the index (retried) before the next page is read.
    first, cursor = h.d.search(account="acme", status="failed", limit=7)
    assert cursor is not None
    h.d.retry(first[-1].id)
    rest = flat(pages_from(h.d, cursor, account="acme", status="failed"))
    assert [d.id for d in first] + rest == [i for _, i in want]


def pages_from(store: WebhookStore, cursor: str, **filters: Any) -> list[list[Delivery]]:
    out: list[list[Delivery]] = []
    next_cursor: str | None = cursor
    while next_cursor is not None:
        found, next_cursor = store.search(limit=4, cursor=next_cursor, **filters)
        out.append(found)
    return out


def test_since_until_and_batch_filters_are_exact(h: Seeder) -> None:
    a, b = h.batch("acme", "a"), h.batch("acme", "b")
    made = [h.delivery(a if i % 2 else b, "failed" if i % 3 else "succeeded") for i in range(30)]
    created = {i: h.get(i).created_at for i in made}
    since, until = created[made[5]], created[made[20]]
    got = flat(pages(h.d, 4, account="acme", since_ms=since, until_ms=until))
    assert got == list(reversed(made[5:20]))  # since inclusive, until exclusive
    in_a_failed = flat(pages(h.d, 2, account="acme", batch="a", status="failed"))
    assert in_a_failed == [i for i in reversed(made) if made.index(i) % 2 and made.index(i) % 3]
    with pytest.raises(InvalidCursor):
        h.d.search(account="acme", cursor="bm90IGEgY3Vyc29y")
    with pytest.raises(ValueError):
        h.d.search(batch="a")  # batch names are per account


def commands(h: Seeder) -> int:
    stats = h.client.info("commandstats")
    return sum(int(v["calls"]) for v in stats.values())


def test_a_page_costs_o_page_among_thousands(h: Seeder) -> None:
    refs = [h.batch(f"acct{i % 4}", f"b{i}") for i in range(40)]
    failed = [h.delivery(refs[i], "failed") for i in range(12)]  # the oldest
    for i in range(1000):
        h.delivery(refs[i % 40], "succeeded")

    def cost() -> tuple[int, list[str]]:
        # The server counts every client's commands: the least of three searches is this
        # one's (a process of an earlier test still winding down adds to one at most).
        counts, ids = [], []
        for _ in range(3):
            before = commands(h)
            found, _ = h.d.search(status="failed", limit=5)
            counts.append(commands(h) - before)
            ids = [d.id for d in found]
        return min(counts), ids

    small, first = cost()
    for i in range(4000):
        h.delivery(refs[i % 40], "succeeded")
    large, again = cost()
    assert first == again == list(reversed(failed))[:5]
    assert small == large  # the same work with 5,012 deliveries as with 1,012
    assert large <= 16 * 3 + 5 * 2 + 10  # per shard: EVALSHA + a page read; per item: 2
    assert h.client.zcard(keyspace.shard_deliveries(refs[0].shard)) > 100


def test_recover_makes_exactly_the_matching_deliveries_due(h: Seeder) -> None:
    refs = [h.batch("acme", f"b{i}") for i in range(8)]
    other = h.batch("other", "b0")
    gone = h.batch("acme", "gone")
    old = [h.delivery(refs[i], "failed") for i in range(4)]
    h.clock.advance(1000)
    since = h.clock() + 1
    window = [h.delivery(refs[i % 8], "failed") for i in range(40)]
    window_ok = [h.delivery(refs[i], "succeeded") for i in range(3)]
    skipped = h.delivery(gone, "failed")
    other_failed = h.delivery(other, "failed")
    h.clock.advance(1000)
    until = h.clock()
    late = h.delivery(refs[0], "failed")
    h.run(h.hooks.delete(gone))  # its webhook removed: not sent again
    h.clock.advance(5)
    now = h.clock()
    result = h.d.recover(
        status="failed", since_ms=since, until_ms=until, account="acme", progress=None
    )
    assert (result.recovered, result.skipped) == (40, 1)
    for ident in window:
        d = h.d.get(ident)
        assert d is not None and d.status is DeliveryStatus.PENDING and d.next_attempt_at == now
        shard = keyspace.shard_of_id("msg", ident)
        assert shard is not None and shard in result.shards
        assert h.client.zscore(keyspace.due(shard), ident) == now
    for ident in [*old, late, skipped, other_failed]:
        assert h.get(ident).status is DeliveryStatus.FAILED
    assert all(h.get(i).status is DeliveryStatus.SUCCEEDED for i in window_ok)
    # The indexes moved with them: failed now lists only the ones left as they were.
    assert set(flat(pages(h.d, 50, account="acme", status="failed"))) == {
        *old,
        late,
        skipped,
    }
    assert set(flat(pages(h.d, 50, status="pending"))) == set(window)
    # The claim hands them out with the same id, a fresh round.
    claimed = h.d.claim(refs[0].shard, limit=100, lease_ms=1000, token="x")
    assert {c.id for c in claimed} <= set(window) and all(c.round_attempts == 0 for c in claimed)


def test_recover_in_chunks_skips_what_it_cannot_send(h: Seeder) -> None:
    ref = h.batch("acme", "one")
    disabled = h.batch("acme", "off")
    made = [h.delivery(ref, "failed") for _ in range(7)]
    off = [h.delivery(disabled, "failed") for _ in range(3)]
    h.client.hset(keyspace.webhook(disabled.shard, "acme", "off"), "disabled", "1")
    seen: list[int] = []
    run = RecoverRun(DeliveryStatus.FAILED, None, 0, None, h.clock(), chunk=2)
    while run.pending:
        calls = run.calls()
        replies = [h.d.scripts("recover_deliveries", k, a) for _, k, a in calls]
        run.feed([s for s, _, _ in calls], replies)
        seen.append(run.result.recovered)
    assert (run.result.recovered, run.result.skipped) == (7, 3)
    assert len(seen) >= 4  # chunks of 2
    assert all(h.get(i).status is DeliveryStatus.PENDING for i in made)
    assert all(h.get(i).status is DeliveryStatus.FAILED for i in off)
