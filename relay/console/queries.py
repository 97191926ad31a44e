"""Everything the console reads and changes, and the only place it touches state.

The console is another edge over the same domain queries as ``GET /deliveries``; its pages
call :class:`ConsoleQueries` and nothing else. The Deliveries page and recovery are the
store's exact, indexed search and its chunked recovery (``relay.state.delivery_search``), the same
as ``GET /deliveries`` and ``POST /deliveries/recover``. The overview and the webhooks page read the
newest deliveries of every shard (at most ``relay.state.all_shards.SCAN_CAP``), until webhooks have
an index of their own. The review pages read through :class:`ReviewQueries`: batches, a batch's
documents, a document's result and its kept source (``relay.state.review``,
``relay.state.sources``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from relay.delivery.probe import Prober, ProbeResult
from relay.exceptions import WebhookNotFound
from relay.state.all_shards import AllShards
from relay.state.api_keys import ACCOUNT_RE
from relay.state.event_feed import FEED_BATCHES, FEED_OPERATIONAL, AsyncEventLog, FeedPage
from relay.state.model import Attempt, Batch, Delivery, DeliveryStatus, Webhook, valid_batch_name
from relay.state.review import DocumentRow, ReviewReads
from relay.state.sources import AsyncSources, SourceRef
from relay.state.store import AsyncStore, BatchRef
from relay.state.webhooks import AsyncWebhookStore
from relay.timefmt import now_ms

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
_CHUNK = 200


@dataclass(frozen=True)
class DeliveryFilter:
    status: str = ""
    account: str = ""
    batch: str = ""
    since_ms: int = 0
    until_ms: int = 0  # 0: no upper bound


@dataclass
class WebhookRow:
    account: str
    batch: str
    webhook: Webhook
    failed: int = 0  # deliveries failed in the last 24 h
    succeeded: int = 0
    last_error: str = ""
    last_status_code: int | None = None


@dataclass
class Overview:
    since_ms: int
    now_ms: int
    # attempts of the last 24 h per hour (oldest first): {outcome: count}
    hourly: list[Counter[str]]
    by_outcome: Counter[str]
    lag_p50: float | None
    lag_p99: float | None
    lag_samples: int
    due_backlog: int
    oldest_due_age_s: float | None
    totals: dict[str, int] = field(default_factory=dict)  # the metrics hash, since start
    failing: list[WebhookRow] = field(default_factory=list)


def outcome_of(attempt: Attempt) -> str:
    """``succeeded`` (2xx), ``rejected`` (another status) or ``error`` (no answer)."""
    if attempt.status_code is None:
        return "error"
    return "succeeded" if 200 <= attempt.status_code < 300 else "rejected"


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class ConsoleQueries:
    """The console's reads and actions over the state layer: the webhook store, the
    cross-shard reads (``relay.state.all_shards``) and a way to wake a shard's delivery job."""

    def __init__(
        self,
        store: AsyncWebhookStore,
        scans: AllShards,
        wake: Callable[[int], Awaitable[None]],
        prober: Prober | None = None,
        events: AsyncEventLog | None = None,
    ) -> None:
        self.store = store
        self.all_shards = scans
        self._wake = wake
        self.prober = prober  # test sends (the API process's delivery transport)
        self.events = events  # the accounts' event feeds

    # -- deliveries ---------------------------------------------------------------------

    async def _ids(self, since_ms: int, until_ms: int) -> list[tuple[int, str]]:
        return await self.all_shards.newest_deliveries(since_ms, until_ms)

    async def _hashes(self, ids: list[str]) -> list[tuple[dict[bytes, bytes], list[bytes]]]:
        return await self.all_shards.delivery_hashes(ids)

    async def search(
        self, f: DeliveryFilter, limit: int, cursor: str = ""
    ) -> tuple[list[Delivery], str | None]:
        """Deliveries matching ``f``, newest first; ``limit`` per page and the next page's
        cursor (None on the last page): the exact, indexed query of ``GET /deliveries``.
        Raises ValueError for a batch without its account, InvalidCursor for a bad cursor."""
        if f.batch and not f.account:
            raise ValueError("a batch is named within its account: give the account too")
        return await self.store.search(
            account=f.account or None,
            status=f.status or None,
            batch=f.batch or None,
            since_ms=f.since_ms or None,
            until_ms=f.until_ms or None,
            limit=limit,
            cursor=cursor or None,
        )

    async def delivery(self, delivery_id: str) -> Delivery | None:
        return await self.all_shards.delivery(delivery_id)

    async def retry(self, delivery_id: str) -> Delivery:
        """Deliver again now (same webhook-id) and wake a delivery worker. Raises
        DeliveryNotFound, NotRetryable."""
        delivery = await self.store.retry_any(delivery_id)
        await self._wake(self.all_shards.batch_of(delivery).shard)
        return delivery

    async def recover(self, f: DeliveryFilter) -> int:
        """Make every delivery matching ``f`` (status failed or canceled) due again now, in
        the store's chunked server-side recovery; the number made due."""
        result = await self.store.recover(
            status=f.status or DeliveryStatus.FAILED,
            since_ms=f.since_ms,
            until_ms=f.until_ms or None,
            account=f.account or None,
        )
        for shard in sorted(result.shards):
            await self._wake(shard)
        return result.recovered

    # -- webhooks -----------------------------------------------------------------------

    async def webhooks(self, now: int | None = None) -> list[WebhookRow]:
        """The webhooks of the batches with deliveries, disabled ones first, then the most
        failing of the last 24 h.

        The batches come from the newest deliveries until webhooks have an index of their own.
        """
        now = now or now_ms()
        ids = await self._ids(0, 0)
        rows: dict[tuple[str, str], WebhookRow] = {}
        order: list[tuple[str, str]] = []
        hashes: list[tuple[dict[bytes, bytes], list[bytes]]] = []
        for start in range(0, len(ids), _CHUNK):
            hashes += await self._hashes([i for _, i in ids[start : start + _CHUNK]])
        seen: dict[tuple[str, str], list[Delivery]] = {}
        refs: dict[tuple[str, str], BatchRef] = {}
        for h, attempts in hashes:
            if not h:
                continue
            d = Delivery.from_hash(h, attempts)
            key = (d.account, d.batch_name)
            if key not in seen:
                seen[key] = []
                order.append(key)
                refs[key] = self.all_shards.batch_of(d)
            if d.created_at >= now - DAY_MS:
                seen[key].append(d)
        hooks = await self.all_shards.webhooks_of([refs[key] for key in order])
        for (account, batch), hook in zip(order, hooks, strict=True):
            if hook is None:
                continue
            row = WebhookRow(account, batch, hook)
            for d in seen[(account, batch)]:
                if d.status == DeliveryStatus.FAILED:
                    row.failed += 1
                elif d.status == DeliveryStatus.SUCCEEDED:
                    row.succeeded += 1
            last = [a for d in seen[(account, batch)] for a in d.attempts]
            if last:
                latest = max(last, key=lambda a: a.at)
                if outcome_of(latest) != "succeeded":
                    row.last_error = latest.error or f"HTTP {latest.status_code}"
                    row.last_status_code = latest.status_code
            rows[(account, batch)] = row
        return sorted(
            rows.values(),
            key=lambda r: (not r.webhook.disabled, -r.failed, r.account, r.batch),
        )

    async def set_disabled(
        self, account: str, batch: str, disabled: bool, reason: str = ""
    ) -> None:
        """Disable (pending delivery canceled) or enable a webhook. Raises WebhookNotFound."""
        await self.store.set_disabled(
            await self.all_shards.locate(account, batch), disabled, reason
        )

    async def feed(
        self, account: str, operational: bool, after: str | None, limit: int
    ) -> FeedPage:
        """One page of an account's event feed (or its operational one), oldest first.
        Raises InvalidCursor."""
        if self.events is None:
            return FeedPage([], after, False)
        feed = FEED_OPERATIONAL if operational else FEED_BATCHES
        return await self.events.page(account, feed, after=after, limit=limit)

    async def test_send(self, account: str, batch: str) -> ProbeResult:
        """Send a signed webhook.test to the webhook now; nothing is recorded. Raises
        WebhookNotFound, WebhookNotVerified, WebhookDisabled and OutboundBusy (nothing
        sent)."""
        if self.prober is None:
            raise WebhookNotFound("test sends are not available here")
        return await self.prober.send(await self.all_shards.locate(account, batch))

    # -- overview -----------------------------------------------------------------------

    async def overview(self, now: int | None = None) -> Overview:
        """The last 24 h: attempts by outcome (per hour), notification lag p50/p99, the
        backlog of due deliveries, the failing webhooks."""
        now = now or now_ms()
        since = now - DAY_MS
        hourly: list[Counter[str]] = [Counter() for _ in range(24)]
        by_outcome: Counter[str] = Counter()
        lags: list[float] = []
        ids = await self._ids(since - DAY_MS, 0)  # attempts of older deliveries count too
        for start in range(0, len(ids), _CHUNK):
            for h, attempts in await self._hashes([i for _, i in ids[start : start + _CHUNK]]):
                if not h:
                    continue
                for raw in attempts:
                    a = Attempt.from_json(raw)
                    if a.at < since or a.at > now:
                        continue
                    outcome = outcome_of(a)
                    by_outcome[outcome] += 1
                    hourly[min(23, (a.at - since) // HOUR_MS)][outcome] += 1
                done, ok = h.get(b"completed_at"), h.get(b"succeeded_at")
                if done and ok and int(ok) >= since:
                    lags.append(max(0.0, (int(ok) - int(done)) / 1000))
        backlog, oldest, counters = await self.all_shards.due_backlog(now)
        totals = {
            k.decode().partition("=")[2]: int(float(v))
            for k, v in counters.items()
            if k.startswith(b"relay_delivery_attempts_total|")
        }
        failing = [r for r in await self.webhooks(now) if r.webhook.disabled or r.failed]
        return Overview(
            since_ms=since,
            now_ms=now,
            hourly=hourly,
            by_outcome=by_outcome,
            lag_p50=_percentile(lags, 0.5),
            lag_p99=_percentile(lags, 0.99),
            lag_samples=len(lags),
            due_backlog=backlog,
            oldest_due_age_s=(now - oldest) / 1000 if oldest is not None else None,
            totals=totals,
            failing=failing,
        )


# -- the review pages ---------------------------------------------------------------------


def _cursor(raw: str, parts: int) -> list[str] | None:
    """A ``a:b[:c]`` cursor of a review list split in ``parts``, its first a number; None
    when it is not one (the list then starts from its first page)."""
    fields = raw.split(":")
    if len(fields) != parts or not fields[0].isdigit() or not all(fields):
        return None
    return fields


class ReviewQueries:
    """The review pages' reads: batches (recently finished, or one account's), a batch's
    documents, one document with its result, and its kept source."""

    def __init__(self, store: AsyncStore, reads: ReviewReads, sources: AsyncSources) -> None:
        self.store = store
        self.reads = reads
        self.sources = sources

    async def batches(self, account: str, cursor: str, limit: int) -> tuple[list[Batch], str]:
        """One account's batches, newest first, or (no account) the batches finished most
        recently across every account; and the next page's cursor ("" on the last page)."""
        if account:
            parsed = _cursor(cursor, 2)
            before = (int(parsed[0]), parsed[1]) if parsed else None
            batches, after = await self.store.list_batches(account, before=before, limit=limit)
            return batches, f"{after[0]}:{after[1]}" if after else ""
        parsed = _cursor(cursor, 3)
        recent = (int(parsed[0]), parsed[1], parsed[2]) if parsed else None
        batches, next_recent = await self.reads.recent_batches(limit, recent)
        return batches, ":".join(map(str, next_recent)) if next_recent else ""

    async def batch(
        self, account: str, name: str, start: int, limit: int
    ) -> tuple[Batch | None, list[DocumentRow], int | None]:
        """The batch and a page of its documents from position ``start``."""
        if not (ACCOUNT_RE.fullmatch(account) and valid_batch_name(name)):
            return None, [], None
        ref = await self.store.locate(account, name)
        batch = await self.store.get_batch(ref)
        if batch is None:
            return None, [], None
        rows, next_start = await self.reads.documents(ref, start, limit)
        return batch, rows, next_start

    async def document(self, doc_id: str) -> tuple[SourceRef, list[Any] | None] | None:
        """Any account's document, where its source is, and its result's tables."""
        return await self.reads.document(doc_id)

    async def locate(self, doc_id: str) -> SourceRef | None:
        return await self.sources.locate(doc_id)

    async def source(self, ref: SourceRef) -> bytes | None:
        """The document's kept source, None when it is gone."""
        return await self.sources.read(ref) if ref.finished and ref.kept else None
