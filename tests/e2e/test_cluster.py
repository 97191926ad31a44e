"""End to end on a Redis Cluster (``RELAY_REDIS_CLUSTER_NODES``, three primaries with a replica
each) with RQ's queues on a plain Redis (``RELAY_QUEUE_REDIS_URL``): real API, workers and
detector processes, a real receiver.

The whole lifecycle: uploads into batches of every primary, status endpoints, processing,
webhooks delivered first time, after a retry, and failed then recovered by the CLI; the
delivery search, the event feed, the console's cross-shard reads. Retention purging every
batch and leaving no batch key on any node: tests/e2e/test_shards.py (on a Cluster, for batches
of 16 and of 64 shards)."""

from __future__ import annotations

import re
from typing import Any

import httpx

from relay.devtools.cluster import Cluster
from relay.devtools.processes import Stack
from relay.redis import keyspace
from tests.e2e.client import Api
from tests.support.helpers import wait_until
from tests.support.receiver import Receiver, Reply

CSV = b"sku,qty\nA-1,2\nB-7,5\n"


def _batches_on_every_primary(cluster: Cluster, account: str, count: int) -> list[str]:
    """``count`` batch names whose shards lie on every primary of the cluster, in turn."""
    owners: dict[int, list[str]] = {}
    for i in range(200):
        name = f"b{i}"
        shard = keyspace.shard_for_batch(account, name)
        owners.setdefault(cluster.owner(keyspace.tag(shard)).port, []).append(name)
    assert len(owners) == 3, owners  # the 16 shards are spread over the three primaries
    names: list[str] = []
    while len(names) < count:
        for found in owners.values():
            if found and len(names) < count:
                names.append(found.pop(0))
    return names


def _status(api: Api, batch: str) -> dict[str, Any]:
    return api.batch(batch)


def test_the_whole_lifecycle_on_a_cluster(
    cluster_stack: Stack, cluster: Cluster, receiver: Receiver
) -> None:
    stack = cluster_stack
    stack.api()
    stack.worker("--queues", "processing")
    stack.worker("--queues", "delivery")
    stack.detector()
    api = Api(stack.api_url, stack.create_key("acme"))
    names = _batches_on_every_primary(cluster, "acme", 6)
    ok, flaky, dead = names[:4], names[4], names[5]
    receiver.script("/flaky", [Reply(500), Reply(200)])
    receiver.script("/dead", [Reply(500)])
    docs: list[str] = []
    for name in names:
        for _ in range(3):
            docs.append(api.upload(name, CSV)["id"])
        path = "/flaky" if name == flaky else "/dead" if name == dead else f"/ok/{name}"
        assert api.register(name, receiver.url(path)).status_code == 201
    # The status endpoints read the Cluster (redis-py's cluster pipeline, not the lane).
    assert api.http.get(f"/documents/{docs[0]}").json()["status"] == "queued"
    listed = api.http.get("/batches", params={"limit": 100}).json()
    assert {b["batch_name"] for b in listed["batches"]} == set(names)
    for name in names:
        api.process(name)

    def all_done() -> bool:
        return all(_status(api, n)["all_done"] for n in names)

    wait_until(all_done, 60, 0.2, "batches did not finish: " + stack.logs())
    for name in names:
        batch = _status(api, name)
        assert batch["counts"]["succeeded"] == 3, batch
    results = api.http.get(f"/batches/{names[0]}/results").json()
    assert len(results["documents"]) == 3
    assert results["documents"][0]["line_items"], results

    # Delivered: first time, after one retry, and one failing for good.
    def each_delivered() -> bool:
        return all(receiver.received(f"/ok/{n}") for n in ok)

    wait_until(each_delivered, 30, message="a batch's notification did not arrive")
    wait_until(lambda: len(receiver.received("/flaky")) == 2, 30, message="no retry")

    def dead_failed() -> bool:
        return [d["status"] for d in api.deliveries(dead)] == ["failed"]

    wait_until(dead_failed, 30, 0.2, "the dead receiver's delivery did not fail")
    flaky_delivery = wait_until(
        lambda: [d for d in api.deliveries(flaky) if d["status"] == "succeeded"], 10
    )[0]
    assert len(flaky_delivery["attempts"]) == 2

    # The delivery search reads every shard of every primary.
    found = api.http.get("/deliveries", params={"status": "succeeded"}).json()
    assert {d["batch_name"] for d in found["deliveries"]} == {*ok, flaky}
    failed = api.http.get("/deliveries", params={"status": "failed"}).json()
    assert [d["batch_name"] for d in failed["deliveries"]] == [dead]

    # Recovery through the CLI (its wake-up goes to the queues' Redis).
    receiver.script("/dead", [Reply(200)])
    done = stack.cli("deliveries", "recover", "--since", "1h")
    assert done.returncode == 0, done.stderr
    assert "1 delivery(ies) recovered" in done.stdout

    def dead_delivered() -> bool:
        return [d["status"] for d in api.deliveries(dead)] == ["succeeded"]

    wait_until(dead_delivered, 30, 0.2, "the recovered delivery was not made")

    # The event feed holds every completion once, in the account's one stream.
    feed = api.http.get("/events", params={"limit": 100}).json()
    completed = [e["data"]["batch_name"] for e in feed["events"] if e["type"] == "batch.completed"]
    assert sorted(completed) == sorted(names)

    # The operators' cross-shard gauges (queue depths from the queues' Redis).
    metrics = api.http.get(stack.api_url + "/metrics").text
    assert 'relay_documents_processed_total{status="succeeded"} 18' in metrics.splitlines()
    assert api.http.get(stack.api_url + "/readyz").status_code == 200

    # The console: every page reads across the shards of every primary.
    done = stack.cli("keys", "create", "--operator", "ops")
    assert done.returncode == 0, done.stderr
    operator_key = done.stdout.strip().splitlines()[-1]
    with httpx.Client(base_url=stack.api_url, timeout=30) as console:
        form = console.get("/console/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        r = console.post("/console/login", data={"key": operator_key, "csrf": csrf.group(1)})
        assert r.status_code == 303 and r.headers["location"] == "/console", r.text
        for page in ("/console", "/console/deliveries", "/console/webhooks", "/console/events"):
            r = console.get(page, params={"account": "acme"} if "events" in page else None)
            assert r.status_code == 200, (page, r.text[:500])
        listing = console.get("/console/deliveries", params={"status": "succeeded"}).text
        assert flaky_delivery["id"] in listing
    api.close()
