"""The delivery engine: many attempts in flight per worker process, none of them able to
hold the others up.

One engine per worker process that serves the delivery queue, started with the process
(``relay worker``; else by the first delivery job, :func:`run_due`, which only wakes it): the
engine claims due deliveries of the woken shards, and of every shard it finds due on its own
once a second, whenever it has a free slot. So a delivery never waits for a job to finish,
and a job never waits for a slow receiver.

Capacity (per process):

- ``RELAY_DELIVERY_CONCURRENCY`` attempts in flight, each on a thread of the engine's pool,
  each cut at ``RELAY_DELIVERY_TIMEOUT`` wall-clock (``relay.delivery.deadline``);
- a *destination* (scheme, host and port of the callback URL) holds at most
  ``RELAY_DELIVERY_PER_DESTINATION`` of them;
- a destination whose last attempt ended without an HTTP answer (timeout, connection, DNS)
  is *suspect* until it answers again: it gets one slot, and all suspects together get at
  most half of the slots. Receivers that hang or drip therefore never hold more than half of
  the capacity, however many of them there are, and the other half keeps notifying the
  receivers that answer.

Waking (``relay.state.job_queues.wake``): a delivery job per wake-up costs Redis ~28 round trips of
RQ's own. So while an engine has a free slot it listens on the delivery bell (one list in RQ's
Redis, ``keyspace.delivery_wakeups``) and holds every shard's wake-up marker: a wake-up then rings
the bell (in the waker's one round trip) and enqueues no job; the engine takes the shard from
the bell with a ``BLPOP``. Several engines share the rings (each to one of them); an engine
with every slot taken stops listening and holding, so its markers expire and jobs wake the
others, as before the bell; one that stops drops them.

A claimed delivery over its destination's share is handed back unattempted and due at once
(``WebhookStore.release``), for another process with room for it; this engine claims again
only after one of its own attempts has ended. Claims are leases, as before: if this process
dies, its deliveries are due again when their leases run out.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import Counter, OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol
from urllib.parse import urlsplit

import redis
from redis import Redis

from relay.crypto import SigningMaterial
from relay.delivery.send import AttemptContext, attempt_once
from relay.redis import keyspace
from relay.state import job_queues
from relay.state.signing_material import SigningKeys
from relay.state.webhooks import ClaimedDelivery
from relay.timefmt import now_ms


class EngineContext(AttemptContext, Protocol):
    """What the engine works with besides what an attempt does (a ``WorkerContext``)."""

    @property
    def queue_redis(self) -> Redis: ...

    @property
    def redis(self) -> redis.Redis: ...
    @property
    def signing(self) -> SigningKeys: ...


class EngineHost(Protocol):
    """What the delivery job needs: the process's Redis and its engine (a ``WorkerContext``)."""

    @property
    def redis(self) -> redis.Redis: ...
    @property
    def queue_redis(self) -> Redis: ...
    @property
    def engine(self) -> Engine: ...


log = logging.getLogger("relay.delivery")

LEASE_MARGIN_MS = 5_000
SCAN_INTERVAL = 1.0  # seconds between the engine's own scans for due shards
WAKEUPS_WAIT = 1  # seconds one BLPOP on the bell blocks (within the reply timeout)
MAX_SUSPECTS = 10_000  # destinations remembered as suspect (oldest forgotten first)
# Errors that mean the destination did not answer at all.
NO_ANSWER = frozenset({"timeout", "connection", "dns"})


def destination(url: str) -> str:
    """What a receiver's share of capacity is counted by: scheme://host:port."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


class Slots:
    """Who may start an attempt now (thread-safe; the module docstring gives the rules)."""

    def __init__(self, total: int, per_destination: int) -> None:
        self.total = total
        self.per_destination = max(1, min(per_destination, total))
        self.suspect_share = max(1, total // 2)
        self._lock = threading.Lock()
        self._busy: Counter[str] = Counter()  # attempts in flight by destination
        self._used = 0
        self._suspects: OrderedDict[str, None] = OrderedDict()  # oldest first

    @property
    def free(self) -> int:
        with self._lock:
            return self.total - self._used

    def take(self, dest: str) -> bool:
        """Take a slot for an attempt to ``dest``; False when its share is used up."""
        with self._lock:
            if self._used >= self.total:
                return False
            if dest in self._suspects:
                suspects_busy = sum(n for d, n in self._busy.items() if d in self._suspects)
                if self._busy[dest] >= 1 or suspects_busy >= self.suspect_share:
                    return False
            elif self._busy[dest] >= self.per_destination:
                return False
            self._busy[dest] += 1
            self._used += 1
            return True

    def release(self, dest: str, answered: bool | None) -> None:
        """Free the slot of an attempt to ``dest``. ``answered``: whether the destination
        gave an HTTP answer (None: unknown, e.g. the record failed)."""
        with self._lock:
            self._used -= 1
            self._busy[dest] -= 1
            if self._busy[dest] <= 0:
                del self._busy[dest]
            if answered is True:
                self._suspects.pop(dest, None)
            elif answered is False:
                self._suspects[dest] = None
                self._suspects.move_to_end(dest)
                while len(self._suspects) > MAX_SUSPECTS:
                    self._suspects.popitem(last=False)

    def suspect(self, dest: str) -> bool:
        with self._lock:
            return dest in self._suspects


class Engine:
    """Claims due deliveries and sends them on a pool of threads (module docstring)."""

    def __init__(self, ctx: EngineContext) -> None:
        settings = ctx.settings
        self.ctx = ctx
        self.store = ctx.webhooks
        self.token = secrets.token_hex(8)
        self.lease_ms = int(settings.delivery_timeout * 1000) + LEASE_MARGIN_MS
        self.claim_size = settings.delivery_claim_size
        self.slots = Slots(settings.delivery_concurrency, settings.delivery_per_destination)
        self._pool = ThreadPoolExecutor(settings.delivery_concurrency, "delivery")
        self._cond = threading.Condition()
        self._woken: set[int] = set()
        self._inflight = 0
        self._ended = 0  # attempts ended so far: a blocked claim waits for this to move
        self._blocked_at = -1  # ``_ended`` when every claim last went back unattempted
        self._claiming = False  # between taking the woken shards and starting their attempts
        self._stopping = False
        self._held_at = float("-inf")  # when the listener last held the shards' markers
        self.backoff_cap = settings.redis_backoff_cap
        self._started = False
        self._thread = threading.Thread(target=self._run, name="delivery-engine", daemon=True)
        self._listener = threading.Thread(target=self._listen, name="delivery-wakeups", daemon=True)

    def start(self) -> None:
        """Start the claiming loop and the listener on the wake-up list (once)."""
        self._started = True
        self._thread.start()
        self._listener.start()

    # -- the bell ----------------------------------------------------------------------

    def _release_markers(self) -> None:
        """Drop the shards' markers this engine held, so the next wake-up enqueues a job at
        once rather than after they expire (another engine listening holds them again
        within ``ENGINE_HOLD_EVERY``)."""
        try:
            with self.ctx.queue_redis.pipeline(transaction=False) as pipe:
                for shard in keyspace.all_shards():
                    pipe.delete(keyspace.wake(shard))
                pipe.execute()
        except Exception as exc:  # they expire on their own
            log.warning("delivery bell: could not drop the markers: %s", exc)

    def _listen(self) -> None:
        """While this engine has a free slot: hold every shard's wake-up marker (so no
        delivery job is enqueued: ``job_queues.wake`` rings the bell instead) and take the
        shards rung from the bell, one round trip each (``BLPOP``, at most 1 s; the
        markers renewed in the same pipeline every ``ENGINE_HOLD_EVERY`` s). With every
        slot taken it neither listens nor holds: the markers expire and jobs wake the other
        workers' engines, as without the bell. Redis away: a backoff, as the loop."""
        client = self.ctx.queue_redis
        backoff = 0.1
        while not self._stopping:
            try:
                if self.slots.free <= 0:
                    self._held_at = float("-inf")
                    with self._cond:
                        self._cond.wait(0.1)
                    continue
                with client.pipeline(transaction=False) as pipe:
                    now = time.monotonic()
                    hold = now - self._held_at >= job_queues.ENGINE_HOLD_EVERY
                    if hold:
                        for shard in keyspace.all_shards():
                            pipe.set(keyspace.wake(shard), b"1", px=job_queues.ENGINE_HOLD_MS)
                    pipe.blpop([keyspace.delivery_wakeups()], timeout=WAKEUPS_WAIT)
                    rung = pipe.execute()[-1]
                if hold:
                    self._held_at = now
                if rung is not None and not self._stopping:
                    self.wake(int(rung[1]))
                backoff = 0.1
            except Exception as exc:  # Redis away: the markers expire, jobs take over
                log.warning("delivery bell: %s; trying again in %.1fs", exc, backoff)
                self._held_at = float("-inf")
                with self._cond:
                    self._cond.wait(backoff)
                backoff = min(backoff * 2, self.backoff_cap)

    @property
    def holding(self) -> bool:
        """Whether this engine holds the shards' wake-up markers now (it listens on the bell,
        and its last hold has not expired)."""
        return time.monotonic() - self._held_at < job_queues.ENGINE_HOLD_MS / 1000

    # -- what the delivery job and the worker call -------------------------------------

    def wake(self, shard: int) -> None:
        """Look at the shard's due deliveries now."""
        with self._cond:
            self._woken.add(shard)
            self._cond.notify_all()
            if self._started and not self._stopping and not self._thread.is_alive():
                # The loop catches every Exception; only something worse ends it. Never
                # leave the process without its engine: the deliveries' leases make a new
                # loop safe to start.
                log.error("delivery engine: its loop had ended; starting it again")
                self._thread = threading.Thread(
                    target=self._run, name="delivery-engine", daemon=True
                )
                self._thread.start()

    def idle(self) -> bool:
        """Nothing in flight and nothing woken."""
        with self._cond:
            return self._inflight == 0 and not self._woken and not self._claiming

    def close(self, timeout: float) -> None:
        """Stop claiming; wait up to ``timeout`` s for the attempts in flight to end."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._inflight == 0, timeout)
        if self._thread.is_alive():
            self._thread.join(timeout=1)
        if self._listener.is_alive():
            self._listener.join(timeout=WAKEUPS_WAIT + 1)
        self._held_at = float("-inf")
        self._release_markers()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.ctx.metrics.flush(self.ctx.redis)

    # -- the loop ------------------------------------------------------------------------

    def _run(self) -> None:
        next_scan = 0.0
        next_flush = time.monotonic() + 1.0
        backoff = 0.1
        while True:
            with self._cond:
                if self._stopping:
                    return
                self._cond.wait_for(
                    lambda: (
                        self._stopping
                        or (
                            bool(self._woken)
                            and self.slots.free > 0
                            and self._ended != self._blocked_at
                        )
                    ),
                    timeout=max(0.0, min(next_scan, next_flush) - time.monotonic()),
                )
                self._blocked_at = -1
                if self._stopping:
                    return
                woken, self._woken = self._woken, set()
                self._claiming = True
            try:
                now = time.monotonic()
                if now >= next_flush:
                    self.ctx.metrics.flush(self.ctx.redis)
                    next_flush = now + 1.0
                if now >= next_scan:
                    woken.update(self.store.due_shards())
                    next_scan = now + SCAN_INTERVAL
                for shard in sorted(woken):
                    ended = self._ended
                    outcome = self._claim_and_send(shard)
                    if outcome != "drained":  # out of slots, or its destinations are full
                        with self._cond:
                            self._woken.add(shard)
                    if outcome == "blocked":
                        self._blocked_at = ended
                backoff = 0.1
            except Exception as exc:  # Redis away (or full): the leases keep everything safe
                log.warning("delivery engine: %s; trying again in %.1fs", exc, backoff)
                with self._cond:
                    self._woken.update(woken)
                    self._cond.wait(backoff)
                backoff = min(backoff * 2, self.backoff_cap)
            finally:
                with self._cond:
                    self._claiming = False

    def _claim_and_send(self, shard: int) -> str:
        """Claim and start what the free slots allow. Returns ``drained`` (nothing more due in
        the shard), ``full`` (no free slot) or ``blocked`` (what was claimed went back: its
        destinations have their share in flight)."""
        while not self._stopping:
            free = self.slots.free
            if free <= 0:
                return "full"
            limit = min(free, self.claim_size)
            claimed = self.store.claim(shard, limit=limit, lease_ms=self.lease_ms, token=self.token)
            if not claimed:
                return "drained"
            materials = self.ctx.signing.for_accounts(self.ctx.redis, {d.account for d in claimed})
            back = []
            for d in claimed:
                dest = destination(d.url)
                if not self.slots.take(dest):
                    back.append(d)
                    continue
                with self._cond:
                    self._inflight += 1
                self._pool.submit(self._attempt, d, materials[d.account], dest)
            if back:
                self.store.release_all(back, self.token, now_ms())
                return "blocked"
            if len(claimed) < limit:
                return "drained"
        return "full"

    def _attempt(self, d: ClaimedDelivery, materials: list[SigningMaterial], dest: str) -> None:
        answered: bool | None = None
        try:
            # A batch.completed released by this attempt is claimed at once, not at the
            # next scan.
            error = attempt_once(self.ctx, d, self.token, materials, self.wake)
            answered = error not in NO_ANSWER
        except Exception:  # Redis lost mid-record: the lease brings the delivery back
            log.error("delivery attempt of %s failed to record", d.id, exc_info=True)
        finally:
            self.slots.release(dest, answered)
            with self._cond:
                self._inflight -= 1
                self._ended += 1
                self._cond.notify_all()


def run_due(ctx: EngineHost, shard: int) -> str:
    """RQ job of the delivery queue: wake this process's engine for the shard's due
    deliveries (the engine runs the attempts; this job never waits for a receiver).

    The job clears the shard's marker, so the next wake-up enqueues a job again, unless this
    process's engine holds the markers: a job enqueued before it began to listen must not
    undo its hold (until the next hold, every wake-up of the shard would be a job)."""
    engine = ctx.engine  # started by the first job
    if not engine.holding:
        ctx.queue_redis.delete(keyspace.wake(shard))
    engine.wake(shard)
    return "engine woken"
