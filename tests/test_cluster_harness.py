"""The test Cluster itself: three primaries own every slot, a replica takes over a killed
primary's slots, and a script runs where its keys' slot lives."""

from __future__ import annotations

import asyncio
import shutil
import socket
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from redis.cluster import ClusterNode, RedisCluster

from relay.config import Settings, load_settings
from relay.crypto import Encryptor, generate_key
from relay.devtools.cluster import PASSWORD, Cluster, probe
from relay.devtools.redis_server import HOST
from relay.redis import keyspace
from relay.redis.clients import RedisTarget, async_client, is_cluster, sync_client
from relay.state.blobs import BlobStore
from relay.state.reencrypt import reencrypt
from relay.state.scripts import AsyncScripts, Scripts
from relay.state.signing_material import SigningKeys
from relay.state.store import AsyncStore
from relay.state.webhooks_core import Call, Round, run, run_async, script

pytestmark = pytest.mark.skipif(shutil.which("redis-cli") is None, reason="needs redis-cli")


def test_three_primaries_own_every_slot_and_a_replica_takes_over(cluster: Cluster) -> None:
    assert len(cluster.primaries()) == 3
    client = RedisCluster(
        startup_nodes=[ClusterNode(HOST, n.port) for n in cluster.nodes], password=PASSWORD
    )
    try:
        client.set("relay:{r3}:x", b"1")
        script = client.register_script("return redis.call('GET', KEYS[1])")
        assert script(keys=["relay:{r3}:x"]) == b"1"
        owner = cluster.owner("relay:{r3}:x")
        owner.kill()
        cluster.wait_ok(30)
        assert owner not in cluster.primaries()
        assert len(cluster.primaries()) == 3
    finally:
        client.close()


def test_a_node_whose_bus_port_is_taken_starts_on_another_pair(tmp_path: Path) -> None:
    """The free-port check is only a look: a bus port taken between the pick and the bind
    (another test's server, an outgoing connection) costs the node its pair, not the test."""
    c = Cluster(tmp_path, primaries=1, replicas=0)
    first = c.nodes[0].port
    squatter = socket.socket()
    try:
        squatter.bind((HOST, first + 10_000))
        squatter.listen()
        c.start()
        assert c.nodes[0].port != first
        assert c.nodes[0].running
        node = probe(c.nodes[0].port)
        try:
            assert node.cluster("info")["cluster_state"] == "ok"
        finally:
            node.close()
    finally:
        squatter.close()
        c.close()


def _settings(cluster: Cluster) -> Settings:
    """relay's settings for the harness's Cluster (its queues nowhere: unused here)."""
    return load_settings(
        {
            "RELAY_REDIS_URL": cluster.url,
            "RELAY_REDIS_CLUSTER_NODES": cluster.nodes_setting,
            "RELAY_QUEUE_REDIS_URL": "redis://127.0.0.1:1/0",
        },
        dotenv=None,
    )


def _round() -> Generator[Round, list[Any], list[Any]]:
    replies = yield [
        script("ratelimit", [keyspace.rate_window("p1")], [60_000, 5, "m1"]),
        Call("get", (keyspace.waiting(3),)),
        script("ratelimit", [keyspace.account_rate_window("uploads", "acme")], [60_000, 5, "m2"]),
    ]
    return replies


def test_the_stores_rounds_run_scripts_a_node_has_never_seen(cluster: Cluster) -> None:
    """redis-py's cluster pipeline does not load a script a node lacks (a promoted replica
    starts with none): relay's rounds run each script on its own, which does."""
    settings = _settings(cluster)
    target = RedisTarget.from_settings(settings)
    client = sync_client(target)
    try:
        assert is_cluster(client)
        client.set(keyspace.waiting(3), b"7")
        client.script_flush()  # on every primary
        replies = run(client, Scripts(client), _round())
        assert replies[0][0] == 1 and replies[1] == b"7" and replies[2][0] == 1

        async def on_asyncio() -> list[Any]:
            aclient = async_client(target)
            try:
                await aclient.script_flush()
                return await run_async(aclient, AsyncScripts(aclient), _round())
            finally:
                await aclient.aclose()

        replies = asyncio.run(on_asyncio())
        assert replies[0][0] == 1 and replies[1] == b"7" and replies[0][1] == 3  # 2 of 5 used
    finally:
        client.close()


def test_reencrypt_walks_every_primary(cluster: Cluster) -> None:
    settings = _settings(cluster)
    client = sync_client(RedisTarget.from_settings(settings))
    accounts = {f"acct-{i:02d}" for i in range(20)}
    key_a, key_b = generate_key(), generate_key()
    try:
        stored = SigningKeys(Encryptor([key_a])).for_accounts(client, accounts)
        assert len({cluster.owner(keyspace.signing(a)).port for a in accounts}) == 3
        report = reencrypt(client, Encryptor([key_b, key_a]), batch=3)
        assert (report.keys, report.reencrypted, report.unreadable) == (20, 20, [])
        again = SigningKeys(Encryptor([key_b])).for_accounts(client, accounts)
        assert {a: m[0].whsec for a, m in again.items()} == {
            a: m[0].whsec for a, m in stored.items()
        }
    finally:
        client.close()


def test_an_upload_holding_its_bytes_runs_on_a_node_without_the_script(cluster: Cluster) -> None:
    """The upload's one round trip (the script) carries on when the node has no script: it
    loads it; once the bytes held beyond the file's are given back (another node), the
    total is the files' bytes."""
    settings = _settings(cluster)
    target = RedisTarget.from_settings(settings)

    async def upload_twice() -> tuple[int, list[int], list[bytes]]:
        client = async_client(target)
        try:
            await client.script_flush()
            store = AsyncStore(client, BlobStore(""), max_pending_bytes=10_000)
            ref = await store.locate("acme", "b1")
            for content in (b"abc", b"defg"):
                await client.incrby(keyspace.account_pending_total("acme"), 100)  # the API's hold
                await store.upload(
                    ref,
                    filename="a.csv",
                    content_type="text/csv",
                    content=content,
                    held=100,
                    admitted=True,
                )
            await store.refunds.now()
            total = int(await client.get(keyspace.account_pending_total("acme")) or 0)
            docs = await client.lrange(keyspace.batch_docs(ref.shard, "acme", "b1"), 0, -1)
            return total, await store.pending_bytes("acme"), docs
        finally:
            await client.aclose()

    total, per_shard, docs = asyncio.run(upload_twice())
    assert total == sum(per_shard) == 7
    assert len(docs) == 2
