"""The two RQ queues, how relay puts work on them, and how long each kind of job may run.

RQ jobs are wake-ups, not the source of truth: a document handed out is recorded in the
shard's ``ready`` set and a due delivery in the shard's ``due`` set by the same scripts that
make them so; the detector's sweeper enqueues again whatever sits there with no job. Jobs are
serialized as JSON (never pickle) and carry only ids.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis
from rq import Queue
from rq.serializers import JSONSerializer

from relay import keys
from relay.config import Settings

PROCESSING = "relay-processing"
DELIVERY = "relay-delivery"

PROCESS_JOB = "relay.processing.run_document"
DELIVER_JOB = "relay.delivery.send.run_due"

# A wake-up marker outlives its job only when the worker that took the job died before
# starting it; the shard is then woken again by the sweeper after this long.
WAKE_TTL_MS = 10_000


def document_job_timeout(settings: Settings) -> int:
    """RQ's limit for one document job: far past the lease, which the job renews while its
    extractor runs; a job stuck past it is killed and its lease brings the document back."""
    return int(settings.lease_seconds * 10) + 60


def delivery_job_timeout(settings: Settings) -> int:
    """RQ's limit for one delivery job. The job only wakes the process's delivery engine
    (``relay.delivery.send.run_due``), which runs the attempts; starting the engine the
    first time builds the HTTP client (~25 ms) and its threads."""
    return 30


def queue(client: redis.Redis, name: str) -> Queue:
    return Queue(name, connection=client, serializer=JSONSerializer)


def queue_key(name: str) -> str:
    """The Redis list RQ keeps a queue's waiting job ids in (RQ's own naming)."""
    return Queue.redis_queue_namespace_prefix + name


def document_job_id(doc_id: str) -> str:
    return f"relay-doc-{doc_id}"


def enqueue_documents(
    client: redis.Redis, docs: Iterable[tuple[str, str, str]], settings: Settings
) -> int:
    """One processing job per ``(doc_id, account, batch_name)``; one round trip per 500."""
    q = queue(client, PROCESSING)
    timeout = document_job_timeout(settings)
    count = 0
    chunk: list[tuple[str, str, str]] = []

    def flush() -> None:
        if not chunk:
            return
        data = [
            Queue.prepare_data(
                PROCESS_JOB,
                args=list(d),
                job_id=document_job_id(d[0]),
                timeout=timeout,
                result_ttl=0,
                failure_ttl=86_400,
                description=f"process {d[0]}",
            )
            for d in chunk
        ]
        with client.pipeline() as pipe:
            q.enqueue_many(data, pipeline=pipe)
            pipe.execute()
        chunk.clear()

    for d in docs:
        chunk.append(d)
        count += 1
        if len(chunk) >= 500:
            flush()
    flush()
    return count


def wake(client: redis.Redis, shard: int, settings: Settings) -> bool:
    """Enqueue a delivery job for the shard's due deliveries unless one is already waiting."""
    if not client.set(keys.wake(shard), b"1", nx=True, px=WAKE_TTL_MS):
        return False
    queue(client, DELIVERY).enqueue_call(
        DELIVER_JOB,
        args=[shard],
        timeout=delivery_job_timeout(settings),
        result_ttl=0,
        failure_ttl=3_600,
        description=f"deliver due in shard {shard}",
    )
    return True
