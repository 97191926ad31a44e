"""Fairness under a backlog: how long another account's single document takes while one
account's batch of thousands is being processed (part of the ``processing`` benchmark).

The backlog (``n`` documents, uploaded through ``AsyncStore.upload``) is processed by the
stack's workers; once they are into it, a second account uploads one document at a time over
HTTP and calls ``process``, several times. Each latency runs from just before that ``process``
call to the document's ``completed_at``. The baseline is what one FIFO queue would have given:
the backlog still queued at that moment divided by the backlog's measured rate. The backlog
batch is deleted at the end (its waiting documents are canceled).
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import redis

from bench._common import CSV_DOC, BenchError, CpuMeter, percentile, wait_until
from bench._seed import upload_direct
from bench._stack import ACCOUNT, Stack
from relay.redis import keyspace
from relay.state.store import BatchRef

OTHER = "bench-other"


def _hint(client: redis.Redis, key: str, field: str) -> int:
    raw = client.hget(key, field)
    return int(raw) if raw else 0


def _wait_completed(client: redis.Redis, doc_id: str) -> int:
    """The document's ``completed_at`` (ms), once it has one."""
    shard = keyspace.shard_of_id("doc", doc_id)
    if shard is None:
        raise BenchError(f"not a document id: {doc_id!r}")
    key = keyspace.doc(shard, doc_id)
    return wait_until(lambda: _hint(client, key, "completed_at"), 60, 0.002, doc_id)


def run_fairness(st: Stack, bulk: httpx.Client, n: int, samples: int) -> dict[str, Any]:
    """Latency of another account's lone documents behind an ``n``-document backlog."""
    ref = BatchRef(ACCOUNT, "fair-backlog")
    upload_direct(st.redis_url, [ref], n)
    other = httpx.Client(
        base_url=st.api_url,
        headers={"Authorization": f"Bearer {st.create_key(OTHER)}"},
        timeout=60,
    )
    meter = CpuMeter(st.pids())
    try:
        t_start = time.time()
        r = bulk.post(f"/api/v1/batches/{ref.name}/process")
        if r.status_code != 202:
            raise BenchError(f"process answered {r.status_code}: {r.text[:300]}")
        wait_until(
            lambda: _hint(st.redis, ref.key, "succeeded") >= min(20, n // 10),
            60,
            0.01,
            "the backlog to start",
        )
        rows: list[dict[str, Any]] = []
        for i in range(samples):
            name = f"fair-lone-{i}"
            up = other.post(
                "/api/v1/documents",
                files={"file": ("lone.csv", CSV_DOC, "text/csv")},
                data={"batch_name": name},
            )
            if up.status_code != 201:
                raise BenchError(f"upload answered {up.status_code}: {up.text[:300]}")
            doc_id = up.json()["id"]
            queued = _hint(st.redis, ref.key, "queued")
            done = _hint(st.redis, ref.key, "succeeded")
            rate = done / max(time.time() - t_start, 1e-3)
            t0 = time.time()
            r = other.post(f"/api/v1/batches/{name}/process")
            if r.status_code != 202:
                raise BenchError(f"process answered {r.status_code}: {r.text[:300]}")
            completed = _wait_completed(st.redis, doc_id)
            rows.append(
                {
                    "latency_ms": round(completed - t0 * 1000, 1),
                    "backlog_queued": queued,
                    "backlog_docs_per_s": round(rate, 1),
                    "fifo_estimate_s": round(queued / rate, 1) if rate else None,
                }
            )
            time.sleep(0.3)
        cpu = meter.stop()
        r = bulk.delete(f"/api/v1/batches/{ref.name}")
        if r.status_code != 202:
            raise BenchError(f"delete answered {r.status_code}: {r.text[:300]}")
        wait_until(
            lambda: bulk.get(f"/api/v1/batches/{ref.name}").json()["all_done"],
            60,
            0.05,
            "the deleted backlog to settle",
        )
    finally:
        other.close()
    latencies = [row["latency_ms"] for row in rows]
    return {
        "backlog_documents": n,
        "samples": rows,
        "latency_p50_ms": percentile(latencies, 50),
        "latency_max_ms": max(latencies),
        "fifo_estimate_min_s": min(row["fifo_estimate_s"] or 0 for row in rows),
        "cpu": cpu,
    }
