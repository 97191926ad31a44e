"""Redis full: ``maxmemory`` reached (noeviction) while the API, a worker and the detector run
and clients keep writing and polling. Writes answer 503 ``store_full``, reads stay 200,
nothing answers 500, every process stays up, and once memory is freed new batches (and the
document whose outcome could not be stored meanwhile) are processed and notified."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis

from relay.devtools.processes import Proc, Stack
from tests.support.helpers import RedisFactory, wait_until
from tests.support.receiver import Receiver

CSV = b"sku,qty\nA-1,2\n"


@dataclass
class Traffic:
    """A client that keeps uploading, processing, registering and polling, recording every
    answer as (what, status, error type)."""

    http: httpx.Client
    hook: dict[str, str]
    answers: list[tuple[str, int, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def note(self, what: str, r: httpx.Response) -> httpx.Response:
        kind = r.json().get("error", {}).get("type", "") if r.status_code >= 400 else ""
        self.answers.append((what, r.status_code, kind))
        return r

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            name = f"traffic-{i}"
            up = self.note(
                "upload",
                self.http.post(
                    "/documents", files={"file": ("a.csv", CSV)}, data={"batch_name": name}
                ),
            )
            if up.status_code == 201:
                self.note("webhook", self.http.put(f"/batches/{name}/webhook", json=self.hook))
                self.note("process", self.http.post(f"/batches/{name}/process"))
                self.note("document", self.http.get(f"/documents/{up.json()['id']}"))
            self.note("batch", self.http.get("/batches/t0"))
            self.note("results", self.http.get("/batches/t0/results"))
            self.note("list", self.http.get("/batches"))
            i += 1
            self.stop.wait(0.05)


def client(stack: Stack, account: str) -> httpx.Client:
    key = stack.create_key(account)
    return httpx.Client(
        base_url=stack.api_url + "/api/v1",
        headers={"authorization": f"Bearer {key}"},
        timeout=10,
    )


def upload(http: httpx.Client, batch: str, content: bytes = CSV) -> str:
    r = http.post("/documents", files={"file": ("a.csv", content)}, data={"batch_name": batch})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def assert_store_full(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.json()["error"]["type"] == "store_full"
    assert int(r.headers["retry-after"]) >= 1


@pytest.mark.timeout(180)
def test_a_full_redis_refuses_writes_and_everything_carries_on(
    redis_factory: RedisFactory, tmp_path: Path
) -> None:
    server = redis_factory()
    admin = redis.Redis.from_url(server.url)
    stack = Stack(
        redis_url=server.url,
        tmp=tmp_path,
        env={
            "RELAY_EXTRACTOR": "tests.support.slow_extractor:extract",
            "RELAY_ACCOUNT_UPLOAD_RATE_LIMIT": "100000/minute",
            "RELAY_ACCOUNT_PROCESS_RATE_LIMIT": "100000/minute",
        },
    )
    receiver = Receiver()
    hook = {"url": receiver.url("/hook")}
    procs: list[Proc] = [stack.api(), stack.worker(), stack.detector()]
    acme, globex = client(stack, "acme"), client(stack, "globex")
    traffic = Traffic(client(stack, "acme"), hook)
    thread = threading.Thread(target=traffic.run, daemon=True)
    with receiver, acme, globex:
        try:
            # Before: everything works (t0, which the traffic polls, is done).
            upload(acme, "t0")
            assert acme.put("/batches/t0/webhook", json=hook).status_code == 201
            assert acme.post("/batches/t0/process").status_code == 202
            wait_until(lambda: receiver.received("/hook"), 30, message="no first webhook")
            upload(globex, "g1")
            # A document whose outcome is due while Redis is full: it must not be lost.
            inflight = upload(acme, "inflight", b"sleep=2\n" + CSV)
            late_hook = {"url": receiver.url("/late")}
            assert acme.put("/batches/inflight/webhook", json=late_hook).status_code == 201
            assert acme.post("/batches/inflight/process").status_code == 202
            wait_until(
                lambda: acme.get(f"/documents/{inflight}").json()["status"] == "processing",
                20,
                message="the slow document was never claimed",
            )
            thread.start()
            time.sleep(1.0)

            admin.config_set("maxmemory", 1)  # far below what is used: every write refused
            time.sleep(1.0)
            assert_store_full(upload_response(acme, "full-1"))
            # g1's document is handed out (a no-op write proceeds), its job is not: 503.
            assert_store_full(globex.post("/batches/g1/process"))
            assert_store_full(globex.put("/batches/g1/webhook", json=hook))
            for path in ("/batches/t0", f"/documents/{inflight}", "/batches/t0/results"):
                assert acme.get(path).status_code == 200, path
            assert acme.get("/batches").status_code == 200
            assert acme.get("/batches/t0/webhook/deliveries").status_code == 200
            # Long enough for the worker's finish (after 2 s of extraction, retried for
            # half the 3 s lease) to give up and the lease to expire under the sweeper.
            time.sleep(6.0)
            assert all(p.alive for p in procs), stack.logs()

            admin.config_set("maxmemory", 0)
            time.sleep(1.0)
            traffic.stop.set()
            thread.join(15)
            assert not thread.is_alive()

            # After: new batches are processed and notified.
            upload(acme, "after")
            late_hook = {"url": receiver.url("/after")}
            assert acme.put("/batches/after/webhook", json=late_hook).status_code == 201
            assert acme.post("/batches/after/process").status_code == 202
            wait_until(lambda: receiver.received("/after"), 30, message="no webhook after")
            # The document whose outcome could not be stored came back through its lease.
            wait_until(lambda: receiver.received("/late"), 60, message="inflight lost")
            late = acme.get(f"/documents/{inflight}").json()
            assert late["status"] == "succeeded", late
            assert all(p.alive for p in procs), stack.logs()
        except BaseException:
            print(stack.logs())
            raise
        finally:
            traffic.stop.set()
            if thread.is_alive():
                thread.join(15)
            traffic.http.close()
            stack.close()
            admin.close()

    statuses = {status for _, status, _ in traffic.answers}
    assert 500 not in statuses and statuses <= {200, 201, 202, 503}, traffic.answers
    refused = [(what, kind) for what, status, kind in traffic.answers if status == 503]
    assert refused, "the traffic never met the full store"
    assert {kind for _, kind in refused} == {"store_full"}
    assert {what for what, _ in refused} <= {"upload", "webhook", "process"}, refused
    reads = [status for what, status, _ in traffic.answers if what in {"batch", "results", "list"}]
    assert set(reads) == {200}
    # Each process said why it was waiting (the API logs every store_full answer).
    api_log, worker_log, detector_log = (p.log.read_text(errors="replace") for p in procs)
    assert "store full (maxmemory)" in api_log and "unhandled error" not in api_log
    assert "redis is full (maxmemory reached)" in worker_log
    assert "redis is full (maxmemory reached)" in detector_log


def upload_response(http: httpx.Client, batch: str) -> httpx.Response:
    return http.post("/documents", files={"file": ("a.csv", CSV)}, data={"batch_name": batch})
