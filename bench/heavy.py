"""Two heavy documents of two accounts and a third account's small ones, on ONE
processing worker.

Accounts ``heavy`` and ``heavy-2`` each process a real long PDF (a ruled 30-row table on
each of ``pages`` pages, read by the default extractor), one after the other. Once both
are being extracted, account ``bench-other`` uploads a one-row CSV and calls ``process``,
several times one after the other; each latency runs from just before that call to the
document's ``completed_at``. The same run is made on fresh stacks with
``RELAY_BACKGROUND_EXTRACTIONS`` at 2 (the default: both heavy documents move to the
background of ``relay.runtime.processing``), 1 (the default before: the second one holds the
worker) and 0 (v1's behaviour: the small document waits for the heavy ones). Also
reported: the heavy documents' own extraction times in each, i.e. what moving them to the
background (reniced) costs them.

And what watching costs every document: ``run_documents`` in this process (a private Redis,
a real extraction child) over batches of 300 one-row CSVs, alternately as relay runs them
(``process_fairly``: each extraction in a thread, watched) and with ``process_claimed``
called directly (v1), 4 rounds each: milliseconds per document.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio

from bench._common import BenchError, Outcome, percentile, progress, table, wait_until, write_result
from bench._stack import ACCOUNT, Stack
from relay.config import load_settings
from relay.crypto import generate_key
from relay.devtools.redis_server import RedisServer
from relay.devtools.sample_documents import HEADER, pdf, table_ops
from relay.redis import keyspace
from relay.runtime import processing
from relay.runtime.context import WorkerContext
from relay.state.blobs import BlobStore
from relay.state.claims import Claim
from relay.state.claims import Outcome as DocumentOutcome
from relay.state.store import AsyncStore, BatchRef

OTHER = "bench-other"
HEAVY_2 = "heavy-2"
SMALL = b"sku,qty\nS-1,1\n"


def _doc(st: Stack, doc_id: str) -> dict[bytes, bytes]:
    shard = keyspace.shard_of_id("doc", doc_id)
    if shard is None:
        raise BenchError(f"not a document id: {doc_id!r}")
    found: dict[bytes, bytes] = st.redis.hgetall(keyspace.doc(shard, doc_id))
    return found


def _completed_at(st: Stack, doc_id: str, interval: float) -> int:
    def completed() -> int:
        return int(_doc(st, doc_id).get(b"completed_at") or 0)

    return wait_until(completed, 600, interval, f"{doc_id} to complete")


def _upload(client: httpx.Client, batch: str, name: str, content: bytes, kind: str) -> str:
    r = client.post(
        "/api/v1/documents",
        files={"file": (name, content, kind)},
        data={"batch_name": batch},
    )
    if r.status_code != 201:
        raise BenchError(f"upload answered {r.status_code}: {r.text[:300]}")
    doc_id: str = r.json()["id"]
    return doc_id


def _process(client: httpx.Client, batch: str) -> None:
    r = client.post(f"/api/v1/batches/{batch}/process")
    if r.status_code != 202:
        raise BenchError(f"process answered {r.status_code}: {r.text[:300]}")


def _client(st: Stack, key: str) -> httpx.Client:
    return httpx.Client(base_url=st.api_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _one_run(background: int, heavy_pdf: bytes, samples: int) -> dict[str, Any]:
    settings = {"RELAY_BACKGROUND_EXTRACTIONS": str(background), "RELAY_EXTRACT_TIMEOUT": "300"}
    with Stack(settings=settings) as st:
        started = st.start(workers=1)
        heavies = [_client(st, started.key), _client(st, st.create_key(HEAVY_2))]
        other = _client(st, st.create_key(OTHER))
        try:
            heavy_ids = []
            for heavy in heavies:
                heavy_ids.append(_upload(heavy, "long", "long.pdf", heavy_pdf, "application/pdf"))
                _process(heavy, "long")
            # The first is claimed at once; the second once the first moved aside, or, with
            # no room in the background, when the first ends.
            wait_until(
                lambda: _doc(st, heavy_ids[0]).get(b"status") == b"processing", 60, 0.01, "claim"
            )
            give_up = time.monotonic() + 4.0  # RELAY_BACKGROUND_AFTER (2 s) and a margin
            while time.monotonic() < give_up:
                if _doc(st, heavy_ids[1]).get(b"status") == b"processing":
                    break
                time.sleep(0.01)
            time.sleep(0.5)
            latencies: list[float] = []
            for i in range(samples):
                if all(_doc(st, h).get(b"status") != b"processing" for h in heavy_ids):
                    break  # the heavy documents ended: later samples would measure nothing
                batch = f"small-{i}"
                doc_id = _upload(other, batch, "one.csv", SMALL, "text/csv")
                t0 = time.time()
                _process(other, batch)
                done = _completed_at(st, doc_id, 0.005)
                latencies.append(round(done / 1000 - t0, 3))
            seconds, statuses = [], []
            for heavy_id in heavy_ids:
                end = _completed_at(st, heavy_id, 0.05)
                record = _doc(st, heavy_id)
                statuses.append(record.get(b"status", b"").decode())
                seconds.append(round((end - int(record[b"started_at"])) / 1000, 2))
            return {
                "background_extractions": background,
                "small_latency_s": latencies,
                "small_p50_s": percentile(latencies, 50) if latencies else None,
                "small_max_s": max(latencies) if latencies else None,
                "heavy_status": statuses,
                "heavy_seconds": seconds,
            }
        finally:
            for client in (*heavies, other):
                client.close()


def _process_and_read(url: str, ref: BatchRef, n: int) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        api = AsyncStore(client, BlobStore(""))
        try:
            for i in range(n):
                await api.upload(ref, filename=f"{i}.csv", content_type="text/csv", content=SMALL)
            await api.process(ref, None)
        finally:
            await client.aclose()

    asyncio.run(main())


def _watch_cost(rounds: int, n: int) -> dict[str, Any]:
    """ms per document of ``run_documents`` with and without the watching thread."""
    server = RedisServer(Path(tempfile.mkdtemp(prefix="relay-bench-")) / "redis", appendonly=False)
    server.start()
    env = {"RELAY_REDIS_URL": server.url, "RELAY_ENCRYPTION_KEY": generate_key()}
    ctx = WorkerContext(load_settings(env, dotenv=None))
    watched = processing.process_fairly

    def direct(
        ctx: WorkerContext,
        claim: Claim,
        *,
        others_here: bool = False,
        sink: list[tuple[DocumentOutcome, float]] | None = None,
    ) -> None:
        processing.process_claimed(ctx, claim)

    ms: dict[str, list[float]] = {"watched": [], "direct": []}
    try:
        ctx.extraction.run(SMALL, filename="warm.csv", content_type="", fields=[])
        for i in range(rounds):
            for how in ("watched", "direct"):
                processing.process_fairly = watched if how == "watched" else direct
                ref = BatchRef("bench", f"{how}-{i}")
                _process_and_read(server.url, ref, n)
                t0 = time.perf_counter()
                processing.run_documents(ctx, ref.shard, budget=1e9)
                ms[how].append(round((time.perf_counter() - t0) / n * 1000, 3))
    finally:
        processing.process_fairly = watched
        ctx.extraction.close()
        ctx.redis.close()
        server.stop()
    return {
        "documents_per_round": n,
        "ms_per_document": ms,
        "watched_p50_ms": statistics.median(ms["watched"]),
        "direct_p50_ms": statistics.median(ms["direct"]),
    }


def run(*, quick: bool = False, profile: bool = False) -> Outcome:
    pages, samples = (40, 2) if quick else (400, 5)
    rows = [HEADER] + [[f"A-{i}", "Bolt M6 zinc", str(i)] for i in range(30)]
    heavy_pdf = pdf([table_ops(rows)] * pages)
    progress("heavy", f"a {pages}-page PDF ({len(heavy_pdf) // 1024} KiB), {samples} small docs")
    runs = []
    for background in (2, 1, 0):
        progress("heavy", f"RELAY_BACKGROUND_EXTRACTIONS={background}")
        runs.append(_one_run(background, heavy_pdf, samples))
    progress("heavy", "the cost of watching every document")
    cost = _watch_cost(2 if quick else 4, 50 if quick else 300)
    out = Outcome()
    out.tables.append(
        table(
            "run_documents in process, one-row CSVs: ms per document (median of rounds)",
            ["watched (relay)", "direct (v1)", "ratio"],
            [
                [
                    cost["watched_p50_ms"],
                    cost["direct_p50_ms"],
                    round(cost["watched_p50_ms"] / cost["direct_p50_ms"], 3),
                ]
            ],
        )
    )
    out.tables.append(
        table(
            "one processing worker: a small CSV of a third account behind two long PDFs",
            ["background", "small p50 s", "small max s", "samples", "heavy docs s", "status"],
            [
                [
                    r["background_extractions"],
                    r["small_p50_s"],
                    r["small_max_s"],
                    len(r["small_latency_s"]),
                    " / ".join(str(x) for x in r["heavy_seconds"]),
                    " / ".join(r["heavy_status"]),
                ]
                for r in runs
            ],
        )
    )
    with_bg = runs[0]
    if with_bg["small_max_s"] is not None:
        out.goal(
            "small document behind two heavy ones (max)",
            with_bg["small_max_s"],
            "s",
            "a few seconds (< 10 s)",
            with_bg["small_max_s"] < 10,
        )
    out.data = {"pages": pages, "account": ACCOUNT, "runs": runs, "watch_cost": cost}
    write_result("heavy", quick, out.data)
    return out
