"""Processing throughput, flat per-document cost, and Redis memory per document (issue 2).

One stack: a private Redis (AOF everysec), ``relay serve``, ``relay detector`` and one, then
two, ``relay worker`` processes; the default CSV extractor on a 3-line CSV document.

1. Throughput: a batch of N documents timed from ``POST /process`` to the batch's
   ``completed_at``, with 1 worker, then with 2 (same N). The first batch is uploaded over
   HTTP (its upload rate is reported too), the others through ``AsyncStore.upload``.
   Baseline: the same worker count running RQ jobs that do nothing (``bench.noop.run``), so
   the figure shows what relay adds on top of RQ's own cost per job.
2. Flat cost: time per document of a 10-document batch (median of several) vs a
   10,000-document batch, both on 2 workers; their ratio should stay near 1.
3. Fairness: another account's single document behind a 3,000-document backlog, 2 workers:
   its latency from ``POST /process`` to ``completed_at`` (``bench/_fairness.py``), against
   what one FIFO queue would have given. Goal: within 2 s.
4. Memory: before processing, ``MEMORY USAGE`` of the document hash plus its share of the
   batch's lists, over a sample, and the ``INFO memory`` ``used_memory`` delta per document
   over the 10,000 uploads (seeded through ``AsyncStore.upload``: the API's Lua script, no
   HTTP). Goal: at most 1 KiB per document (the uploaded bytes reported apart).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import httpx
import redis

from bench._common import CSV_DOC, BenchError, CpuMeter, Outcome, progress, ratio, table, wait_until
from bench._fairness import run_fairness
from bench._profile import Profiler, render
from bench._seed import upload_direct, upload_http
from bench._stack import ACCOUNT, Stack
from relay.redis import keyspace
from relay.state.job_queues import PROCESSING, queue
from relay.state.store import BatchRef

NAME = "processing"
KIB = 1024


def _completed_ms(client: redis.Redis, ref: BatchRef) -> int | None:
    raw = client.hget(ref.key, "completed_at")
    return int(raw) if raw else None


def run_batch(http: httpx.Client, st: Stack, name: str, n: int) -> dict[str, Any]:
    """``POST /process`` and wait for ``completed_at``: the batch's processing time."""
    ref = BatchRef(ACCOUNT, name)
    meter = CpuMeter(st.pids())
    t0 = time.time()
    r = http.post(f"/api/v1/batches/{name}/process")
    if r.status_code != 202:
        raise BenchError(f"process answered {r.status_code}: {r.text[:300]}")
    done_ms = wait_until(
        lambda: _completed_ms(st.redis, ref),
        max(60.0, n / 25),
        0.005,
        f"batch {name} ({n} documents) to complete",
    )
    assert done_ms is not None
    seconds = done_ms / 1000 - t0
    cpu = meter.stop()
    body = http.get(f"/api/v1/batches/{name}").json()
    if not body["all_done"] or body["counts"]["succeeded"] != n:
        raise BenchError(f"batch {name} finished with counts {body['counts']}")
    return {
        "documents": n,
        "seconds": round(seconds, 3),
        "docs_per_s": round(n / seconds, 1),
        "per_doc_ms": round(seconds * 1000 / n, 3),
        "cpu": cpu,
    }


def run_noop(st: Stack, n: int) -> dict[str, Any]:
    """RQ's own floor: ``n`` do-nothing jobs on the processing queue, enqueued as relay
    enqueues documents (``enqueue_many``, 500 per round trip), until the queue and the
    started registry are empty."""
    from rq import Queue
    from rq.registry import StartedJobRegistry

    q = queue(st.redis, PROCESSING)
    data = [
        Queue.prepare_data("bench.noop.run", args=[i], result_ttl=0, timeout=60) for i in range(n)
    ]
    st.redis.delete("bench:noop:done")
    meter = CpuMeter(st.pids())
    t0 = time.time()
    for i in range(0, n, 500):
        with st.redis.pipeline() as pipe:
            q.enqueue_many(data[i : i + 500], pipeline=pipe)
            pipe.execute()
    wait_until(
        lambda: int(st.redis.get("bench:noop:done") or 0) >= n,
        max(60.0, n / 25),
        0.005,
        f"{n} no-op jobs",
    )
    seconds = time.time() - t0
    cpu = meter.stop()
    if len(StartedJobRegistry(PROCESSING, connection=st.redis)) > 1:
        raise BenchError("no-op jobs left in the started registry")
    return {
        "documents": n,
        "seconds": round(seconds, 3),
        "docs_per_s": round(n / seconds, 1),
        "cpu": cpu,
    }


def _cores(result: dict[str, Any]) -> str:
    cpu = result["cpu"]
    return f"{cpu['ours_cores']:.2f} / {cpu['foreign_cores']:.2f}"


def _memory_usage(client: redis.Redis, key: str) -> int:
    return int(client.memory_usage(key, samples=0) or 0)


def memory_sample(client: redis.Redis, ref: BatchRef, n: int, sample: int) -> dict[str, Any]:
    """``MEMORY USAGE`` of the batch's document hashes, blobs, items and list shares."""
    s = ref.shard
    ids = [i.decode() for i in client.lrange(keyspace.batch_docs(s, ref.account, ref.name), 0, -1)]
    step = max(1, len(ids) // sample)
    picked = ids[::step][:sample]
    docs = [_memory_usage(client, keyspace.doc(s, i)) for i in picked]
    blobs = [_memory_usage(client, keyspace.blob(s, i)) for i in picked]
    items = [_memory_usage(client, keyspace.doc_items(s, i)) for i in picked]
    lists = {
        "docs_list": _memory_usage(client, keyspace.batch_docs(s, ref.account, ref.name)),
        "pending_list": _memory_usage(client, keyspace.batch_pending(s, ref.account, ref.name)),
        "ready_list": _memory_usage(client, keyspace.batch_ready(s, ref.account, ref.name)),
        "started_zset": _memory_usage(client, keyspace.batch_started(s, ref.account, ref.name)),
    }
    return {
        "sampled": len(picked),
        "doc_hash_bytes": round(statistics.mean(docs), 1),
        "blob_bytes": round(statistics.mean(blobs), 1),
        "line_items_bytes": round(statistics.mean(items), 1),
        "list_share_bytes": {k: round(v / n, 1) for k, v in lists.items()},
        "state_bytes_per_doc": round(
            statistics.mean(docs) + sum(lists.values()) / n, 1
        ),  # hash + list/zset shares, without the uploaded bytes or line_items
    }


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def run(quick: bool = False, profile: bool = False) -> Outcome:
    n_tp = 50 if quick else 2000
    n_small, reps = 10, (2 if quick else 5)
    n_large = 100 if quick else 10_000
    n_warm = 5 if quick else 20
    n_fair, fair_samples = (50, 2) if quick else (3000, 5)
    settle = 0.1 if quick else 0.5
    out = Outcome()
    with Stack() as st:
        started = st.start(workers=1)
        key, w1 = started.key, started.workers[0]
        http = httpx.Client(
            base_url=st.api_url, headers={"Authorization": f"Bearer {key}"}, timeout=60
        )
        try:
            progress(NAME, "warm-up")
            upload_http(http, "warm-1", n_warm)
            run_batch(http, st, "warm-1", n_warm)
            run_noop(st, n_warm)

            progress(NAME, f"1 worker: {n_tp} documents uploaded over HTTP, then processed")
            up_s = upload_http(http, "tp-1w", n_tp)
            one = run_batch(http, st, "tp-1w", n_tp)
            noop_one = run_noop(st, n_tp)

            w2 = st.worker()
            upload_http(http, "warm-2", n_warm)
            run_batch(http, st, "warm-2", n_warm)
            progress(NAME, f"2 workers: {n_tp} documents")
            upload_direct(st.redis_url, [BatchRef(ACCOUNT, "tp-2w")], n_tp)
            profiler = Profiler({"worker-1": w1.pid, "worker-2": w2.pid}, "processing")
            if profile:
                profiler.start()
            two = run_batch(http, st, "tp-2w", n_tp)
            profiles = profiler.stop() if profile else {}
            noop_two = run_noop(st, n_tp)

            progress(NAME, f"fairness: another account's document behind {n_fair}, 2 workers")
            fair = run_fairness(st, http, n_fair, fair_samples)

            progress(NAME, f"flat cost: {reps} x {n_small}-document batches, 2 workers")
            small = []
            for i in range(reps):
                ref = BatchRef(ACCOUNT, f"small-{i}")
                upload_direct(st.redis_url, [ref], n_small)
                small.append(run_batch(http, st, ref.name, n_small))
            small_per_doc = statistics.median(r["per_doc_ms"] for r in small)

            progress(NAME, f"memory: {n_large} uploads through AsyncStore.upload")
            large_ref = BatchRef(ACCOUNT, "large")
            time.sleep(settle)
            mem0 = used_memory(st.redis)
            seed_s = upload_direct(st.redis_url, [large_ref], n_large)
            time.sleep(settle)
            mem1 = used_memory(st.redis)
            before = memory_sample(st.redis, large_ref, n_large, 200)

            progress(NAME, f"flat cost: one {n_large}-document batch, 2 workers")
            large = run_batch(http, st, large_ref.name, n_large)
            time.sleep(3 * settle)  # let the detector's sweep and RQ's cleanup settle
            mem2 = used_memory(st.redis)
            after = memory_sample(st.redis, large_ref, n_large, 200)
            rss = st.rss()
        finally:
            http.close()

    delta_upload = (mem1 - mem0) / n_large
    delta_processed = (mem2 - mem0) / n_large
    flat = ratio(large["per_doc_ms"], small_per_doc)
    out.data = {
        "seeding": {
            "1_worker_batch": "HTTP POST /api/v1/documents, 4 in flight",
            "other_batches": "relay.state.store.AsyncStore.upload, 32 in flight (no HTTP)",
            "http_upload_docs_per_s": round(n_tp / up_s, 1),
            "direct_upload_docs_per_s": round(n_large / seed_s, 1),
        },
        "throughput": {
            "relay_1_worker": one,
            "relay_2_workers": two,
            "rq_noop_1_worker": noop_one,
            "rq_noop_2_workers": noop_two,
            "scaling_2_over_1": ratio(two["docs_per_s"], one["docs_per_s"]),
            "relay_over_noop_1_worker": ratio(one["docs_per_s"], noop_one["docs_per_s"]),
            "relay_over_noop_2_workers": ratio(two["docs_per_s"], noop_two["docs_per_s"]),
        },
        "fairness": fair,
        "flat_cost": {
            "small_batches": small,
            "small_per_doc_ms_median": small_per_doc,
            "large_batch": large,
            "large_over_small_per_doc": flat,
        },
        "memory": {
            "used_memory_delta_per_doc_after_upload_bytes": round(delta_upload, 1),
            "used_memory_delta_per_doc_after_upload_minus_blob_bytes": round(
                delta_upload - before["blob_bytes"], 1
            ),
            "used_memory_delta_per_doc_after_processing_bytes": round(delta_processed, 1),
            "sample_after_upload": before,
            "sample_after_processing": after,
            "document_bytes_uploaded": len(CSV_DOC),
        },
        "rss": rss,
        "profiles": profiles,
    }
    out.tables.append(
        table(
            "processing throughput (POST /process -> completed_at)",
            ["run", "documents", "seconds", "docs/s", "relay / rq no-op", "cores ours/foreign"],
            [
                [
                    "relay, 1 worker",
                    n_tp,
                    one["seconds"],
                    one["docs_per_s"],
                    out.data["throughput"]["relay_over_noop_1_worker"],
                    _cores(one),
                ],
                [
                    "relay, 2 workers",
                    n_tp,
                    two["seconds"],
                    two["docs_per_s"],
                    out.data["throughput"]["relay_over_noop_2_workers"],
                    _cores(two),
                ],
                [
                    "rq no-op job, 1 worker",
                    n_tp,
                    noop_one["seconds"],
                    noop_one["docs_per_s"],
                    "",
                    _cores(noop_one),
                ],
                [
                    "rq no-op job, 2 workers",
                    n_tp,
                    noop_two["seconds"],
                    noop_two["docs_per_s"],
                    "",
                    _cores(noop_two),
                ],
                [
                    "relay 2 workers / 1 worker",
                    "",
                    "",
                    out.data["throughput"]["scaling_2_over_1"],
                    "",
                    "",
                ],
            ],
        )
    )
    out.tables.append(
        table(
            "flat cost per document (2 workers)",
            ["batch", "documents", "seconds", "ms / document", "cores ours/foreign"],
            [
                [
                    f"{n_small} documents (median of {reps})",
                    n_small,
                    statistics.median(r["seconds"] for r in small),
                    small_per_doc,
                    "",
                ],
                [
                    f"{n_large} documents",
                    n_large,
                    large["seconds"],
                    large["per_doc_ms"],
                    _cores(large),
                ],
                ["ratio large / small", "", "", flat, ""],
            ],
        )
    )
    out.tables.append(
        table(
            f"fairness: another account's one document behind a {n_fair}-document backlog "
            "(2 workers)",
            [
                "sample",
                "POST /process -> completed_at ms",
                "backlog queued",
                "backlog docs/s",
                "one FIFO queue: s",
            ],
            [
                [
                    i + 1,
                    row["latency_ms"],
                    row["backlog_queued"],
                    row["backlog_docs_per_s"],
                    row["fifo_estimate_s"],
                ]
                for i, row in enumerate(fair["samples"])
            ],
        )
    )
    lists_b = before["list_share_bytes"]
    out.tables.append(
        table(
            f"Redis memory per document ({n_large} documents, before line_items)",
            ["measure", "bytes / document"],
            [
                ["MEMORY USAGE document hash (mean)", before["doc_hash_bytes"]],
                ["  + share of batch docs list", lists_b["docs_list"]],
                ["  + share of batch pending list", lists_b["pending_list"]],
                ["  = document state", before["state_bytes_per_doc"]],
                ["MEMORY USAGE uploaded bytes (blob key)", before["blob_bytes"]],
                ["INFO used_memory delta after uploads", round(delta_upload, 1)],
                ["  minus blob keys", round(delta_upload - before["blob_bytes"], 1)],
                ["after processing: document hash", after["doc_hash_bytes"]],
                ["after processing: line_items key", after["line_items_bytes"]],
                ["after processing: used_memory delta", round(delta_processed, 1)],
            ],
        )
    )
    if profiles:
        out.tables.append(render(profiles))
    out.goal(
        f"another account's document behind {n_fair} (max of {fair_samples})",
        fair["latency_max_ms"],
        "ms",
        "<= 2000",
        fair["latency_max_ms"] <= 2000,
    )
    out.goal("per-document time, 10k batch / 10 batch", flat, "x", "near 1 (<= 1.5)", flat <= 1.5)
    out.goal(
        "Redis memory per document before line_items (state)",
        before["state_bytes_per_doc"],
        "bytes",
        "<= 1024",
        before["state_bytes_per_doc"] <= KIB,
    )
    out.goal(
        "used_memory delta per document after upload, blob excluded",
        round(delta_upload - before["blob_bytes"], 1),
        "bytes",
        "<= 1024",
        delta_upload - before["blob_bytes"] <= KIB,
    )
    return out
