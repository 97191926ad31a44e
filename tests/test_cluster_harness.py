"""The test Cluster itself: three primaries own every slot, a replica takes over a killed
primary's slots, and a script runs where its keys' slot lives."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.cluster import ClusterNode, RedisCluster

from relay.redis_server import HOST
from tests.support.cluster import PASSWORD, Cluster

pytestmark = pytest.mark.skipif(shutil.which("redis-cli") is None, reason="needs redis-cli")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        c.start()
        yield c
    finally:
        c.close()


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
