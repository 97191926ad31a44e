"""Throughput on one Redis beside a Redis Cluster of 1 and of 3 primaries (issue 16).

The same relay processes each time (one ``relay serve``, ``WORKERS`` ``relay worker`` on both
queues, one ``relay detector``) against: one standalone Redis; a Cluster of one primary (every
slot on one node: what the cluster client itself costs); a Cluster of three primaries. With a
Cluster, RQ's queues are on a plain Redis of their own (``RELAY_QUEUE_REDIS_URL``). Every node
runs AOF ``appendfsync everysec``, no replicas (so the three differ only in topology). A
fourth run: the Cluster of three with ``RELAY_SHARDS=64`` (a fresh deployment with 64
shards: what the per-shard loops cost relay's processes, beside the 16 of the third).

Measured: ``BATCHES`` batches of ``PER_BATCH`` one-row CSVs uploaded through the API
(uploads/s), then all processed at once until every batch is ``all_done`` and its
notification delivered to a receiver (documents/s, end to end), with the CPU that relay's
processes (extraction children included) and the Redis nodes spent per document meanwhile:
on a shared machine the wall-clock figures move with others' load, the CPU per document far
less. On a small machine relay's processes, not Redis, are the bottleneck: the figures say
what the Cluster costs, not what it adds (Redis capacity: ``bench redis_cost``).
"""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench._common import BenchError, Outcome, _machine_jiffies, _proc_jiffies, progress, table
from bench._receiver import ReceiverProcess
from bench._stack import UNTHROTTLED
from relay.devtools.cluster import Cluster
from relay.devtools.processes import Stack, relay_env, wait_until
from relay.devtools.redis_server import RedisServer

NAME = "cluster"
WORKERS = 2
BATCHES = 40
PER_BATCH = 25
CSV = b"sku,qty\nA-1,2\n"
# A loaded machine can make an upload miss the API's request deadline (503, retry): the
# bench retries as a client would, and counts it. A retry may store the document twice (a 503
# can come after Redis ran the upload): one more document in the batch, a rounding error here.
UPLOAD_TRIES = 5


def _tree_jiffies(roots: list[int]) -> int:
    """utime + stime of ``roots`` and of every live descendant (the extraction children of
    the workers), from ``/proc``."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(stat.parent.name)] = int(fields[1])
    tree, grew = set(roots), True
    while grew:
        more = {pid for pid, ppid in parent.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(_proc_jiffies(pid) for pid in tree)


def _cpu_now(stack: Stack, redis_pids: list[int]) -> tuple[float, float, float, float]:
    """(relay processes' CPU s, Redis nodes' CPU s, machine busy CPU s, monotonic s)."""
    tick = os.sysconf("SC_CLK_TCK")
    relay_cpu = _tree_jiffies([p.pid for p in stack.procs]) / tick
    redis_cpu = sum(_proc_jiffies(pid) for pid in redis_pids) / tick
    return relay_cpu, redis_cpu, _machine_jiffies()[0] / tick, time.monotonic()


def _measure(
    stack: Stack,
    receiver: ReceiverProcess,
    batches: int,
    per_batch: int,
    redis_pids: list[int],
) -> dict[str, Any]:
    stack.api()
    for _ in range(WORKERS):
        stack.worker()
    stack.detector()
    key = stack.create_key("bench")
    http = httpx.Client(
        base_url=stack.api_url + "/api/v1", headers={"authorization": f"Bearer {key}"}, timeout=30
    )
    names = [f"c{i:03d}" for i in range(batches)]

    unavailable: list[int] = []  # 503s retried, as the API asks (Retry-After)

    def upload(job: tuple[str, int]) -> None:
        name, i = job
        for _ in range(UPLOAD_TRIES):
            r = http.post(
                "/documents",
                files={"file": (f"d{i}.csv", CSV, "text/csv")},
                data={"batch_name": name},
            )
            if r.status_code != 503:
                break
            unavailable.append(1)
            time.sleep(float(r.headers.get("retry-after", "1")))
        if r.status_code != 201:
            raise BenchError(f"upload answered {r.status_code}: {r.text[:200]}")

    try:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(upload, [(n, i) for n in names for i in range(per_batch)]))
        upload_s = time.perf_counter() - t0
        for n in names:
            r = http.put(f"/batches/{n}/webhook", json={"url": receiver.url(f"/{n}")})
            if r.status_code not in (200, 201):
                raise BenchError(f"register answered {r.status_code}: {r.text[:200]}")
        t0 = time.perf_counter()
        cpu0 = _cpu_now(stack, redis_pids)
        for n in names:
            if http.post(f"/batches/{n}/process").status_code != 202:
                raise BenchError("process refused")
        wait_until(
            lambda: receiver.count() >= batches, 600, 0.1, "notifications did not all arrive"
        )
        process_s = time.perf_counter() - t0
        cpu1 = _cpu_now(stack, redis_pids)
        for n in names:
            if not http.get(f"/batches/{n}").json()["all_done"]:
                raise BenchError(f"{n} not all_done after its notification")
    finally:
        http.close()
    docs = batches * per_batch
    relay_s, redis_s, busy_s, wall_s = (b - a for a, b in zip(cpu0, cpu1, strict=True))
    return {
        "documents": docs,
        "uploads_retried_after_503": len(unavailable),
        "upload_s": round(upload_s, 2),
        "uploads_per_s": round(docs / upload_s, 1),
        "process_notify_s": round(process_s, 2),
        "docs_per_s": round(docs / process_s, 1),
        # From process to notified: CPU of relay's processes (and their extraction children)
        # and of the Redis nodes per document, which the load of others changes far less than
        # the wall time; and the cores busy with work not ours meanwhile.
        "relay_cpu_ms_per_doc": round(relay_s * 1000 / docs, 2),
        "redis_cpu_us_per_doc": round(redis_s * 1e6 / docs, 1),
        "foreign_cores": round(max(0.0, busy_s - relay_s - redis_s) / wall_s, 2),
    }


def run(quick: bool = False, profile: bool = False) -> Outcome:
    batches, per_batch = (6, 5) if quick else (BATCHES, PER_BATCH)
    out = Outcome()
    results: dict[str, dict[str, Any]] = {}
    for topology in ("standalone", "cluster-1", "cluster-3", "cluster-3-64"):
        progress(NAME, f"{topology}: {batches} x {per_batch} documents")
        tmp = Path(tempfile.mkdtemp(prefix="relay-bench-cluster-"))
        servers: list[RedisServer] = []
        cluster: Cluster | None = None
        receiver = ReceiverProcess(tmp, relay_env("redis://unused.invalid:1/0"))
        try:
            try:
                if topology == "standalone":
                    server = RedisServer(tmp / "redis", appendonly=True)
                    server.start()
                    servers.append(server)
                    stack = Stack(redis_url=server.url, tmp=tmp, env=dict(UNTHROTTLED))
                else:
                    primaries = int(topology.split("-")[1])
                    cluster = Cluster(tmp / "cluster", primaries=primaries, replicas=0)
                    cluster.start()
                    queues = RedisServer(tmp / "queues", appendonly=True)
                    queues.start()
                    servers.append(queues)
                    env = {
                        **UNTHROTTLED,
                        "RELAY_REDIS_CLUSTER_NODES": cluster.nodes_setting,
                        "RELAY_QUEUE_REDIS_URL": queues.url,
                    }
                    if topology.endswith("-64"):  # RELAY_SHARDS raised: what more shards cost
                        env["RELAY_SHARDS"] = "64"
                    stack = Stack(redis_url=cluster.url, tmp=tmp, env=env)
                try:
                    nodes = cluster.nodes if cluster is not None else []
                    pids = [pid for pid in (n.pid for n in [*nodes, *servers]) if pid]
                    results[topology] = _measure(stack, receiver, batches, per_batch, pids)
                finally:
                    stack.close()
            finally:
                if cluster is not None:
                    cluster.close()
                for server in servers:
                    server.stop()
        finally:
            receiver.stop()
    base = results["standalone"]["docs_per_s"]
    out.data = {"workers": WORKERS, "results": results}
    out.tables.append(
        table(
            f"throughput, same processes ({WORKERS} workers, 1 API, 1 detector), "
            f"{batches} batches x {per_batch} CSVs, each batch notified",
            [
                "Redis",
                "uploads/s",
                "docs/s (process to notified)",
                "vs one Redis",
                "relay CPU ms/doc",
                "Redis CPU us/doc",
                "foreign cores",
            ],
            [
                [
                    t,
                    r["uploads_per_s"],
                    r["docs_per_s"],
                    f"{r['docs_per_s'] / base:.2f}",
                    r["relay_cpu_ms_per_doc"],
                    r["redis_cpu_us_per_doc"],
                    r["foreign_cores"],
                ]
                for t, r in results.items()
            ],
        )
    )
    return out
