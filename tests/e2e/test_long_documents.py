"""End to end: a long scan is read in slices that every processing worker takes (issue 27,
item 3), on real workers: two workers read a 24-page TIFF in well under the time of one;
another account's CSV is served between slices; the document shows its pages while it is
read; a worker killed mid-slice costs that slice, never the document (on one Redis and on a
Redis Cluster)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import redis.cluster

from relay.devtools.drawn_tables import long_scan, page_rows
from relay.devtools.processes import Proc, Stack
from relay.redis import keyspace
from tests.e2e.client import Api
from tests.support.helpers import RedisFactory, wait_until

CSV = b"sku,qty\nA-1,2\n"


def expected_rows(pages: int) -> list[dict[str, str]]:
    """The line_items of ``long_scan(pages)``: one table continued page after page."""
    return [
        dict(zip(page_rows(n)[0], row, strict=True))
        for n in range(1, pages + 1)
        for row in page_rows(n)[1:]
    ]


def started(stack: Stack, **settings: str) -> Api:
    stack.env.update(settings)
    stack.api()
    stack.detector()
    return Api(stack.api_url, stack.create_key("scans"))


def worker(stack: Stack) -> Proc:
    """One more processing worker, once RQ lists it (it takes jobs from then on)."""
    client = redis.Redis.from_url(stack.env.get("RELAY_QUEUE_REDIS_URL") or stack.redis_url)
    try:
        before = client.scard("rq:workers")
        proc = stack.worker("--queues", "processing")
        wait_until(lambda: client.scard("rq:workers") > before, 60, 0.1, "the worker did not start")
    finally:
        client.close()
    return proc


def read(api: Api, batch: str, doc_id: str, timeout: float = 100) -> tuple[float, list[Any]]:
    """Process ``batch`` and wait for ``doc_id`` to succeed: the seconds it took, and what
    the document said of its pages while it was processing (page_count, pages_done)."""
    t0 = time.monotonic()
    api.process(batch)
    seen: list[tuple[Any, Any]] = []

    def done() -> dict[str, Any] | None:
        doc: dict[str, Any] = api.http.get(f"/documents/{doc_id}").json()
        if doc["status"] == "processing":
            seen.append((doc["page_count"], doc["pages_done"]))
        assert doc["status"] in ("queued", "processing", "succeeded"), doc
        return doc if doc["status"] == "succeeded" else None

    doc = wait_until(done, timeout, 0.1, f"{batch} was not read")
    assert (
        doc is not None and doc["page_count"] is None and doc["pages_done"] is None
    )  # progress is for processing
    return time.monotonic() - t0, seen


def check_result(api: Api, batch: str, pages: int) -> None:
    """Every page's table in the result, in page order, joined into one table."""
    [doc] = api.http.get(f"/batches/{batch}/results").json()["documents"]
    assert [t["page"] for t in doc["tables"]] == list(range(1, pages + 1))
    assert doc["line_items"] == expected_rows(pages)


def check_progress(seen: list[Any], pages: int) -> None:
    """While it was read, the document showed its pages, pages_done rising slice by slice."""
    counted = [p for p in seen if p[0] is not None]
    assert counted and all(total == pages for total, _ in counted), seen
    done = [d for _, d in counted]
    assert done == sorted(done), seen  # never back
    assert len({d for d in done if 0 < d < pages}) >= 2, seen


def cpu_ticks() -> tuple[int, int]:
    """The machine's CPU time so far, in clock ticks: (all, idle) (``/proc/stat``)."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    return sum(values), values[3] + values[4]  # idle and iowait


def warm(api: Api, workers: list[Proc]) -> None:
    """Each worker's extraction child started and its OCR models loaded (what a worker's
    first scan pays once), so that the runs measured compare reading, not starting: short
    scans read until every worker has read some of one."""
    for attempt in range(4):
        batch = f"warm-{attempt}"
        api.upload(batch, long_scan(2 * len(workers)), "warm.tif")
        api.process(batch)

        def read_all(batch: str = batch) -> bool:
            return bool(api.batch(batch)["all_done"])

        wait_until(read_all, 90, 0.1, "the warm-up was not read")
        if all(has_read(w) for w in workers):
            return
    raise AssertionError("a worker never read any of the warm-up scans")


def has_read(worker: Proc) -> bool:
    """Whether the worker has read pages of a warm-up scan: a slice of one, or a whole one
    (splitting one reads none)."""
    return any(
        "batch=warm-" in line and ("status=done" in line or "status=succeeded" in line)
        for line in worker.tail(200_000).splitlines()
    )


MEASURING = 60  # seconds of measured runs after which no round is started


# The idle share of the machine, while one worker read, that leaves a second core for two.
IDLE_FOR_TWO = 0.4


@pytest.mark.timeout(300)
def test_two_workers_read_a_long_scan_in_well_under_the_time_of_one(
    stack: Stack, redis_factory: RedisFactory, tmp_path: Path
) -> None:
    # Two deployments side by side, warm, one processing at a time: one processing worker,
    # two. The machine is shared and its load comes and goes, so the two are measured one
    # after the other, and again, in turn, while the pairs say no and time is left (the best
    # of each counts).
    (tmp_path / "pair").mkdir()
    pair = Stack(redis_url=redis_factory().url, tmp=tmp_path / "pair", own_sessions=True)
    stack.own_sessions = True  # each process its own share of the CPU, as on its own host
    try:
        apis = {1: started(stack, RELAY_SLICE_PAGES="2"), 2: started(pair, RELAY_SLICE_PAGES="2")}
        workers = {1: [worker(stack)], 2: [worker(pair), worker(pair)]}
        for n in (1, 2):
            warm(apis[n], workers[n])
        scan = long_scan(24)  # 600 x 400 pixels a page, a drawn table on each
        took: dict[int, list[float]] = {1: [], 2: []}
        idle: dict[int, list[float]] = {1: [], 2: []}  # the machine's idle share, per run
        start = time.monotonic()
        for rounds, order in enumerate(((1, 2), (2, 1), (1, 2)), start=1):
            if rounds > 1 and time.monotonic() - start > MEASURING:
                break
            for n in order:
                batch = f"run-{rounds}"
                doc = apis[n].upload(batch, scan, "scan.tif")
                ticks = cpu_ticks()
                seconds, seen = read(apis[n], batch, doc["id"])
                total, free = (a - b for a, b in zip(cpu_ticks(), ticks, strict=True))
                took[n].append(round(seconds, 2))
                idle[n].append(round(free / max(total, 1), 2))
                check_result(apis[n], batch, 24)
                check_progress(seen, 24)
            if min(took[2]) / min(took[1]) <= 0.65:
                break
        ratio = min(took[2]) / min(took[1])
        said = f"1 worker {took[1]} s, 2 workers {took[2]} s: ratio {ratio:.2f}; idle {idle}"
        print(f"24-page scan: {said}")
        # The machine is shared: when others hold a core, two workers cannot have two (the
        # idle shares say how much was left). With a core left idle beside the one worker,
        # two must take well under its time; without, sharing the pages must cost nothing.
        if max(idle[1]) >= IDLE_FOR_TWO:
            assert ratio <= 0.65, said
        else:
            assert ratio <= 1.05, said
    except BaseException:
        print(pair.logs())
        raise
    finally:
        pair.close()


@pytest.mark.timeout(180)
def test_another_account_is_served_between_the_slices_of_a_long_scan(
    stack: Stack, redis: redis.Redis
) -> None:
    # ONE processing worker, busy with a long scan a page a slice: another account's one-row
    # CSV gets the next turn of the fair queue.
    api = started(stack, RELAY_SLICE_PAGES="1", RELAY_BACKGROUND_AFTER="0.5")
    other = Api(stack.api_url, stack.create_key("other"))
    scan = api.upload("long", long_scan(8), "scan.tif")
    worker(stack)
    api.process("long")
    wait_until(
        lambda: (api.http.get(f"/documents/{scan['id']}").json()["pages_done"] or 0) >= 2,
        60,
        0.05,
        "the scan's slices were not read",
    )
    small = other.upload("small", CSV, "one.csv")
    t0 = time.monotonic()
    other.process("small")
    wait_until(
        lambda: other.http.get(f"/documents/{small['id']}").json()["status"] == "succeeded",
        30,
        0.02,
        "the CSV was never processed",
    )
    waited = time.monotonic() - t0
    print(f"one-row CSV behind a scan read in slices: {waited:.2f} s")
    scan_now = api.http.get(f"/documents/{scan['id']}").json()
    assert waited < 2.0, (waited, scan_now)
    assert scan_now["status"] == "processing"  # it was served in the middle of the scan
    wait_until(lambda: api.batch("long")["all_done"], 90, 0.1, "the scan was not read")
    check_result(api, "long", 8)


def state_client(stack: Stack) -> redis.Redis | redis.cluster.RedisCluster:
    """A client of the stack's state: its Redis, or its Cluster."""
    nodes = stack.env.get("RELAY_REDIS_CLUSTER_NODES")
    if not nodes:
        return redis.Redis.from_url(stack.redis_url)
    host, port = nodes.split(",")[0].rsplit(":", 1)
    password = urlsplit(stack.redis_url).password
    return redis.cluster.RedisCluster(host=host, port=int(port), password=password)


@pytest.mark.timeout(180)
def test_a_worker_killed_mid_slice_loses_that_slice_and_never_the_document(
    any_stack: Stack,
) -> None:
    # On one Redis and on a Redis Cluster: every step a script over one shard's keys.
    stack = any_stack
    state = state_client(stack)
    api = started(stack, RELAY_SLICE_PAGES="2", RELAY_LEASE_SECONDS="2")
    doc = api.upload("long", long_scan(8), "scan.tif")
    doomed = worker(stack)
    api.process("long")
    shard = keyspace.shard_of_id("doc", doc["id"])
    assert shard is not None

    def mid_slice() -> list[bytes]:
        # A slice done, and one held by the worker (its lease).
        done = api.http.get(f"/documents/{doc['id']}").json()["pages_done"] or 0
        held = [m for m in state.zrange(keyspace.leases(shard), 0, -1) if b"#" in m]
        return held if done >= 2 and held else []

    [held] = wait_until(mid_slice, 60, 0.05, "no slice was under way")
    doomed.kill()  # SIGKILL: its slice's lease is left to expire
    before = api.http.get(f"/documents/{doc['id']}").json()
    assert before["status"] == "processing"
    worker(stack)
    wait_until(lambda: api.batch("long")["all_done"], 90, 0.1, "the document was not finished")
    final = api.http.get(f"/documents/{doc['id']}").json()
    assert final["status"] == "succeeded", final
    check_result(api, "long", 8)
    # The document was claimed once: only the lost slice was handed out again.
    assert state.hget(keyspace.doc(shard, doc["id"]), "claims") == b"1"
    detector = next(p for p in stack.procs if p.name == "detector")
    assert "document lease expired" in detector.tail(20_000), detector.tail()
    print(f"the slice lost with the worker: {held.decode()}; {before['pages_done']} pages kept")
    state.close()
