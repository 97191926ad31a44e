"""The two RQ queues, how relay puts work on them, and how long each kind of job may run.

RQ jobs are wake-ups, not the source of truth: a document handed out waits in its shard's
fair queue (``relay/state/lua/_fair.lua``) and a due delivery in the shard's ``due`` set, put there
by the same scripts that make them so; the detector's sweeper wakes the queues again whenever
something waits there with no job. Jobs are serialized as JSON (never pickle) and carry only
ids.

The two queues are separate capacity: ``relay worker --queues processing|delivery`` serves one
of them, so a delivery backlog never holds documents back, nor a document backlog deliveries.
"""

from __future__ import annotations

from typing import Any

import redis
from rq import Queue
from rq.serializers import JSONSerializer

from relay.config import Settings
from relay.redis import keyspace

PROCESSING = "relay-processing"
DELIVERY = "relay-delivery"

PROCESS_JOB = "relay.runtime.processing.run_documents"
DELIVER_JOB = "relay.delivery.engine.run_due"

# What ``relay worker --queues`` accepts, and the queues each serves (in dequeue order).
WORKER_QUEUES = {
    "processing": (PROCESSING,),
    "delivery": (DELIVERY,),
    "all": (DELIVERY, PROCESSING),
}

# How long one processing job takes documents from the fair queue before it hands the rest to
# a fresh job (relay.runtime.processing.run_documents): RQ costs ~5 ms per job, so a job serves many
# documents, and it ends now and then so a worker on both queues also serves deliveries.
PROCESS_BUDGET = 2.0
# A wake-up marker outlives its job only when the worker that took the job died before
# starting it; the queue is then woken again by the sweeper after this long.
WAKE_TTL_MS = 10_000
# A delivery engine that listens on the bell (``relay.delivery.engine``) holds every shard's
# marker this long, again every ``ENGINE_HOLD_EVERY`` s: while one listens, a wake-up is a
# ring of the bell (one round trip), not a job (RQ's ~28 round trips). An engine gone stops
# holding them; jobs are enqueued again once they expire.
ENGINE_HOLD_MS = 3_000
ENGINE_HOLD_EVERY = 1.0
WAKEUPS_LEN = 64  # shards the bell keeps (the oldest rings go first)


def document_job_timeout(settings: Settings) -> int:
    """RQ's limit for one document job: far past the lease, which the job renews while its
    extractor runs, and a minute past the longest wall-clock time an extraction may take, so
    that the job, not RQ, records ``extraction_timeout``; a job stuck past it is killed and
    its lease brings the document back. The longest is the wall-clock backstop of a document
    of ``RELAY_MAX_PAGES`` pages: ``RELAY_EXTRACT_WALL_FACTOR`` times its CPU budget
    (``relay.runtime.sandbox``; the CPU budget itself can take longer than its seconds on
    a loaded machine, never longer than the backstop)."""
    budget = settings.extract_timeout + settings.max_pages * settings.extract_page_seconds
    longest = budget * settings.extract_wall_factor
    return int(max(settings.lease_seconds * 10, longest)) + 60


def delivery_job_timeout(settings: Settings) -> int:
    """RQ's limit for one delivery job. The job only wakes the process's delivery engine
    (``relay.delivery.engine.run_due``), which runs the attempts; starting the engine the
    first time builds the HTTP client (~25 ms) and its threads."""
    return 30


def processing_job_timeout(settings: Settings) -> int:
    """RQ's limit for one processing job: its budget plus the last document it started."""
    return int(PROCESS_BUDGET) + document_job_timeout(settings)


def queue(client: redis.Redis, name: str) -> Queue:
    return Queue(name, connection=client, serializer=JSONSerializer)


def queue_key(name: str) -> str:
    """The Redis list RQ keeps a queue's waiting job ids in (RQ's own naming)."""
    return Queue.redis_queue_namespace_prefix + name


def _enqueue(
    client: redis.Redis,
    name: str,
    job: str,
    shard: int,
    timeout: int,
    failure_ttl: int,
    description: str,
) -> None:
    queue(client, name).enqueue_call(
        job,
        args=[shard],
        timeout=timeout,
        result_ttl=0,
        failure_ttl=failure_ttl,
        description=description,
    )


def wake_processing(client: redis.Redis, shard: int, settings: Settings) -> bool:
    """Wake processing for the shard's documents just handed out: ring the processing bell
    (a job lingering after its work takes the shard from it, ``relay.runtime.processing``), then
    enqueue a processing job unless one is already waiting. One round trip, and the
    enqueue's when there is one. The job starts at ``shard`` and takes documents from every
    shard's fair queue (``relay.runtime.processing.run_documents``). Returns whether a job was
    enqueued.

    A ring is a hint: a lingering job holds no marker, so whenever no job waits in the
    queue one is enqueued as before, and a ring nobody hears loses nothing. With a job
    lingering and one waiting, every hand-out until the lingering job's budget ends costs
    this round trip alone, not an RQ job."""
    with client.pipeline(transaction=False) as pipe:
        queue_processing_wake(pipe, shard)
        set_now = pipe.execute()[-1]
    if not set_now:
        return False
    enqueue_processing(client, shard, settings)
    return True


def queue_processing_wake(pipe: Any, shard: int) -> None:
    """Queue on ``pipe`` (of RQ's Redis, sync or asyncio) the first half of
    :func:`wake_processing`: the ring, then the marker; the last reply True means: call
    :func:`enqueue_processing`."""
    ring(pipe, [shard], keyspace.processing_wakeups())
    pipe.set(keyspace.process_wake(), b"1", nx=True, px=WAKE_TTL_MS)


def enqueue_processing(client: redis.Redis, shard: int, settings: Settings) -> None:
    """Enqueue a processing job starting at the shard (its marker just set)."""
    _enqueue(
        client,
        PROCESSING,
        PROCESS_JOB,
        shard,
        processing_job_timeout(settings),
        86_400,
        f"process documents, shard {shard} first",
    )


def wake(client: redis.Redis, shard: int, settings: Settings) -> bool:
    """Wake a delivery engine for the shard's due deliveries: ring the bell (an engine
    listening takes the shard from it, ``relay.delivery.engine``) and enqueue a delivery job
    unless the shard's marker says one waits or an engine listens. One round trip, and the
    enqueue's when there is one. Returns whether a job was enqueued."""
    with client.pipeline(transaction=False) as pipe:
        queue_wake(pipe, shard)
        set_now = pipe.execute()[0]
    if not set_now:
        return False
    enqueue_delivery(client, shard, settings)
    return True


def queue_wake(pipe: Any, shard: int) -> None:
    """Queue on ``pipe`` (of RQ's Redis, sync or asyncio) the first half of :func:`wake`:
    the marker, then the ring; the first reply True means: call :func:`enqueue_delivery`."""
    mark_wake(pipe, shard)
    ring(pipe, [shard], keyspace.delivery_wakeups())


def mark_wake(pipe: Any, shard: int) -> None:
    """Queue on ``pipe`` (of RQ's Redis) the first half of :func:`wake`: the shard's marker,
    set unless a delivery job waits or an engine listens. Its reply True means: call
    :func:`enqueue_delivery`."""
    pipe.set(keyspace.wake(shard), b"1", nx=True, px=WAKE_TTL_MS)


def ring(pipe: Any, shards: list[int], wakeups: str) -> None:
    """Queue on ``pipe`` (of RQ's Redis) a ring of ``bell`` (``keyspace.delivery_wakeups`` or
    ``keyspace.processing_wakeups``) for ``shards`` (three commands whatever their number): the list
    keeps the last ``WAKEUPS_LEN`` and goes after ``WAKE_TTL_MS`` when nobody listens."""
    if shards:
        pipe.rpush(wakeups, *shards)
        pipe.ltrim(wakeups, -WAKEUPS_LEN, -1)
        pipe.pexpire(wakeups, WAKE_TTL_MS)


def enqueue_delivery(client: redis.Redis, shard: int, settings: Settings) -> None:
    """Enqueue a delivery job for the shard (its marker just set: :func:`wake`)."""
    _enqueue(
        client,
        DELIVERY,
        DELIVER_JOB,
        shard,
        delivery_job_timeout(settings),
        3_600,
        f"deliver due in shard {shard}",
    )
