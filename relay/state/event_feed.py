"""The event feeds: every event relay created for an account, in order, and long polling.

An account has two feeds: ``events`` (``batch.completed``, and ``document.succeeded`` and
``document.failed`` for batches whose webhook asks for them; ``GET /api/v1/events``) and
``ops_events`` (``webhook.disabled``, ``delivery.failed``; the operator's feed). Each feed is
one Redis stream in the account's events shard (``relay.redis.keyspace.event_log``), appended by the
detector for every outbox entry it handles, whether or not a webhook is registered
(``append_event.lua``, idempotent on the event id: a detector that handles an entry again
appends nothing). The event's id is its webhook-id (``relay.redis.keyspace.completion_id``,
``relay.redis.keyspace.fact_id``: derived from what identifies the event, not from the outbox entry,
so an event redone after a failover keeps it; also the id of its deliveries) and its body
is the webhook's exact body.

Why one stream per account rather than a merge of the shards: a cursor over one stream is one
position, and a stream's entry ids only grow, so an event recorded after a page was read is
always after that page, whatever shard raised it and whatever its timestamp: the feed never
skips or repeats. Events from different shards are recorded in the order the detector reads
them (it sorts each read by outbox entry id, i.e. by completion). Writes from shards to the
account's stream are separate calls (no cross-shard atomicity); the outbox entry is
acknowledged only after the append, so a crash costs a repeated, idempotent append.

The cursor is the id of the last event seen (``after``): the positions hash maps it back to
its entry. An id the feed no longer holds because it aged out (``RELAY_RETENTION``, the
retention sweeper's ``trim``) reads from the oldest event kept: every event kept is after
it. Any other unknown id is EventNotFound (404).

Long polling (``FeedWaiters``): each API process holds one pub/sub subscription to
``relay.redis.keyspace.events_channel`` (the append publishes ``<feed>:<account>``) and wakes the
requests waiting for that feed through asyncio events; no Redis connection is held per
waiting request. The listener has deadlines on every read, pings a quiet connection,
reconnects with a backoff, and wakes every waiter after a reconnect (they read again); a
waiter also reads again every ``FALLBACK_S`` seconds, so a lost message costs that much at
most. The number of waiting requests is bounded per process and per account.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, cast

import redis
import redis.asyncio

from relay.exceptions import EventNotFound, StateError
from relay.redis import keyspace
from relay.state import webhooks_core as core
from relay.state.event_bodies import BATCH_WEBHOOK_TYPES, FeedEvent
from relay.state.scripts import AsyncScripts, Scripts, fields
from relay.timefmt import now_ms

log = logging.getLogger("relay.state.event_feed")

FEED_BATCHES = keyspace.FEED_BATCHES  # the account's feed: GET /events
# the operator's feed: GET /operational-events, relay events --operational
FEED_OPERATIONAL = keyspace.FEED_OPERATIONAL
MAX_WAIT_S = 30  # the longest `wait=` of one request
MAX_PAGE = 200  # the most events one read returns (GET /events?limit=, relay events --limit)
FALLBACK_S = 5.0  # a waiter reads again this often even without a wake-up
SCAN = 500  # entries read per round when filters may leave most of them out
BATCH_TYPES = BATCH_WEBHOOK_TYPES
OPERATIONAL_TYPES = ("webhook.disabled", "delivery.failed")
TYPES = {keyspace.FEED_BATCHES: BATCH_TYPES, keyspace.FEED_OPERATIONAL: OPERATIONAL_TYPES}


class TooManyWaiters(StateError):
    """More long polls wait in this process (for this account, or in all) than allowed;
    ``limit`` is the bound met."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


@dataclass(frozen=True)
class FeedPage:
    events: list[FeedEvent]
    next_cursor: str | None  # the id of the last event read (``after`` when none was)
    has_more: bool  # events may follow right now (read again without waiting)


def render(entry: dict[str, str]) -> FeedEvent:
    """One feed entry (of ``event_page``) as the API shows it: the id, then the webhook
    body's members (the body as ``relay.state.event_bodies`` built it, stored as bytes)."""
    return cast(FeedEvent, {"id": entry["id"], **json.loads(entry["body"])})


def _expired(after: str, retention_ms: int, now: int) -> bool:
    """Whether ``after`` is an event id old enough to have aged out of a feed."""
    at = keyspace.event_time(after)
    return at is not None and 0 < at < now - retention_ms


def feed_page(
    account: str,
    feed: str,
    after: str | None,
    limit: int,
    type_: str | None,
    batch: str | None,
    retention_ms: int,
    clock: Callable[[], int],
) -> core.Operation[FeedPage]:
    """One page of a feed (``store_core``'s operation, run by both logs): read after
    ``after``, from the oldest kept when the feed holds no ``after`` because it aged out
    (EventNotFound otherwise); keep the entries the filters want, up to ``limit``."""
    count = limit + 1 if type_ is None and batch is None else max(limit + 1, SCAN)
    keys_ = [keyspace.event_log(account, feed), keyspace.event_positions(account, feed)]
    (reply,) = yield [core.script("event_page", keys_, [after or "", count])]
    r = fields(reply)
    if not r["found"]:
        if after is None or not _expired(after, retention_ms, clock()):
            raise EventNotFound(f"no event {after!r} in this feed")
        after = None
        (reply,) = yield [core.script("event_page", keys_, ["", count])]
        r = fields(reply)
    events: list[FeedEvent] = []
    cursor = after
    entries: list[dict[str, str]] = r.get("entries", [])
    has_more = len(entries) >= count
    for entry in entries:
        wanted = (type_ is None or entry.get("type", "") == type_) and (
            batch is None or entry.get("batch", "") == batch
        )
        if wanted and len(events) == limit:
            has_more = True
            break
        cursor = entry["id"]
        if wanted:
            events.append(render(entry))
    return FeedPage(events, cursor, has_more)


def append_call(
    account: str, feed: str, event_id: str, type_: str, batch: str, body: bytes
) -> tuple[list[str], list[Any]]:
    """The keys and arguments of ``append_event.lua`` for one event (``EventLog.append``;
    the detector also queues it on a pipeline)."""
    return (
        [
            keyspace.event_log(account, feed),
            keyspace.event_positions(account, feed),
            keyspace.event_logs(keyspace.events_shard(account)),
        ],
        [event_id, f"{feed}:{account}", keyspace.events_channel(), type_, batch, body],
    )


class EventLog:
    """The feeds for the detector (append), the CLI (read) and the retention sweeper."""

    def __init__(
        self, client: redis.Redis, retention_ms: int, clock: Callable[[], int] = now_ms
    ) -> None:
        self.redis = client
        self.scripts = Scripts(client)
        self.retention_ms = retention_ms
        self.clock = clock

    def append(
        self, account: str, feed: str, event_id: str, type_: str, batch: str, body: bytes
    ) -> bool:
        """Record one event (once). Returns whether it was appended now."""
        reply = self.scripts(
            "append_event", *append_call(account, feed, event_id, type_, batch, body)
        )
        return bool(fields(reply)["appended"])

    def page(
        self,
        account: str,
        feed: str = keyspace.FEED_BATCHES,
        *,
        after: str | None = None,
        limit: int = 50,
        type_: str | None = None,
        batch: str | None = None,
    ) -> FeedPage:
        """The events after ``after`` (an event id; None: from the oldest kept), oldest
        first. Raises EventNotFound for an id this feed never held."""
        op = feed_page(account, feed, after, limit, type_, batch, self.retention_ms, self.clock)
        return core.run(self.redis, self.scripts, op)

    def trim(self, shard: int, limit: int = 500) -> int:
        """Retention: entries recorded before now - RELAY_RETENTION leave the feeds of the
        shard (at most ``limit`` feeds, ``limit`` entries each, per call)."""
        cutoff = self.clock() - self.retention_ms
        members = self.redis.zrangebyscore(
            keyspace.event_logs(shard), "-inf", f"({cutoff}", start=0, num=limit
        )
        removed = 0
        for raw in members:
            feed, _, account = raw.decode().partition(":")
            removed += int(
                self.scripts(
                    "trim_event_log",
                    [
                        keyspace.event_log(account, feed),
                        keyspace.event_positions(account, feed),
                        keyspace.event_logs(shard),
                    ],
                    [raw.decode(), cutoff, limit],
                )
            )
        return removed


class AsyncEventLog:
    """The feeds for the API: ``EventLog.page``, with asyncio."""

    def __init__(
        self, client: redis.asyncio.Redis, retention_ms: int, clock: Callable[[], int] = now_ms
    ) -> None:
        self.redis = client
        self.scripts = AsyncScripts(client)
        self.retention_ms = retention_ms
        self.clock = clock

    async def page(
        self,
        account: str,
        feed: str = keyspace.FEED_BATCHES,
        *,
        after: str | None = None,
        limit: int = 50,
        type_: str | None = None,
        batch: str | None = None,
    ) -> FeedPage:
        op = feed_page(account, feed, after, limit, type_, batch, self.retention_ms, self.clock)
        return await core.run_async(self.redis, self.scripts, op)


class FeedWaiters:
    """Long polls of one API process: one pub/sub listener, asyncio events per feed."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
        *,
        max_waiters: int,
        max_per_account: int,
        ping_after_s: float = 5.0,
    ) -> None:
        self.redis = client
        self.max_waiters = max_waiters
        self.max_per_account = max_per_account
        self.ping_after_s = ping_after_s
        self._events: dict[str, asyncio.Event] = {}
        self._counts: dict[str, int] = {}
        self._accounts: dict[str, int] = {}
        self._total = 0
        self.connected = False
        self.reconnects = 0

    # -- the listener ------------------------------------------------------------------

    def wake(self, member: str) -> None:
        event = self._events.get(member)
        if event is not None:
            event.set()
            self._events[member] = asyncio.Event()

    def wake_all(self) -> None:
        for member in list(self._events):
            self.wake(member)

    async def run(self) -> None:
        """Listen until cancelled; reconnect after any failure (with a backoff)."""
        backoff = 0.1
        while True:
            pubsub = self.redis.pubsub()
            try:
                async with asyncio.timeout(5):
                    await pubsub.subscribe(keyspace.events_channel())
                self.connected = True
                self.wake_all()  # whatever was published while we were away: read again
                backoff = 0.1
                await self._listen(pubsub)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: reconnect, waiters read again meanwhile
                if self.connected:
                    log.warning("event listener lost its connection: %s", exc)
                self.connected = False
                self.reconnects += 1
                self.wake_all()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                self.connected = False
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(2):
                        await pubsub.aclose()

    async def _listen(self, pubsub: Any) -> None:
        loop = asyncio.get_running_loop()
        heard = loop.time()
        pinged: float | None = None
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancellation
            # that arrives as the message does (gh-86296), and this loop then never ends:
            # the API's shutdown waited on it for good.
            async with asyncio.timeout(5):
                msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            now = loop.time()
            if msg is not None:
                heard, pinged = now, None
                if msg.get("type") == "message":
                    data = msg["data"]
                    self.wake(data.decode() if isinstance(data, bytes) else str(data))
                continue
            if pinged is not None and now - pinged > self.ping_after_s:
                raise ConnectionError("no answer to a ping on the event channel")
            if pinged is None and now - heard > self.ping_after_s:
                async with asyncio.timeout(5):
                    await pubsub.ping()
                pinged = now

    # -- the waiters -------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watch(self, feed: str, account: str) -> AsyncIterator[Callable[[], asyncio.Event]]:
        """Register a waiting request for a feed; yields ``arm()``, the event to wait on
        (take it before reading the feed, so an append after the read wakes it). Raises
        TooManyWaiters over the bounds."""
        if self._total >= self.max_waiters:
            raise TooManyWaiters(
                "too many requests wait for events in this process", self.max_waiters
            )
        if self._accounts.get(account, 0) >= self.max_per_account:
            raise TooManyWaiters(
                "too many requests of this account wait for events", self.max_per_account
            )
        member = f"{feed}:{account}"
        self._total += 1
        self._accounts[account] = self._accounts.get(account, 0) + 1
        self._counts[member] = self._counts.get(member, 0) + 1
        self._events.setdefault(member, asyncio.Event())
        try:
            yield lambda: self._events[member]
        finally:
            self._total -= 1
            self._accounts[account] -= 1
            if not self._accounts[account]:
                del self._accounts[account]
            self._counts[member] -= 1
            if not self._counts[member]:
                del self._counts[member]
                del self._events[member]


async def wait_for_events(
    read: Callable[[str | None], Any],
    waiters: FeedWaiters,
    feed: str,
    account: str,
    after: str | None,
    wait_s: float,
) -> FeedPage:
    """Read pages from ``after`` until one has events or ``wait_s`` has passed (a page that
    only skipped filtered-out entries moves the cursor on). ``read(after)`` reads a page."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    async with waiters.watch(feed, account) as arm:
        while True:
            event = arm()
            page: FeedPage = await read(after)
            after = page.next_cursor
            left = deadline - loop.time()
            if page.events or left <= 0:
                return page
            if page.has_more:
                continue  # filtered-out entries only, more to scan
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, FALLBACK_S)):
                    await event.wait()
