"""Webhook registrations and deliveries: their transitions (Lua scripts) and reads.

A delivery is created once per batch completion (idempotent on batch + completion_seq),
lives in its batch's shard, and is *due* while its id sits in the shard's ``due`` sorted set.
Workers claim due deliveries with a lease; an attempt's outcome moves the delivery on.
``AsyncWebhookStore`` serves the API; ``WebhookStore`` serves the detector, workers and the
CLI. Waking a worker for due deliveries is the queues' business (``relay.state.job_queues.wake``).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import redis
import redis.asyncio
from redis.exceptions import ResponseError

from relay.exceptions import (
    BatchNotFound,
    WebhookNotFound,
)
from relay.redis import keyspace
from relay.state import webhooks_core as core
from relay.state.delivery_search import RecoverRun, Recovery
from relay.state.event_bodies import EVENT_TYPE, notification_body, verify_body
from relay.state.model import (
    DEFAULT_WEBHOOK_EVENTS,
    Attempt,
    Batch,
    Delivery,
    DeliveryStatus,
    Webhook,
)
from relay.state.scripts import AsyncScripts, Scripts, fields, refusal
from relay.state.store import BatchRef
from relay.timefmt import now_ms

DEFAULT_DISABLE_AFTER_MS = 5 * 86_400_000
DEFAULT_DOCUMENT_EVENTS_WAIT_MS = 300_000  # RELAY_DOCUMENT_EVENTS_WAIT's default
# How often a batch.completed delivery waiting for its batch's document events is looked at
# again (claim_deliveries.lua); the last of them to settle makes it due at once anyway.
WAITING_RECHECK_MS = 5_000


def operational_ref(account: str) -> BatchRef:
    """The account's operational webhook and deliveries: the reserved pseudo-batch."""
    return BatchRef(
        account,
        keyspace.OPERATIONAL_BATCH,
        keyspace.home_shard(account, keyspace.OPERATIONAL_BATCH),
    )


def disable_reason(disable_after_ms: int) -> str:
    """The ``disabled_reason`` of a webhook disabled by RELAY_DISABLE_AFTER."""
    seconds = disable_after_ms / 1000
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            span = f"{seconds // size:g}{unit}"
            break
    else:
        span = f"{seconds:g}s"
    return f"every attempt failed for {span} with no success since the first failure"


def _create_call(
    ref: BatchRef,
    seq: int | str,
    body: bytes,
    completed_ms: int,
    now: int,
    new_id: str | None = None,
) -> tuple[list[str], list[Any]]:
    s, a, n = ref.shard, ref.account, ref.name
    new_id = new_id or keyspace.new_id("msg", s)
    return (
        [
            keyspace.webhook(s, a, n),
            keyspace.batch_delivery_by_seq(s, a, n),
            keyspace.batch_deliveries(s, a, n),
            keyspace.due(s),
            keyspace.shard_deliveries(s),
            keyspace.delivery(s, new_id),
        ],
        [new_id, a, n, seq, now, body, keyspace.shard_prefix(s), completed_ms],
    )


def document_statuses(events: tuple[str, ...]) -> str:
    """The document statuses a webhook's event types ask for, as the batch keeps them
    (``doc_events``: ``succeeded failed``, ``failed``...; "" for none)."""
    return " ".join(t.removeprefix("document.") for t in events if t.startswith("document."))


def created_reply(reply: bytes | str) -> tuple[bool, str]:
    """create_delivery's answer: (created, the delivery's id; '' when there is no webhook)."""
    made = fields(reply)
    return bool(made["created"]), str(made["id"])


@dataclass(frozen=True)
class ClaimedDelivery:
    """One delivery claimed for one attempt."""

    id: str
    shard: int
    account: str
    batch: str
    url: str
    body: bytes
    number: int  # this attempt's number (1-based, over the delivery's life)
    round_attempts: int  # failed attempts since creation or the last manual retry
    created_at: int
    seq: int
    completed_ms: int  # the batch's completed_at for this completion (0: unknown)
    trace: str = ""  # the delivery's trace context ('' when none was kept: relay.tracing)


class Recorded(NamedTuple):
    """What :meth:`WebhookStore.record` did."""

    moved: bool  # the delivery moved on (the lease was still this worker's)
    # A document event's delivery ended and released its batch's batch.completed delivery
    # that waited for it: due now (the caller wakes the shard).
    released: bool = False


class WebhookStore:
    """Delivery state for the detector, the delivery workers and ``relay deliveries``."""

    def __init__(
        self,
        client: redis.Redis,
        clock: Callable[[], int] = now_ms,
        *,
        max_attempts: int = 20,
        disable_after_ms: int = DEFAULT_DISABLE_AFTER_MS,
        document_events_wait_ms: int = DEFAULT_DOCUMENT_EVENTS_WAIT_MS,
    ) -> None:
        self.redis = client
        self.scripts = Scripts(client)
        self.clock = clock  # ms since the epoch; tests pass their own
        # Attempts kept per delivery (RELAY_MAX_STORED_ATTEMPTS): the first and the latest.
        self.max_attempts = max_attempts
        # RELAY_DISABLE_AFTER: a webhook failing this long is disabled (record_attempt.lua).
        self.disable_after_ms = disable_after_ms
        # RELAY_DOCUMENT_EVENTS_WAIT: how long a document event without a delivery holds its
        # batch's batch.completed delivery (claim_deliveries.lua).
        self.document_events_wait_ms = document_events_wait_ms

    def create(
        self,
        ref: BatchRef,
        seq: int,
        body: bytes,
        completed_ms: int = 0,
        *,
        delivery_id: str | None = None,
    ) -> tuple[bool, str]:
        """Create the delivery of completion ``seq``: (created, id); id '' = no webhook.
        ``completed_ms`` (the batch's completed_at) lets workers measure notification lag;
        ``delivery_id`` is the event's id (``relay.redis.keyspace.event_id``), a new one when
        None."""
        k, a = _create_call(ref, seq, body, completed_ms, self.clock(), delivery_id)
        return created_reply(self.scripts("create_delivery", k, a))

    def create_event(
        self, account: str, event_id: str, body: bytes, *, delivery_id: str | None = None
    ) -> tuple[bool, str]:
        """Create the delivery of one operational event to the account's operational
        webhook: (created, id); idempotent on ``event_id``; id '' = no operational webhook."""
        return created_reply(
            self.scripts(
                "create_delivery", *self.create_event_call(account, event_id, body, delivery_id)
            )
        )

    def create_call(
        self,
        ref: BatchRef,
        seq: int,
        body: bytes,
        completed_ms: int,
        delivery_id: str,
        trace: str = "",
    ) -> tuple[list[str], list[Any]]:
        """The keys and arguments of ``create_delivery.lua`` for :meth:`create` (the
        detector queues it on a pipeline; :func:`created_reply` reads its reply). ``trace``:
        the delivery's trace context (``relay.tracing``), the parent of its attempts' spans."""
        k, a = _create_call(ref, seq, body, completed_ms, self.clock(), delivery_id)
        return k, [*a, "", trace] if trace else a

    def create_document_call(
        self, ref: BatchRef, doc_id: str, type_: str, body: bytes, event_id: str, trace: str = ""
    ) -> tuple[list[str], list[Any]]:
        """The keys and arguments of ``create_delivery.lua`` for one document event
        (``type_``: ``document.succeeded`` or ``document.failed``) of ``ref``: made only
        when the batch's webhook asks for that type, under ``event_id``, idempotent on it."""
        k, a = _create_call(ref, 0, body, 0, self.clock(), event_id)
        return k, [*a, "document", trace, type_, doc_id]

    def create_document(
        self, ref: BatchRef, doc_id: str, type_: str, body: bytes, event_id: str
    ) -> tuple[bool, str]:
        """Create the delivery of one document event: (created, id); id '' = the webhook
        does not ask for it (or there is none)."""
        k, a = self.create_document_call(ref, doc_id, type_, body, event_id)
        return created_reply(self.scripts("create_delivery", k, a))

    def create_event_call(
        self, account: str, event_id: str, body: bytes, delivery_id: str | None
    ) -> tuple[list[str], list[Any]]:
        """The keys and arguments of ``create_delivery.lua`` for :meth:`create_event`."""
        k, a = _create_call(operational_ref(account), event_id, body, 0, self.clock(), delivery_id)
        return k, [*a, "event"]

    def claim(self, shard: int, *, limit: int, lease_ms: int, token: str) -> list[ClaimedDelivery]:
        reply = self.scripts(
            "claim_deliveries",
            [keyspace.due(shard)],
            [
                self.clock(),
                lease_ms,
                limit,
                token,
                keyspace.shard_prefix(shard),
                self.document_events_wait_ms,
                WAITING_RECHECK_MS,
            ],
        )
        return [
            ClaimedDelivery(
                id=c["id"],
                shard=shard,
                account=c["account"],
                batch=c["batch"],
                url=c["url"],
                body=c["body"].encode(),
                number=int(c["number"]),
                round_attempts=int(c["round_attempts"]),
                created_at=int(c["created_at"]),
                seq=int(c["seq"]),
                completed_ms=int(c["completed_ms"] or 0),
                trace=str(c.get("trace") or ""),
            )
            for c in json.loads(reply)
        ]

    def record(
        self,
        d: ClaimedDelivery,
        token: str,
        attempt: Attempt,
        *,
        outcome: str,
        next_at: int = 0,
        reason: str = "",
        verify: bool = False,
    ) -> Recorded:
        """Append the attempt; move the delivery on while the lease is still ours.
        ``verify``: the attempt delivered an endpoint verification's challenge (its outcome
        verifies the webhook, or fails it). ``released``: a document event's delivery ended
        and its batch's batch.completed delivery, which waited for it, is due now."""
        s = d.shard
        moved = self.scripts(
            "record_attempt",
            [
                keyspace.delivery(s, d.id),
                keyspace.delivery_attempts(s, d.id),
                keyspace.due(s),
                keyspace.webhook(s, d.account, d.batch),
                keyspace.outbox(s),
            ],
            [
                json.dumps(
                    {
                        "id": d.id,
                        "token": token,
                        "now": str(attempt.at),
                        "outcome": outcome,
                        "next_at": str(next_at),
                        "attempt": attempt.encode(),
                        "reason": reason,
                        "keep": str(self.max_attempts),
                        "disable_after": str(self.disable_after_ms),
                        "clock": str(self.clock()),
                        "disable_reason": disable_reason(self.disable_after_ms),
                        "verify": "1" if verify else "",
                    }
                )
            ],
        )
        return Recorded(int(moved) >= 1, int(moved) == 2)

    def release_all(self, claimed: list[ClaimedDelivery], token: str, due_at: int) -> int:
        """Hand claimed deliveries back unattempted, due again at ``due_at`` (ms); one round
        trip. Returns how many were still ours to hand back."""
        op = core.release([(d.shard, d.id) for d in claimed], token, due_at)
        return core.run(self.redis, self.scripts, op)

    def get(self, delivery_id: str) -> Delivery | None:
        if keyspace.shard_of_id("msg", delivery_id) is None:
            return None
        found = core.run(self.redis, self.scripts, core.load([delivery_id]))
        return found[0] if found else None

    def retry(self, delivery_id: str) -> Delivery:
        """Deliver again now, same webhook-id (ops). Raises DeliveryNotFound, NotRetryable."""
        op = core.retry(delivery_id, None, self.clock())
        return core.run(self.redis, self.scripts, op)

    def search(
        self,
        account: str | None = None,
        status: DeliveryStatus | str | None = None,
        batch: str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[Delivery], str | None]:
        """One page of deliveries, newest first, and the cursor of the next page (None at
        the end). Filters are exact (``relay.state.delivery_search``): ``since_ms`` inclusive,
        ``until_ms`` exclusive (creation time); ``batch`` needs ``account``. Two round trips,
        O(page). Raises InvalidCursor; ValueError for an unknown status or a batch without
        account."""
        q = core.query(account, status, batch, since_ms, until_ms)
        return core.run(self.redis, self.scripts, core.search(q, limit, cursor))

    def recover(
        self,
        *,
        status: DeliveryStatus | str,
        since_ms: int,
        until_ms: int | None = None,
        account: str | None = None,
        progress: Callable[[Recovery], None] | None = None,
    ) -> Recovery:
        """Make every ``status`` (failed or canceled) delivery created in [since, until) due
        again now, same id, fresh schedule: of one account, or of all. Chunked scripts, one
        round trip per round of chunks. The caller wakes ``result.shards``."""
        run = RecoverRun(DeliveryStatus(status), account, since_ms, until_ms, self.clock())
        return core.run(self.redis, self.scripts, core.recover(run, progress))

    def due_shards(self, first: int = 0) -> tuple[int, ...]:
        """Shards with deliveries due now, ``first`` first (one pipelined round trip)."""
        now = self.clock()
        shards = keyspace.all_shards()
        with self.redis.pipeline(transaction=False) as pipe:
            for s in shards:
                pipe.zcount(keyspace.due(s), "-inf", now)
            due = {s for s, count in zip(shards, pipe.execute(), strict=True) if count}
        return tuple(sorted(due, key=lambda s: (s != first, s)))


class Registration(NamedTuple):
    """What :meth:`AsyncWebhookStore.register` did."""

    created: bool  # a new webhook (201), not a replaced one (200)
    due: bool  # a delivery became due now: wake the delivery queue
    hook: Webhook  # as registered
    repeated: bool = False  # it repeated the verification in progress: nothing was written


class OperationalRegistration(NamedTuple):
    """What :meth:`AsyncWebhookStore.register_operational_webhook` did."""

    created: bool  # a new operational webhook (201), not a replaced one (200)
    challenged: bool  # a verification's challenge became due now: wake the delivery queue
    repeated: bool  # it repeated the verification in progress: nothing was written


def _hook_from_flat(name: str, flat_reply: list[Any]) -> Webhook:
    """The webhook of an HGETALL's field, value list (as a script answers it)."""
    flat = [x if isinstance(x, bytes) else str(x).encode() for x in flat_reply]
    return Webhook.from_hash(name, dict(zip(flat[::2], flat[1::2], strict=True)))


class AsyncWebhookStore:
    """The API's view: register, read, remove webhooks; list and retry deliveries."""

    def __init__(self, client: redis.asyncio.Redis, clock: Callable[[], int] = now_ms) -> None:
        self.redis = client
        self.scripts = AsyncScripts(client)
        self.clock = clock  # ms since the epoch; tests pass their own

    async def _challenge(self, ref: BatchRef, url: str, challenge: str) -> None:
        """Create the delivery of an endpoint verification's challenge (due now)."""
        now = self.clock()
        body = verify_body(
            "" if ref.name == keyspace.OPERATIONAL_BATCH else ref.name, url, challenge, now
        )
        k, a = _create_call(ref, f"verify:{challenge}", body, 0, now)
        await self.scripts("create_delivery", k, [*a, "verify"])

    async def register(
        self,
        ref: BatchRef,
        url: str,
        public_url: str,
        *,
        verify: bool = False,
        events: tuple[str, ...] = DEFAULT_WEBHOOK_EVENTS,
    ) -> Registration:
        """Register or replace the URL. Returns whether it was created, whether a delivery
        became due now, and the webhook as the script left it (read in the same script: the
        API's answer costs no read of its own). With ``verify``, the webhook is pending until
        the receiver echoes a signed ``webhook.verify`` challenge; nothing else is sent to it
        meanwhile; a registration that repeats the verification in progress (the same URL
        and ``events``, its challenge still pending) writes nothing and answers it
        (``repeated``). ``events``: the event types to POST (validated by the caller); with a
        document type the batch raises document events from now on. Raises BatchNotFound
        (the script checks the batch exists)."""
        s = ref.shard
        challenge = secrets.token_urlsafe(24) if verify else ""
        try:
            reply = await self.scripts(
                "register_webhook",
                [
                    ref.key,
                    keyspace.webhook(s, ref.account, ref.name),
                    keyspace.batch_delivery_by_seq(s, ref.account, ref.name),
                    keyspace.due(s),
                ],
                [
                    url,
                    self.clock(),
                    keyspace.shard_prefix(s),
                    "1" if verify else "",
                    challenge,
                    ref.account,
                    ref.name,
                    " ".join(events),
                    document_statuses(events),
                ],
            )
        except ResponseError as exc:
            if refusal(exc) == "missing":
                raise BatchNotFound(f"no batch named {ref.name!r}") from exc
            raise
        r = fields(reply)
        if r.get("repeated"):
            return Registration(False, False, _hook_from_flat(ref.name, r["hook"]), True)
        seq, dlv, status = r["seq"], r["delivery"], r["status"]
        due = verify
        if verify:
            await self._challenge(ref, url, challenge)
        if EVENT_TYPE not in events:
            pass  # completions are not asked for: none to deliver now
        elif seq and not dlv:
            # The batch is done and its latest completion was never delivered: deliver it.
            h = await self.redis.hgetall(ref.key)
            batch = Batch.from_hash(h)
            if batch.completed_at is not None and batch.completion_seq == seq:
                # The completion's event id, as the detector derives it.
                k, a = _create_call(
                    ref,
                    seq,
                    notification_body(batch, public_url),
                    batch.completed_at,
                    self.clock(),
                    keyspace.completion_id(s, ref.account, ref.name, batch.created_at, seq),
                )
                due, _ = created_reply(await self.scripts("create_delivery", k, a))
        elif seq and status in (DeliveryStatus.FAILED, DeliveryStatus.CANCELED):
            k, a = core.retry_call(s, dlv, ref, self.clock())
            await self.scripts("retry_delivery", k, a)
            due = True
        elif status == DeliveryStatus.PENDING:
            due = True
        return Registration(bool(r["created"]), due, _hook_from_flat(ref.name, r["hook"]))

    async def pending_verification(
        self, ref: BatchRef, url: str, events: tuple[str, ...] = DEFAULT_WEBHOOK_EVENTS
    ) -> Webhook | None:
        """The webhook of ``ref`` when registering ``url`` (asking for ``events``) with
        verify would repeat its verification in progress (the same URL and events, its
        challenge still pending): what such a registration answers, with nothing started.
        None otherwise. One round trip, reads only."""
        s = ref.shard
        reply = await self.scripts(
            "verification_pending",
            [keyspace.webhook(s, ref.account, ref.name)],
            [url, keyspace.shard_prefix(s), " ".join(events)],
        )
        return _hook_from_flat(ref.name, reply) if reply else None

    async def register_operational_webhook(
        self, account: str, url: str, *, verify: bool = False
    ) -> OperationalRegistration:
        """Register or replace the account's operational webhook (and enable it again),
        verified first with ``verify`` (as ``register``, a repeated verification too)."""
        ref = operational_ref(account)
        key = keyspace.webhook(ref.shard, account, ref.name)
        challenge = secrets.token_urlsafe(24) if verify else ""
        created = await self.scripts(
            "register_operational_webhook",
            [key, keyspace.due(ref.shard)],
            [
                url,
                self.clock(),
                "1" if verify else "",
                challenge,
                keyspace.shard_prefix(ref.shard),
                account,
            ],
        )
        if int(created) == -1:
            return OperationalRegistration(False, False, True)
        if verify:
            await self._challenge(ref, url, challenge)
        return OperationalRegistration(int(created) == 1, verify, False)

    async def get(self, ref: BatchRef) -> Webhook | None:
        h = await self.redis.hgetall(keyspace.webhook(ref.shard, ref.account, ref.name))
        return Webhook.from_hash(ref.name, h) if h else None

    async def delete(self, ref: BatchRef) -> bool:
        s = ref.shard
        removed = await self.scripts(
            "cancel_deliveries",
            [keyspace.webhook(s, ref.account, ref.name), keyspace.due(s)],
            [self.clock(), keyspace.shard_prefix(s), ref.account, ref.name],
        )
        return int(removed) == 1

    async def set_disabled(self, ref: BatchRef, disabled: bool, reason: str = "") -> None:
        """Disable the batch's webhook with ``reason`` (its pending delivery is canceled) or
        enable it again (nothing becomes due: retry or recover for that). Operators only.
        Raises WebhookNotFound."""
        s = ref.shard
        try:
            await self.scripts(
                "set_webhook_disabled",
                [keyspace.webhook(s, ref.account, ref.name), keyspace.due(s)],
                [
                    "1" if disabled else "0",
                    reason,
                    self.clock(),
                    keyspace.shard_prefix(s),
                    ref.account,
                    ref.name,
                ],
            )
        except ResponseError as exc:
            if refusal(exc) == "missing":
                raise WebhookNotFound(f"batch {ref.name!r} has no webhook") from exc
            raise

    async def retry_any(self, delivery_id: str) -> Delivery:
        """Deliver again now, same webhook-id, whatever the account (operators: the console).
        Raises DeliveryNotFound, NotRetryable."""
        op = core.retry(delivery_id, None, self.clock())
        return await core.run_async(self.redis, self.scripts, op)

    async def deliveries(
        self, ref: BatchRef, *, start: int, limit: int
    ) -> tuple[list[Delivery], int | None]:
        """The batch's deliveries, newest first, from position ``start``."""
        s = ref.shard
        ids = await self.redis.zrevrange(
            keyspace.batch_deliveries(s, ref.account, ref.name), start, start + limit
        )
        next_start = start + limit if len(ids) > limit else None
        return await self._load([raw.decode() for raw in ids[:limit]]), next_start

    async def search(
        self,
        account: str | None = None,
        status: DeliveryStatus | str | None = None,
        batch: str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[Delivery], str | None]:
        """``WebhookStore.search``, for the API (the same calls, built by
        ``relay.state.delivery_search``)."""
        q = core.query(account, status, batch, since_ms, until_ms)
        return await core.run_async(self.redis, self.scripts, core.search(q, limit, cursor))

    async def recover(
        self,
        *,
        status: DeliveryStatus | str,
        since_ms: int,
        until_ms: int | None = None,
        account: str | None = None,
    ) -> Recovery:
        """``WebhookStore.recover``, for the API. The caller wakes ``result.shards``."""
        run = RecoverRun(DeliveryStatus(status), account, since_ms, until_ms, self.clock())
        return await core.run_async(self.redis, self.scripts, core.recover(run))

    async def _load(self, ids: list[str]) -> list[Delivery]:
        """The deliveries with their attempts, in the order of ``ids`` (one round trip)."""
        return await core.run_async(self.redis, self.scripts, core.load(ids))

    async def retry(self, ref: BatchRef, delivery_id: str) -> Delivery:
        """Deliver again now, same webhook-id. Raises DeliveryNotFound, NotRetryable."""
        op = core.retry(delivery_id, ref, self.clock())
        return await core.run_async(self.redis, self.scripts, op)
