"""The two RQ queues and how relay puts work on them.

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

PROCESSING = "relay-processing"
DELIVERY = "relay-delivery"

PROCESS_JOB = "relay.processing.run_document"
DELIVER_JOB = "relay.delivery.send.run_due"


def queue(client: redis.Redis, name: str) -> Queue:
    return Queue(name, connection=client, serializer=JSONSerializer)


def document_job_id(doc_id: str) -> str:
    return f"relay-doc-{doc_id}"


def enqueue_documents(
    client: redis.Redis, docs: Iterable[tuple[str, str, str]], *, timeout: int
) -> int:
    """One processing job per ``(doc_id, account, batch_name)``; one round trip per 500."""
    q = queue(client, PROCESSING)
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


def enqueue_drain(client: redis.Redis, shard: int, *, timeout: int) -> None:
    """Wake a delivery worker to send the shard's due deliveries."""
    queue(client, DELIVERY).enqueue_call(
        DELIVER_JOB,
        args=[shard],
        timeout=timeout,
        result_ttl=0,
        failure_ttl=3_600,
        description=f"deliver due in shard {shard}",
    )
