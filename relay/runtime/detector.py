"""The completion detector and the sweepers (``relay detector``).

Detector: every batch completion is appended to its shard's outbox stream by the same script
that completes the batch, and so is every document event (``document.succeeded``,
``document.failed``) of a batch whose webhook asks for them, by the script that ends the
document, ahead of its batch's completion. Detectors read the outboxes through one consumer
group, so several can run at once and each entry goes to one of them; an entry is
acknowledged only after its delivery exists, and entries left unacknowledged by a dead
detector are claimed by a live one after ``RECLAIM_IDLE_MS``. Creating the delivery is
idempotent on (batch, completion_seq): one completion, one delivery, whatever crashes in
between; a document event's on its id (``keyspace.document_event_id``).

Sweepers, every ``RELAY_SWEEP_INTERVAL``:
- document leases that expired (worker lost) -> queued again, or failed ``worker_lost``;
- documents waiting in a shard's fair queue while no processing job waits in the queue (a
  lost job, a crash between hand-out and enqueue, a Redis restart) -> a job is enqueued;
- due deliveries in no queue (a lost worker's lease ran out, a retry came due, Redis was
  restarted) -> the shard is woken;
- finished batches past ``RELAY_RETENTION`` (none of their deliveries pending) -> purged, at
  most ``RELAY_PURGE_STEPS`` bounded purge steps per shard per sweep (``relay.state.retention``);
  outbox entries every detector acknowledged -> trimmed.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from relay import logs, tracing
from relay.redis import keyspace
from relay.redis.clients import is_cluster, is_store_full
from relay.runtime.context import WorkerContext
from relay.state import job_queues, slices
from relay.state.event_bodies import (
    DELIVERY_FAILED,
    EVENT_TYPE,
    WEBHOOK_DISABLED,
    document_body,
    event_body,
    notification_body,
)
from relay.state.event_feed import append_call
from relay.state.model import Batch, Document
from relay.state.retention import trim_outbox
from relay.state.store import BatchRef
from relay.state.webhooks import created_reply, operational_ref

log = logging.getLogger("relay.runtime.detector")

GROUP = keyspace.OUTBOX_GROUP
RECLAIM_IDLE_MS = 10_000
READ_COUNT = 200
# On a Cluster, seconds between two reads of the outboxes that found nothing (no blocking
# read can wait on streams of several slots).
CLUSTER_POLL = 0.05


def _entry_order(entry_id: bytes) -> tuple[int, int]:
    ms, _, seq = entry_id.partition(b"-")
    return int(ms), int(seq or 0)


def operational_event_id(shard: int, entry_id: str, fields: dict[bytes, bytes]) -> str:
    """The id of the operational event of one outbox entry (of ``shard``): derived from the
    event, not the entry (``keyspace.fact_id``), so the event redone after a failover keeps it.
    ``delivery.failed``: the delivery and its attempt count when it failed (a failed delivery
    retried by hand and failing again is another event). ``webhook.disabled``: the webhook
    (account, batch, its ``created_at``) and its count of disables. An entry written before
    these fields existed keeps its id from the entry (``keyspace.event_id``)."""

    def text(name: str) -> str:
        return fields.get(name.encode(), b"").decode()

    account, kind = text("account"), text("kind")
    home = operational_ref(account).shard
    if kind == DELIVERY_FAILED and text("id"):
        delivery = text("id")
        # The delivery's id holds its batch's created_at (``keyspace.completion_id``): never
        # after the failure; another kind of id may hold anything (then no time).
        at = keyspace.event_time(delivery) or 0
        at = at if at <= int(text("at") or 0) else 0
        return keyspace.fact_id(home, at, account, kind, delivery, text("attempts"))
    if kind == WEBHOOK_DISABLED and text("generation"):
        created = text("webhook_created_at")
        return keyspace.fact_id(
            home, int(created or 0), account, kind, text("batch"), created, text("generation")
        )
    return keyspace.event_id(home, shard, entry_id)


def ensure_groups(client: redis.Redis) -> None:
    for s in keyspace.all_shards():
        try:
            # From id 0: completions recorded before the group existed are not lost.
            client.xgroup_create(keyspace.outbox(s), GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise


@dataclass(frozen=True)
class _Entry:
    """One outbox entry to handle: the calls of its feed event (``append_event.lua``) and
    of its delivery (``create_delivery.lua``), each (keys, args); the shard to wake for
    that delivery."""

    shard: int
    entry_id: bytes
    append: tuple[list[str], list[Any]]
    create: tuple[list[str], list[Any]]
    wake_shard: int


class Detector:
    """Turns outbox entries into deliveries; sweeps leases, hand-outs and due deliveries."""

    def __init__(
        self,
        ctx: WorkerContext,
        consumer: str | None = None,
        *,
        reclaim_idle_ms: int = RECLAIM_IDLE_MS,
    ) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.redis = ctx.redis
        self.queue_redis = ctx.queue_redis  # RQ's: the wake-up markers and jobs
        # Which shard each outbox stream belongs to, for the replies of XREADGROUP: every
        # shard in use (re-listed when the count of shards is raised, ``run``).
        self.outboxes = {keyspace.outbox(s): s for s in keyspace.all_shards()}
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.reclaim_idle_ms = reclaim_idle_ms
        self.stop = threading.Event()

    # -- completions -----------------------------------------------------------------------

    def handle(self, shard: int, entry_id: bytes, fields: dict[bytes, bytes]) -> None:
        """Create the delivery for one outbox entry, then acknowledge it."""
        self._handle_one(self._plan(shard, entry_id, fields))

    def _plan(self, shard: int, entry_id: bytes, fields: dict[bytes, bytes]) -> _Entry:
        """What one outbox entry asks for: its feed event and its delivery."""
        if b"kind" in fields:
            return self._plan_event(shard, entry_id, fields)
        if b"doc" in fields:
            return self._plan_document(shard, entry_id, fields)
        account = fields[b"account"].decode()
        name = fields[b"batch"].decode()
        seq = int(fields[b"seq"])
        snapshot = {k.encode(): str(v).encode() for k, v in json.loads(fields[b"snapshot"]).items()}
        batch = Batch.from_hash(snapshot)
        body = notification_body(batch, self.settings.public_url)
        # The event's id is its webhook-id: the same for the feed and every delivery, and
        # for this completion made again (lost with a failed-over primary).
        event_id = keyspace.completion_id(shard, account, name, batch.created_at, seq)
        # From the completion to its delivery, in the batch's trace; the delivery keeps it.
        trace = tracing.recorded(
            "relay.batch.completed",
            parent=snapshot.get(b"trace", b"").decode(),
            start_ms=batch.completed_at or 0,
            attributes={"relay.account": account, "relay.batch": name, "relay.event.id": event_id},
        )
        create = self.ctx.webhooks.create_call(
            BatchRef(account, name, shard), seq, body, batch.completed_at or 0, event_id, trace
        )
        return _Entry(
            shard,
            entry_id,
            append_call(account, keyspace.FEED_BATCHES, event_id, EVENT_TYPE, name, body),
            create,
            shard,
        )

    def _plan_document(self, shard: int, entry_id: bytes, fields: dict[bytes, bytes]) -> _Entry:
        """One document event (an entry with a ``doc``: ``raise_document_events`` in
        ``_lib.lua``): in the account's feed, and delivered to the batch's webhook when it
        asks for the event's type (``create_delivery.lua`` decides, and settles the event
        when it makes no delivery). Its id is derived from the document
        (``keyspace.document_event_id``): the same for the feed and the delivery."""
        account = fields[b"account"].decode()
        name = fields[b"batch"].decode()
        type_ = fields[b"type"].decode()
        snapshot = {k.encode(): str(v).encode() for k, v in json.loads(fields[b"snapshot"]).items()}
        doc = Document.from_hash(snapshot)
        body = document_body(
            doc, fields.get(b"batch_metadata", b"").decode(), self.settings.public_url
        )
        event_id = keyspace.document_event_id(shard, account, name, doc.id, doc.created_at, type_)
        create = self.ctx.webhooks.create_document_call(
            BatchRef(account, name, shard),
            doc.id,
            type_,
            body,
            event_id,
            # Its attempts' spans are children of the document's upload span.
            snapshot.get(b"trace", b"").decode(),
        )
        return _Entry(
            shard,
            entry_id,
            append_call(account, keyspace.FEED_BATCHES, event_id, type_, name, body),
            create,
            shard,
        )

    def _plan_event(self, shard: int, entry_id: bytes, fields: dict[bytes, bytes]) -> _Entry:
        """One operational event (``webhook.disabled``, ``delivery.failed``): in the
        operator's feed whether or not an operational webhook is registered, and delivered
        to the account's operational webhook (dropped when it has none or it is disabled).
        Idempotent on the event's id (``operational_event_id``); the id of its delivery (in
        the shard of the account's operational webhook) is the same."""
        account = fields[b"account"].decode()
        body = event_body(fields)
        event_id = operational_event_id(shard, entry_id.decode(), fields)
        kind, batch = fields[b"kind"].decode(), fields.get(b"batch", b"").decode()
        create = self.ctx.webhooks.create_event_call(account, event_id, body, event_id)
        return _Entry(
            shard,
            entry_id,
            append_call(account, keyspace.FEED_OPERATIONAL, event_id, kind, batch, body),
            create,
            operational_ref(account).shard,
        )

    def _handle_one(self, e: _Entry) -> None:
        """The entry's event appended, its delivery created (a job woken for it), then the
        entry acknowledged: one call after the other."""
        self.ctx.events.scripts("append_event", *e.append)
        created, _ = created_reply(self.ctx.webhooks.scripts("create_delivery", *e.create))
        if created:
            job_queues.wake(self.queue_redis, e.wake_shard, self.settings)
        self.redis.xack(keyspace.outbox(e.shard), GROUP, e.entry_id)

    def handle_all(self, read: list[tuple[int, bytes, dict[bytes, bytes]]]) -> None:
        """Handle the entries of one read (``(shard, entry id, fields)``, in order) in two
        round trips, not four or five each: every entry's append and creation pipelined
        (in this order, so the feeds record events in the order read), then the
        acknowledgements and the wake-up markers. An entry is acknowledged only when both
        of its calls succeeded; one that failed is handled again after ``reclaim_idle_ms``
        (idempotent), and the first error is raised once the others are acknowledged. On a
        Cluster (scripts go one by one there, ``store_core``) and when Redis has lost its
        scripts, the entries are handled one by one."""
        plans = [self._plan(shard, entry_id, fields) for shard, entry_id, fields in read]
        if not plans:
            return
        if is_cluster(self.redis):
            for e in plans:
                self._handle_one(e)
            return
        events, webhooks = self.ctx.events.scripts, self.ctx.webhooks.scripts
        with self.redis.pipeline(transaction=False) as pipe:
            for e in plans:
                events.evalsha(pipe, "append_event", *e.append)
                webhooks.evalsha(pipe, "create_delivery", *e.create)
            replies = pipe.execute(raise_on_error=False)
        if any(isinstance(r, NoScriptError) for r in replies):
            for e in plans:
                self._handle_one(e)
            return
        acks: dict[int, list[bytes]] = {}
        wakes: set[int] = set()
        error: Exception | None = None
        for i, e in enumerate(plans):
            appended, made = replies[2 * i], replies[2 * i + 1]
            if not isinstance(made, Exception) and created_reply(made)[0]:
                wakes.add(e.wake_shard)
            failed = next((r for r in (appended, made) if isinstance(r, Exception)), None)
            if failed is not None:
                error = error or failed
                continue
            acks.setdefault(e.shard, []).append(e.entry_id)
        self._ack_and_wake(acks, wakes)
        if error is not None:
            raise error

    def _ack_and_wake(self, acks: dict[int, list[bytes]], wakes: set[int]) -> None:
        """Acknowledge entries and wake the delivery queue for shards: one pipeline (the
        markers and the bell in it too when RQ's Redis is this one, ``job_queues.wake``), then
        a job for each marker set."""
        same = self.queue_redis is self.redis
        marked = sorted(wakes) if same else []
        if acks or marked:
            with self.redis.pipeline(transaction=False) as pipe:
                for shard, ids in acks.items():
                    pipe.xack(keyspace.outbox(shard), GROUP, *ids)
                for shard in marked:
                    job_queues.mark_wake(pipe, shard)
                job_queues.ring(pipe, marked, keyspace.delivery_wakeups())
                replies = pipe.execute()
            sets = replies[len(acks) : len(acks) + len(marked)]
            for shard, set_now in zip(marked, sets, strict=True):
                if set_now:
                    job_queues.enqueue_delivery(self.queue_redis, shard, self.settings)
        if not same:
            for shard in sorted(wakes):
                job_queues.wake(self.queue_redis, shard, self.settings)

    def read_once(self, block_ms: int) -> int:
        if is_cluster(self.redis):
            replies = self._read_each(block_ms)
        else:
            streams = dict.fromkeys(self.outboxes, ">")
            replies = self.redis.xreadgroup(
                GROUP, self.consumer, streams, count=READ_COUNT, block=block_ms
            )
        # Handled in completion order across the shards (outbox entry ids are Redis time),
        # so the account feeds record events in the order they were raised.
        read = [
            (_entry_order(entry_id), self.outboxes[stream.decode()], entry_id, fields)
            for stream, entries in replies or []
            for entry_id, fields in entries
        ]
        read.sort(key=lambda r: (r[0], r[1]))
        self.handle_all([(shard, entry_id, fields) for _, shard, entry_id, fields in read])
        return len(read)

    def _read_each(self, block_ms: int) -> list[Any]:
        """On a Cluster: one XREADGROUP per outbox (one command may not name keys of
        several slots), pipelined (one round trip per node), without blocking; when all are
        empty, wait ``CLUSTER_POLL`` seconds (or ``block_ms``, when shorter) before the next
        read, as a blocking read of all would."""
        with self.redis.pipeline(transaction=False) as pipe:
            for stream in self.outboxes:
                pipe.xreadgroup(GROUP, self.consumer, {stream: ">"}, count=READ_COUNT)
            found = [reply for replies in pipe.execute() for reply in replies or []]
        if not found:
            self.stop.wait(min(block_ms / 1000, CLUSTER_POLL))
        return found

    def reclaim(self) -> int:
        """Take over entries another (dead) detector read but never acknowledged."""
        handled = 0
        for s in keyspace.all_shards():
            reply = self.redis.xautoclaim(
                keyspace.outbox(s), GROUP, self.consumer, self.reclaim_idle_ms, "0-0", count=100
            )
            for entry_id, fields in reply[1]:
                if fields:  # None when the entry was trimmed away
                    self.handle(s, entry_id, fields)
                    handled += 1
                else:
                    self.redis.xack(keyspace.outbox(s), GROUP, entry_id)
        return handled

    # -- sweepers --------------------------------------------------------------------------

    def sweep_leases(self) -> int:
        """Documents whose lease expired go back to their fair queue (or fail worker_lost)."""
        store = self.ctx.store
        requeued = 0
        for s in keyspace.all_shards():
            for member in store.expired_leases(s):
                doc_id, index = keyspace.slice_of(member)  # a document, or a slice of one
                ref = store.doc_batch(s, doc_id)
                if ref is None:
                    store.drop_lease(s, member)
                    continue
                if index is not None:
                    outcome = slices.requeue_slice(
                        store, ref, doc_id, index, self.settings.max_document_attempts
                    )
                else:
                    outcome = store.requeue(ref, doc_id, self.settings.max_document_attempts)
                if outcome == "requeued":
                    requeued += 1
                    job_queues.wake_processing(self.queue_redis, s, self.settings)
                where = {"slice": index} if index is not None else {}
                log.log(
                    logging.WARNING if outcome == "failed" else logging.INFO,
                    "document lease expired",  # its worker was lost
                    extra=logs.fields(
                        doc_id=doc_id,
                        **where,
                        account=ref.account,
                        batch=ref.name,
                        status={"requeued": "queued"}.get(outcome, outcome),
                        error="worker_lost" if outcome == "failed" else None,
                    ),
                )
        return requeued

    def sweep_ready(self) -> int:
        """Wake the processing queue when documents wait in a fair queue and no processing
        job waits to take them (a lost job, a crash between hand-out and enqueue, a Redis
        restart). Running jobs need no help: each ends within its budget and wakes another
        while documents wait. Returns how many jobs were enqueued (0 or 1)."""
        if self.queue_redis.llen(job_queues.queue_key(job_queues.PROCESSING)):
            return 0
        shards = self.ctx.store.waiting_shards()
        if not shards:
            return 0
        return int(job_queues.wake_processing(self.queue_redis, shards[0], self.settings))

    def sweep_due(self) -> int:
        shards = self.ctx.webhooks.due_shards()
        return sum(job_queues.wake(self.queue_redis, s, self.settings) for s in shards)

    def sweep_retention(self) -> int:
        """Purge finished batches past the retention (bounded per shard); trim the outboxes.
        Returns the batches whose purge finished."""
        retention = self.ctx.retention
        purged = 0
        for s in keyspace.all_shards():
            try:
                report = retention.sweep_shard(s, self.settings.purge_steps)
                if retention.blobs.outside:
                    retention.sweep_deletions(s)
                retention.purge_events(s)
                self.ctx.events.trim(s)
                trim_outbox(self.redis, s, GROUP)
            except ResponseError as exc:  # e.g. Redis full: the next sweep tries again
                log.warning("retention sweep of shard %d: %s", s, exc)
                continue
            if report.purged:
                log.info("shard %d: purged %d finished batch(es)", s, report.purged)
            purged += report.purged
        return purged

    def sweep(self) -> None:
        self.reclaim()
        self.sweep_leases()
        self.sweep_ready()
        self.sweep_due()
        self.sweep_retention()

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        """Until ``stop`` is set: read completions, sweep on schedule, ride out Redis outages."""
        interval = self.settings.sweep_interval
        cap = self.settings.redis_backoff_cap
        next_sweep = 0.0
        backoff = 0.1
        groups_ready = False
        while not self.stop.is_set():
            try:
                if len(self.outboxes) != len(keyspace.all_shards()):  # the count was raised
                    self.outboxes = {keyspace.outbox(s): s for s in keyspace.all_shards()}
                    groups_ready = False
                if not groups_ready:
                    ensure_groups(self.redis)
                    groups_ready = True
                now = time.monotonic()
                if now >= next_sweep:
                    self.sweep()
                    next_sweep = now + interval
                block = max(1, int((next_sweep - time.monotonic()) * 1000))
                self.read_once(min(block, 1000))
                backoff = 0.1
            except (RedisConnectionError, RedisTimeoutError, ConnectionError) as exc:
                log.warning("redis unavailable (%s); retrying in %.1fs", exc, backoff)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, cap)
            except ResponseError as exc:
                if "NOGROUP" in str(exc):  # Redis restarted without our groups
                    groups_ready = False
                    continue
                if is_store_full(exc):
                    # maxmemory reached: writes are refused until memory is freed. Nothing
                    # is half-done (a script is refused before its first write); an outbox
                    # entry read but not acknowledged is taken up again by reclaim().
                    log.warning("redis is full (maxmemory reached); retrying in %.1fs", backoff)
                else:
                    # Any other refusal (a replica's READONLY or MASTERDOWN during a
                    # failover...): the detector must outlive it, not exit and leave every
                    # later completion without its delivery.
                    log.error("redis refused a command (%s); retrying in %.1fs", exc, backoff)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, cap)
            except RedisError as exc:
                log.error("redis error (%r); retrying in %.1fs", exc, backoff)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, cap)
