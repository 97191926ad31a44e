"""What the API process and its console reach Redis through: the edges' side of the state layer.

The routes (``relay.api``) and the console (``relay.console``) import no key builder and no
Redis client (docs/architecture.md, "Import contracts"): an :class:`ApiResources`, built once per
process, owns the clients and offers what the edges ask of Redis as calls that return
records and decisions:

- the status round trip (:meth:`ApiResources.status`): the key record, the status window's count and
  the reads of a *query object* (``relay.state.store.DocumentQuery``, ``BatchQuery``) in one
  pipelined round trip, sent down the lane (``relay.redis.status_lane``) or a redis-py pipeline;
- the windows of writes and of bad keys (:meth:`ApiResources.write_round`,
  :meth:`ApiResources.count_bad_key`);
- key and operator lookups, the signing material, the replicas' acknowledgement of a write
  (``relay.redis.replicas``), the wake-ups of the RQ queues and the operators' reads across shards
  (:class:`relay.state.all_shards.AllShards`);
- the windows of outbound calls (endpoint verifications per account and per callback host,
  :meth:`ApiResources.count_verification`) and the lanes of threads the blocking ones run on
  (``relay.delivery.outbound``: test sends, callback URL checks).

Nothing here runs on asyncio's default executor, which the whole process shares: a queue
wake-up is one asyncio pipeline, and the rare RQ enqueue it calls for runs on two threads of
its own (RQ is synchronous); the blob store's calls (uploads outside Redis, page images'
sources, deletions) run on ``RELAY_BLOB_THREADS`` threads of theirs
(``relay.state.blob_calls``), each bounded by ``RELAY_BLOB_TIMEOUT``.

The stores themselves (:attr:`ApiResources.store`, :attr:`ApiResources.webhooks`) are used as they
are.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import redis
import redis.asyncio
from redis.exceptions import NoScriptError

from relay.config import Settings
from relay.crypto import Encryptor, SigningMaterial
from relay.delivery.addresses import TargetPolicy
from relay.delivery.outbound import OutboundLane
from relay.delivery.probe import Prober
from relay.delivery.transport import USER_AGENT, make_client
from relay.redis import keyspace, replicas
from relay.redis.clients import (
    RedisTarget,
    async_client,
    drop_old_primary,
    follow_primary,
    sync_client,
)
from relay.redis.status_lane import StatusClient, StatusLane, StatusPipe
from relay.redis.status_target import status_client
from relay.state import job_queues
from relay.state.all_shards import AllShards
from relay.state.api_keys import (
    OPERATOR_FIELDS,
    RECORD_FIELDS,
    PresentedKey,
    check_operator_record,
    check_record,
    console_session_active,
    end_console_session,
    lookup_key_async,
    open_console_session,
)
from relay.state.blob_calls import BlobCalls
from relay.state.blobs import BlobStore
from relay.state.event_feed import AsyncEventLog, FeedWaiters
from relay.state.rate_limits import Asked, Decision, LeasePolicy, SlidingWindow
from relay.state.review import ReviewReads
from relay.state.signing_material import SigningKeys, previous_until
from relay.state.sources import AsyncSources
from relay.state.store import AsyncStore
from relay.state.webhooks import AsyncWebhookStore

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

# The kinds of per-account write windows (RELAY_ACCOUNT_*_RATE_LIMIT).
UPLOADS = "uploads"
PROCESS = "process"
RETRIES = "retries"
VERIFICATIONS = "verifications"  # endpoint verifications started (also per callback host)
ROTATIONS = "rotations"  # signing rotations


class StatusQuery(Protocol[T_co]):
    """The reads of one status endpoint, queued on the round trip after the gate's own."""

    def queue(self, pipe: StatusPipe, account: str) -> None:
        """Queue the reads for ``account`` (it may queue none: a name no batch can have)."""

    def decode(self, replies: list[Any], account: str) -> T_co:
        """The record the replies of those reads hold, for ``account``."""


class NoReads:
    """For the endpoints that read after the gate (results pagination)."""

    def queue(self, pipe: StatusPipe, account: str) -> None:
        return None

    def decode(self, replies: list[Any], account: str) -> None:
        return None


NO_READS = NoReads()


@dataclass(frozen=True)
class StatusRound(Generic[T]):
    """What one status round trip read: the key record (``HMGET RECORD_FIELDS``, to check
    before anything else is used), the status window's decision, the query's record and
    ``ZCARD`` of the client address's bad-key window (``failures``: see
    :meth:`ApiResources.address_blocked`)."""

    record: list[bytes | None]
    decision: Decision
    value: T
    failures: int = 0


@dataclass(frozen=True)
class WriteRound:
    """What a write's first round trip read: the key record (``HMGET RECORD_FIELDS``, to
    check before anything else is used), the write window's decision, and the bytes held on
    the account's pending total (``held``, 0 when none) with the total after holding them
    (``total``, None when nothing was held), and ``ZCARD`` of the client address's bad-key
    window (``failures``)."""

    record: list[bytes | None]
    decision: Decision
    held: int
    total: int | None
    failures: int = 0  # ZCARD of the client address's bad-key window


@dataclass
class ApiResources:
    """The API process's Redis resources (:meth:`open` builds them, :meth:`close` closes)."""

    settings: Settings
    redis: redis.asyncio.Redis
    sync_redis: redis.Redis  # RQ's Redis; RQ is synchronous: used only from a worker thread
    lane: StatusClient  # the status endpoints' one round trip
    store: AsyncStore
    sources: AsyncSources  # finished documents' kept sources (page images)
    review: ReviewReads  # the console's review pages: batches, documents, results
    webhooks: AsyncWebhookStore
    signing: SigningKeys
    all_shards: AllShards
    events: AsyncEventLog  # the event feeds (GET /events)
    waiters: FeedWaiters  # the long polls of this process and their one listener
    status_limit: SlidingWindow
    write_limits: dict[str, SlidingWindow]
    auth_failures: SlidingWindow
    verify_hosts: SlidingWindow  # endpoint verifications per callback host, all accounts
    prober: Prober  # test sends, through a delivery client of this process, on their lane
    url_checks: OutboundLane  # callback URL checks (DNS) of registrations
    enqueues: ThreadPoolExecutor  # RQ enqueues of the wake-ups (RQ is synchronous)
    policy: TargetPolicy  # callback URLs: checked at registration, pinned by the test send

    @classmethod
    def open(cls, settings: Settings) -> ApiResources:
        """Clients for the settings' Redis (connected on first use) and what runs over them."""
        target = RedisTarget.from_settings(settings)
        wait = settings.request_deadline  # a wait for a connection outside any request
        client = async_client(target, max_connections=settings.redis_max_connections, wait=wait)
        queue_target = RedisTarget.queues_from_settings(settings)
        # The queues' Redis serves every request's wake-up (POST /process, registrations,
        # retries) as well as the operators' reads: as many connections as the state's.
        queues_async = client if queue_target == target else async_client(queue_target, wait=wait)
        webhooks = AsyncWebhookStore(client)
        blobs = BlobStore.from_settings(settings, threads=settings.blob_threads)
        blob_calls = BlobCalls(settings.blob_threads, settings.blob_timeout)
        signing = SigningKeys(Encryptor.from_setting(settings.encryption_key))
        policy = TargetPolicy.from_settings(settings)
        # A connection for every test send the lane runs at once: none waits for the pool.
        http = make_client(
            policy,
            settings.delivery_timeout,
            max_connections=max(16, settings.test_send_concurrency),
            user_agent=USER_AGENT,
        )
        rates = {
            UPLOADS: settings.account_upload_rate_limit,
            PROCESS: settings.account_process_rate_limit,
            RETRIES: settings.account_retry_rate_limit,
        }
        # Rare and slow by design: counted one by one, never leased.
        unleased = {
            VERIFICATIONS: settings.account_verify_rate_limit,
            ROTATIONS: settings.account_rotation_rate_limit,
        }
        probes = OutboundLane(
            "test-send",
            "test sends",
            settings.test_send_concurrency,
            settings.test_send_concurrency_per_account,
        )
        return cls(
            settings=settings,
            redis=client,
            sync_redis=sync_client(queue_target),
            lane=status_client(target, client),
            store=AsyncStore(
                client,
                blobs,
                max_pending_bytes=settings.account_max_pending_bytes,
                calls=blob_calls,
            ),
            sources=AsyncSources(client, blobs, blob_calls),
            review=ReviewReads(client),
            webhooks=webhooks,
            signing=signing,
            all_shards=AllShards(client, queues_async),
            events=AsyncEventLog(client, round(settings.retention * 1000)),
            waiters=FeedWaiters(
                client,
                max_waiters=settings.events_max_waiters,
                max_per_account=settings.events_max_waiters_per_account,
            ),
            status_limit=SlidingWindow(settings.status_rate_limit),
            write_limits={
                kind: SlidingWindow(
                    rate,
                    functools.partial(keyspace.account_rate_window, kind),
                    LeasePolicy(settings.write_lease_slots, settings.write_lease_ms),
                )
                for kind, rate in rates.items()
            }
            | {
                kind: SlidingWindow(rate, functools.partial(keyspace.account_rate_window, kind))
                for kind, rate in unleased.items()
            },
            auth_failures=SlidingWindow(
                settings.auth_failure_rate_limit, keyspace.auth_failure_window
            ),
            verify_hosts=SlidingWindow(
                settings.host_verify_rate_limit,
                functools.partial(keyspace.host_rate_window, VERIFICATIONS),
            ),
            prober=Prober(
                webhooks, signing, client, http, policy, settings.delivery_timeout, probes
            ),
            url_checks=OutboundLane(
                "url-check",
                "callback URL checks",
                settings.url_check_concurrency,
                settings.url_check_concurrency_per_account,
            ),
            enqueues=ThreadPoolExecutor(2, thread_name_prefix="rq-enqueue"),
            policy=policy,
        )

    def follow_primary(self) -> asyncio.Task[None] | None:
        """Through Sentinel: a task that moves this process's connections (the lane's at once,
        the redis-py client's as they are handed back) whenever the Sentinels name a new primary
        (:func:`relay.redis.clients.follow_primary`); the caller cancels it. None without
        Sentinels."""
        target = RedisTarget.from_settings(self.settings)
        if not target.via_sentinel:
            return None

        async def moved() -> None:
            if isinstance(self.lane, StatusLane):
                self.lane.relocate()  # what waits on it is sent again, to the new primary
            await drop_old_primary(self.redis)

        return asyncio.create_task(follow_primary(target, moved), name="relay-primary-follower")

    async def close(self) -> None:
        self.prober.lane.close()
        self.url_checks.close()
        self.enqueues.shutdown(wait=False, cancel_futures=True)
        self.store.calls.close()
        self.store.blobs.close()
        self.prober.http.close()
        await self.lane.close()
        if self.all_shards.queues is not self.redis:
            await self.all_shards.queues.aclose()
        await self.redis.aclose()
        self.sync_redis.close()

    # -- the status round trip ------------------------------------------------------------

    async def _round(
        self, presented: PresentedKey, account: str, query: StatusQuery[T], address: str
    ) -> tuple[list[Any], Asked]:
        pipe = self.lane.pipeline()
        pipe.hmget(keyspace.api_key(presented.prefix), list(RECORD_FIELDS))
        asked = self.status_limit.queue(pipe, presented.prefix)
        self.auth_failures.queue_count(pipe, address)
        query.queue(pipe, account)
        return await pipe.execute(raise_on_error=False), asked

    async def status(
        self, presented: PresentedKey, account: str, query: StatusQuery[T], address: str
    ) -> StatusRound[T]:
        """The key record, the status window, the bad-key count of the client ``address``
        and ``query``'s reads for the (cached) account in one round trip; once more after a
        ``NOSCRIPT`` (a new or restarted Redis)."""
        replies, asked = await self._round(presented, account, query, address)
        if isinstance(replies[1], NoScriptError):
            await self.status_limit.load(self.redis)
            replies, asked = await self._round(presented, account, query, address)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return StatusRound(
            record=replies[0],
            decision=self.status_limit.decide(replies[1], presented.prefix, asked),
            value=query.decode(replies[3:], account),
            failures=int(replies[2]),
        )

    # -- keys and windows -----------------------------------------------------------------

    async def lookup_key(self, presented: PresentedKey) -> str | None:
        """The account of an active key (one round trip)."""
        return await lookup_key_async(self.redis, presented)

    async def open_console_session(self, sid: str, prefix: str, max_age: int) -> None:
        await open_console_session(self.redis, sid, prefix, max_age)

    async def end_console_session(self, sid: str, prefix: str) -> None:
        await end_console_session(self.redis, sid, prefix)

    async def console_session_active(self, sid: str, prefix: str, operator: str) -> bool:
        """Whether the console session is open and its operator key still active."""
        return await console_session_active(self.redis, sid, prefix, operator)

    async def write_round(
        self, presented: PresentedKey, account: str, kind: str, address: str, hold: int = 0
    ) -> WriteRound:
        """A write's first round trip (``relay.api.access.admit_write``): the key record,
        the bad-key count of the client ``address``, the account's window of ``kind`` and,
        with ``hold`` > 0 (an upload's declared size),
        ``INCRBY`` of the account's pending total, pipelined for the (cached) ``account``; the
        ``INCRBY`` also gives back what this process owes that total
        (``relay.state.store.PendingRefunds``).

        Nothing is decided here: the caller checks the record, then the decision, and gives
        the held bytes back (:meth:`release_hold`) when it refuses. Sent down the lane, which
        sends a round once more when Redis resets the connection under it: the record read and
        the window (a member made once per request) are safe to run twice; the ``INCRBY`` may
        then hold twice, which leaves the total high, never low (``relay.state.store.AsyncStore``).
        A ``NOSCRIPT`` reply for the window (a new or restarted Redis) loads the script and counts
        the request on its own, without sending the rest again. A request the process admits from
        its lease of the window's slots (``relay.state.rate_limits``, leased slots) sends no window
        at all: the record and the hold still go."""
        window = self.write_limits[kind]
        leased = window.take(account)
        total_key = keyspace.account_pending_total(account)
        owed = self.store.refunds.take(account) if hold > 0 else 0
        pipe = self.lane.pipeline()
        pipe.hmget(keyspace.api_key(presented.prefix), list(RECORD_FIELDS))
        self.auth_failures.queue_count(pipe, address)
        asked = window.queue(pipe, account) if leased is None else None
        if hold > 0:
            # What earlier uploads held beyond their files' bytes goes back in the same
            # command (relay.state.store.PendingRefunds).
            pipe.execute_command("INCRBY", total_key, hold - owed)
        replies = await pipe.execute(raise_on_error=False)
        total: int | None = None
        if hold > 0:
            if isinstance(replies[-1], Exception):
                self.store.refunds.owe(account, owed)  # not run: still owed
                raise replies[-1]  # e.g. the store full (OOM): nothing was held
            total = int(replies[-1])
        held = hold if total is not None else 0
        try:
            for reply in replies[:2]:
                if isinstance(reply, Exception):
                    raise reply
            if leased is not None:
                decision = leased
            elif isinstance(replies[2], NoScriptError):
                await window.load(self.redis)
                decision = await window.hit(self.redis, account)
            else:
                decision = window.decide(replies[2], account, asked)
        except BaseException:
            await self.release_hold(account, held)
            raise
        return WriteRound(
            record=replies[0], decision=decision, held=held, total=total, failures=int(replies[1])
        )

    async def count_more_writes(self, kind: str, account: str, slots: int) -> Decision:
        """Count ``slots`` more slots of a write already admitted for one (an upload of
        several files weighs one a file) in the account's window of ``kind``: all or none
        (``relay.state.rate_limits.SlidingWindow.hit_more``), one round trip."""
        return await self.write_limits[kind].hit_more(self.redis, account, slots)

    def give_back_write(self, kind: str, account: str, decision: Decision) -> None:
        """A write admitted by its window but refused after all (its client address past the
        limit of bad keys): its slot goes back (``SlidingWindow.give_back``)."""
        self.write_limits[kind].refunds(account, decision)

    def give_back_status(self, prefix: str, decision: Decision) -> None:
        """The same for a status request of the key ``prefix``."""
        self.status_limit.refunds(prefix, decision)

    async def release_hold(self, account: str, held: int) -> None:
        """Give back bytes a refused or failed write held on the account's total."""
        if held > 0:
            await self.store.release_hold(account, held)

    async def count_bad_key(self, address: str) -> Decision:
        """Count a failed authentication against the client's address."""
        return await self.auth_failures.hit(self.redis, address)

    async def lookup_key_from(
        self, presented: PresentedKey, address: str
    ) -> tuple[str | None, int]:
        """The account of an active key (None: unknown or revoked) and the bad-key count of
        the client ``address`` (``failures``), in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(keyspace.api_key(presented.prefix), list(RECORD_FIELDS))
            self.auth_failures.queue_count(pipe, address)
            values, failures = await pipe.execute()
        return check_record(values, presented), int(failures)

    async def lookup_operator_from(
        self, presented: PresentedKey, address: str
    ) -> tuple[str | None, int]:
        """:meth:`lookup_key_from` for an operator key (the console's login)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(keyspace.api_key(presented.prefix), list(OPERATOR_FIELDS))
            self.auth_failures.queue_count(pipe, address)
            values, failures = await pipe.execute()
        return check_operator_record(values, presented), int(failures)

    async def address_blocked(self, address: str, failures: int) -> Decision | None:
        """The bad-key window's refusal when the client ``address`` is past its limit, else
        None: then every key it presents is refused, a valid one included, until the window
        passes (or an operator runs ``relay keys unblock``). ``failures`` is the window's
        ``ZCARD`` read in the request's own round trip: below the limit it proves the
        address is not blocked at no further cost; at or above it, one more round trip reads
        the window as the script counts it (:meth:`relay.state.rate_limits.SlidingWindow.peek`)."""
        if failures < self.auth_failures.rate.limit:
            return None
        decision = await self.auth_failures.peek(self.redis, address)
        return None if decision.allowed else decision

    async def count_verification(self, account: str, host: str) -> tuple[Decision, Decision]:
        """Count an endpoint verification about to start: in the account's window, then,
        once that admits it, in the callback host's (an account past its own limit never
        uses up a host's, which every account shares). Returns both decisions (the host's
        is the account's when the account's refused); the verification may start when
        both allow it."""
        mine = await self.write_limits[VERIFICATIONS].hit(self.redis, account)
        if not mine.allowed:
            return mine, mine
        return mine, await self.verify_hosts.hit(self.redis, host)

    # -- signing material ------------------------------------------------------------------

    async def signing_material(self, account: str) -> tuple[list[SigningMaterial], int | None]:
        """The account's signing material (made on first use, then answered once the replicas
        have it) and when the previous one stops being used (None outside a rotation)."""
        materials, made = await self.signing.fetch(self.redis, account)
        if made:  # shown to the customer now: it must survive a failover
            await self.replicated("signing material", key=keyspace.signing(account))
        return materials, await previous_until(self.redis, account)

    async def rotate_signing(self, account: str) -> tuple[list[SigningMaterial], int | None]:
        """New signing material; the old one kept for ``RELAY_SIGNING_GRACE_SECONDS``.
        Answered once the replicas have it (``RELAY_REDIS_WAIT_REPLICAS``). Raises
        RotationInProgress while the previous rotation's grace runs."""
        materials = await self.signing.rotate(
            self.redis, self.store.scripts, account, self.settings.signing_grace_seconds
        )
        until = await previous_until(self.redis, account)
        await self.replicated("signing rotation", key=keyspace.signing(account))
        return materials, until

    # -- writes acknowledged, jobs woken ---------------------------------------------------

    async def replicated(self, what: str, shard: int = 0, *, key: str | None = None) -> bool:
        """Wait for ``RELAY_REDIS_WAIT_REPLICAS`` replicas to have every write so far (on a
        Cluster: the writes to ``shard``'s primary, or with ``key`` to that key's)."""
        return await replicas.replicated(self.redis, self.settings, what, shard, key=key)

    async def wake(self, shard: int) -> None:
        """Wake a delivery engine for the shard (``relay.state.job_queues.wake``): the marker
        and the ring in one asyncio round trip; when no job waits and no engine listens, a
        job enqueued on the edge's own threads (RQ blocks)."""
        async with self.all_shards.queues.pipeline(transaction=False) as pipe:
            job_queues.queue_wake(pipe, shard)
            set_now = (await pipe.execute())[0]
        if set_now:
            await self._enqueue(job_queues.enqueue_delivery, shard)

    async def wake_processing(self, shard: int) -> None:
        """Wake processing for the shard's documents (``relay.state.job_queues.wake_processing``),
        as :meth:`wake` does."""
        async with self.all_shards.queues.pipeline(transaction=False) as pipe:
            job_queues.queue_processing_wake(pipe, shard)
            set_now = (await pipe.execute())[-1]
        if set_now:
            await self._enqueue(job_queues.enqueue_processing, shard)

    async def _enqueue(
        self, enqueue: Callable[[redis.Redis, int, Settings], None], shard: int
    ) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.enqueues, enqueue, self.sync_redis, shard, self.settings)

    async def ping(self) -> None:
        """Redis answers; raises the client's error when it does not."""
        await self.redis.ping()
