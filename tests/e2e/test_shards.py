"""End to end: a deployment raises RELAY_SHARDS from 16 to 64 (a rolling restart: an API on 16
stays up beside the processes on 64 and follows the raise) and what was written under 16
shards keeps working: status, results, processing, notification,
the delivery search, recovery, the event feed and retention; new batches spread over the 64.
On a Redis Cluster, where raising the count matters (the same code runs on one Redis; the
Cluster adds batches looked for across slots); retention leaves no batch key on any node."""

from __future__ import annotations

import time
import zlib
from urllib.parse import urlsplit

import redis
import redis.cluster

from relay.devtools.cluster import Cluster, batch_keys
from relay.devtools.processes import Stack, stop_all
from relay.redis import keyspace, shards
from tests.e2e.client import Api
from tests.support.helpers import wait_until
from tests.support.receiver import Receiver, Reply

CSV = b"sku,qty\nA-1,2\nB-7,5\n"


def _moving(account: str, count: int) -> list[str]:
    """Batch names whose shard under 64 is not their shard under 16 (so only a lookup under
    the old count finds them), with distinct shards."""
    names: dict[int, str] = {}
    for i in range(1000):
        h = zlib.crc32(f"{account}\x00old{i}".encode())
        if h % 64 >= 16 and h % 16 not in names:
            names[h % 16] = f"old{i}"
    return list(names.values())[:count]


def _start(stack: Stack) -> None:
    stack.api()
    stack.worker()
    stack.detector()


def _client(stack: Stack) -> redis.cluster.RedisCluster:
    """A client of the stack's Cluster."""
    host, port = stack.env["RELAY_REDIS_CLUSTER_NODES"].split(",")[0].rsplit(":", 1)
    password = urlsplit(stack.redis_url).password
    return redis.cluster.RedisCluster(host=host, port=int(port), password=password)


def test_data_written_under_16_shards_works_after_raising_to_64(
    cluster_stack: Stack, cluster: Cluster, receiver: Receiver
) -> None:
    stack = cluster_stack
    stack.env["RELAY_SHARDS_DELAY"] = "1s"
    _start(stack)
    api = Api(stack.api_url, stack.create_key("acme"))
    done, failing, later = _moving("acme", 3)
    for name in (done, failing, later):
        api.upload(name, CSV)
        assert api.register(name, receiver.url(f"/{name}")).status_code == 201
    receiver.script(f"/{failing}", [Reply(500)] * 4)  # every attempt of its delivery
    later_doc = api.upload(later, CSV)["id"]
    assert keyspace.shard_of_id("doc", later_doc) in range(16)
    api.process(done)
    api.process(failing)
    wait_until(lambda: receiver.received(f"/{done}"), 30, 0.2, "not delivered")

    def failed() -> bool:
        return [d["status"] for d in api.deliveries(failing)] == ["failed"]

    wait_until(failed, 30, 0.2, "the failing delivery did not fail")
    key = api.http.headers["authorization"].removeprefix("Bearer ")

    # A rolling restart with 64 shards: the worker and detector restarted, a second API
    # started; the first API, still on 16, stays up until the end (it follows the counts).
    old_api, old_procs = api, list(stack.procs)
    stop_all(old_procs[1:])
    stack.procs[:] = old_procs[:1]
    stack.env["RELAY_SHARDS"] = "64"
    _start(stack)
    api = Api(stack.api_url, key)

    # Status and results of batches written under 16 shards.
    assert api.batch(done)["all_done"] is True
    assert api.http.get(f"/batches/{done}/results").json()["documents"][0]["line_items"]
    assert api.http.get(f"/documents/{later_doc}").json()["status"] == "queued"
    listed = api.http.get("/batches", params={"limit": 100}).json()["batches"]
    assert {b["batch_name"] for b in listed} == {done, failing, later}

    # Processing and notification of a batch uploaded under 16 shards; one more upload into
    # it lands in the batch's own shard.
    more = api.upload(later, CSV)["id"]
    assert keyspace.shard_of_id("doc", more) == keyspace.shard_of_id("doc", later_doc)
    api.process(later)
    wait_until(lambda: receiver.received(f"/{later}"), 30, 0.2, "not delivered after the raise")
    assert api.batch(later)["counts"]["succeeded"] == 3

    # The delivery search, and the recovery of a delivery that failed under 16 shards.
    found = api.http.get("/deliveries", params={"batch_name": done}).json()["deliveries"]
    assert [d["status"] for d in found] == ["succeeded"]
    # A delivery made under 16 shards sent again by hand.
    r = api.http.post(f"/batches/{done}/webhook/deliveries/{found[0]['id']}/retry")
    assert r.status_code == 202, r.text
    wait_until(lambda: len(receiver.received(f"/{done}")) == 2, 30, 0.2, "not sent again")
    receiver.script(f"/{failing}", [Reply(200)])
    recovered = stack.cli("deliveries", "recover", "--since", "1h")
    assert recovered.returncode == 0, recovered.stderr
    assert "1 delivery(ies) recovered" in recovered.stdout

    def recovered_delivered() -> bool:
        return [d["status"] for d in api.deliveries(failing)] == ["succeeded"]

    wait_until(recovered_delivered, 30, 0.2, "the recovered delivery was not made")

    # New batches spread over the 64 shards once the count is in force (1 s after the first
    # process with it started).
    client = _client(stack)
    recorded = shards.load(client)
    assert recorded is not None and recorded.total == 64
    wait_until(lambda: time.time() * 1000 >= dict(recorded.counts)[64], 10, 0.1, "not in force")
    keyspace.use(recorded)
    try:
        fresh = [f"new{i}" for i in range(40) if keyspace.shard_for_batch("acme", f"new{i}") >= 16]
    finally:
        keyspace.use(keyspace.ShardMap())
    # Through the API process started with 16: it followed the raise.
    shard = keyspace.shard_of_id("doc", old_api.upload(fresh[0], CSV)["id"])
    assert shard is not None and shard >= 16
    assert api.batch(fresh[0])["counts"]["queued"] == 1  # one batch, whichever API asks
    old_api.close()
    assert api.register(fresh[0], receiver.url("/fresh")).status_code == 201
    api.process(fresh[0])
    wait_until(lambda: receiver.received("/fresh"), 30, 0.2, "new shard not delivered")
    feed = api.http.get("/events", params={"limit": 100}).json()["events"]
    completed = [e["data"]["batch_name"] for e in feed if e["type"] == "batch.completed"]
    assert sorted(completed) == sorted([done, failing, later, fresh[0]])

    # Retention purges batches of either count (a detector with a short retention).
    stack.detector(RELAY_RETENTION="1s")
    names = [done, failing, later, fresh[0]]

    def purged() -> bool:
        return all(api.http.get(f"/batches/{n}").status_code == 404 for n in names)

    wait_until(purged, 40, 0.3, "the batches were not purged")
    wait_until(lambda: not batch_keys(cluster), 10, 0.3, "batch keys left behind")
    client.close()
    api.close()
