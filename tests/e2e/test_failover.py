"""Sentinel failover under load: relay (API, worker, detector as processes, the CLI too) runs
against a primary, a replica and three Sentinels; the primary is SIGKILLed while every batch's
notification is pending a retry. Within 15 s the API answers again, every pending notification
is still delivered, and new work is processed and notified on the new primary."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from relay.devtools.processes import Stack
from tests.e2e.client import Api, close_all
from tests.support.helpers import wait_until
from tests.support.receiver import Receiver, Reply
from tests.support.sentinels import Topology

BATCHES = 12
FAILURES = 4  # each receiver path answers 500 this many times, then 200


def _counter(api_url: str, name: str) -> float:
    text = httpx.get(api_url + "/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return 0.0


@pytest.mark.timeout(150)
def test_relay_follows_a_sentinel_failover(sentinel_topology: Topology, tmp_path: Path) -> None:
    assert sentinel_topology.replica is not None
    old_primary, replica = sentinel_topology.primary.port, sentinel_topology.replica.port
    stack = Stack(
        redis_url=sentinel_topology.url,
        tmp=tmp_path,
        env={
            **sentinel_topology.settings,
            "RELAY_REDIS_WAIT_REPLICAS": "1",
            "RELAY_REDIS_WAIT_TIMEOUT_MS": "300",
            "RELAY_RETRY_SCHEDULE": ",".join(["1"] * 12),
            "RELAY_LOG_LEVEL": "warning",
        },
    )
    receiver = Receiver()
    names = [f"f{i:02d}" for i in range(BATCHES)]
    for name in names:
        receiver.script(f"/{name}", [Reply(500)] * FAILURES + [Reply(200)])
    with receiver:
        try:
            stack.api()
            stack.worker()
            stack.detector()
            api = Api(stack.api_url, stack.create_key("failover"))  # the CLI, via Sentinel
            for name in names:
                api.upload(name, b"sku,qty\nA,1\n")
                assert api.register(name, receiver.url(f"/{name}")).status_code == 201
                api.process(name)
            # Acknowledged with the replica in step: no wait timed out so far.
            assert _counter(stack.api_url, "relay_replica_wait_timeouts_total") == 0
            # Each batch's upload, registration and process call, and the CLI's key.
            assert _counter(stack.api_url, "relay_replica_waits_total") == 3 * BATCHES + 1

            # Every notification has failed at least once and none is accepted: all pending.
            wait_until(
                lambda: all(receiver.received(f"/{n}") for n in names),
                30,
                0.1,
                "not every batch was attempted",
            )
            assert not receiver.accepted()

            killed_at = time.monotonic()
            sentinel_topology.primary.kill()

            def answers() -> bool:
                try:
                    status = api.http.get(f"/batches/{names[0]}").status_code
                    listing = api.http.get("/batches").status_code
                except httpx.HTTPError:
                    return False
                return status == 200 and listing == 200

            wait_until(answers, 15, 0.1, "the API did not answer within 15 s of the kill")
            api_back = time.monotonic() - killed_at
            assert sentinel_topology.current_primary() == replica != old_primary

            def delivered() -> set[str]:
                return {json.loads(r.body)["data"]["batch_name"] for r in receiver.accepted()}

            wait_until(lambda: delivered() >= set(names), 60, 0.2, "pending notifications lost")
            all_delivered = time.monotonic() - killed_at
            for name in names:
                batch = api.batch(name)
                assert batch["all_done"] is True and batch["status"] == "succeeded", batch

            # New work on the new primary (which has no replica now: the wait times out).
            # While a Sentinel still reports the failover in progress (longer on a busy
            # machine) a write is refused with 503 (relay/redis/replicas.py): retried, as a client
            # does, until the failover is over.
            def accepted(send: Callable[[], httpx.Response], code: int) -> None:
                def sent() -> bool:
                    r = send()
                    assert r.status_code in (code, 503), r.text
                    return r.status_code == code

                wait_until(sent, 30, 0.5, "a write after the failover was never accepted")

            accepted(
                lambda: api.http.post(
                    "/documents",
                    files={"file": ("doc.csv", b"sku,qty\nB,2\n", "text/csv")},
                    data={"batch_name": "after"},
                ),
                201,
            )
            accepted(lambda: api.register("after", receiver.url("/after")), 201)
            accepted(lambda: api.http.post("/batches/after/process"), 202)
            wait_until(lambda: "after" in delivered(), 30, 0.2, "new work not notified")
            timeouts = _counter(stack.api_url, "relay_replica_wait_timeouts_total")
            assert timeouts == 3, timeouts
            on_new = sentinel_topology.client(replica)
            try:
                assert on_new.info("replication")["role"] == "master"
            finally:
                on_new.close()
            ids = [r.headers["webhook-id"] for r in receiver.accepted()]
            print(
                f"\nfailover: API answered again {api_back:.1f} s after the primary was "
                f"killed; all {BATCHES} pending notifications delivered {all_delivered:.1f} s "
                f"after; {len(ids) - len(set(ids))} duplicate deliveries; "
                f"{int(timeouts)} acknowledgements without a replica after the failover"
            )
            assert len(set(ids)) == BATCHES + 1  # nothing lost, one notification each
            api.close()
        except BaseException:
            print(stack.logs())
            print(sentinel_topology.logs())
            raise
        finally:
            close_all()
            stack.close()
            crashed = [p for p in stack.procs if p.popen.returncode not in (0, -9, -15)]
            assert not crashed, "a process died by itself: " + ", ".join(p.name for p in crashed)
