"""Faults of a Redis Cluster: a hung primary and the request deadline; then, under traffic
(``tests/e2e/traffic.py``: batch after batch, each notification answered 500 once, then 200,
so every one needs a retry): the slot of the busiest shard moved to another primary, and the
primary of the busiest shard SIGKILLed (its replica takes over). Afterwards every batch made
is ``all_done`` and its notification delivered: nothing lost."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from relay.devtools.cluster import Cluster
from relay.devtools.processes import Stack
from relay.redis import keyspace
from tests.e2e.traffic import Traffic
from tests.support.helpers import RedisFactory, wait_until
from tests.support.receiver import Receiver

BEFORE = 12  # batches made before the fault


def _start(stack: Stack, receiver: Receiver) -> Traffic:
    stack.env.update({"RELAY_RETRY_SCHEDULE": "0.5,1,1,1,1,1,1,1", "RELAY_LOG_LEVEL": "warning"})
    stack.api()
    stack.worker("--queues", "processing")
    stack.worker("--queues", "delivery")
    stack.detector()
    traffic = Traffic(stack.api_url, stack.create_key("acme"), receiver, poll_rate=10)
    traffic.batch_pause = 0.05
    traffic.start()
    wait_until(lambda: len(traffic.batches) >= BEFORE, 60, 0.2, "no traffic: " + stack.logs())
    return traffic


def _busiest() -> str:
    """The hash tag of the busiest shard: the one holding the account's event feed, which
    every completion of every batch appends to (plus the batches of its own)."""
    return keyspace.tag(keyspace.events_shard("acme"))


def _nothing_lost(stack: Stack, traffic: Traffic, receiver: Receiver, tag: str) -> None:
    made = list(traffic.batches)
    assert not traffic.unexpected, traffic.unexpected

    def delivered() -> set[str]:
        return {r.path.lstrip("/") for r in receiver.accepted()}

    wait_until(
        lambda: delivered() >= set(made),
        90,
        0.3,
        f"notifications lost: {sorted(set(made) - delivered())}\n{stack.logs()}",
    )
    for name in made:
        r = traffic_get(stack, traffic, "/batches/" + name)
        assert r["all_done"] is True and r["counts"]["succeeded"] == 1, r
    # The feed, in the faulted shard, holds every completion once.
    feed = traffic_get(stack, traffic, "/events?limit=200")
    completed = [e["data"]["batch_name"] for e in feed["events"] if e["type"] == "batch.completed"]
    assert sorted(completed) == sorted(made)


def traffic_get(stack: Stack, traffic: Traffic, path: str) -> dict[str, Any]:
    r = httpx.get(
        f"{stack.api_url}/api/v1{path}",
        headers={"authorization": f"Bearer {traffic.key}"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.mark.timeout(300)
def test_the_busiest_shards_slot_moves_to_another_primary_during_traffic(
    cluster_stack: Stack, cluster: Cluster, receiver: Receiver
) -> None:
    traffic = _start(cluster_stack, receiver)
    try:
        tag = _busiest()
        owner = cluster.owner(tag)
        target = next(n for n in cluster.primaries() if n.port != owner.port)
        moved = cluster.move_slot(tag, target)
        assert moved > 0 and cluster.owner(tag).port == target.port
        made = len(traffic.batches)
        wait_until(lambda: len(traffic.batches) >= made + BEFORE, 60, 0.2, "traffic stopped")
    finally:
        traffic.stop()
    print(f"\nslot of {tag} moved {owner.port} -> {target.port}: {moved} keys")
    _nothing_lost(cluster_stack, traffic, receiver, tag)


@pytest.mark.timeout(300)
def test_the_busiest_shards_primary_is_killed_during_traffic(
    cluster_stack: Stack, cluster: Cluster, receiver: Receiver
) -> None:
    cluster_stack.env.update(
        {"RELAY_REDIS_WAIT_REPLICAS": "1", "RELAY_REDIS_WAIT_TIMEOUT_MS": "300"}
    )
    traffic = _start(cluster_stack, receiver)
    try:
        tag = _busiest()
        owner = cluster.owner(tag)
        owner.kill()
        cluster.wait_ok(30)
        assert cluster.owner(tag).port != owner.port
        made = len(traffic.batches)
        wait_until(lambda: len(traffic.batches) >= made + BEFORE, 60, 0.2, "traffic stopped")
    finally:
        traffic.stop()
    _nothing_lost(cluster_stack, traffic, receiver, tag)


@pytest.mark.timeout(120)
def test_a_request_to_a_hung_cluster_primary_is_answered_503_at_its_deadline(
    redis_factory: RedisFactory, tmp_path: Path
) -> None:
    """RELAY_REQUEST_DEADLINE on a Cluster: a request whose slot's primary hangs (SIGSTOP) is
    answered 503 within the deadline (+1 s), not at the 5 s reply timeout; after SIGCONT it
    is answered again. (Three primaries without replicas, half the nodes to start: what is
    measured is the client's wait, not a failover; a second after the primary hangs, the
    others see it fail and answer CLUSTERDOWN, a 503 too.)"""
    cluster = Cluster(tmp_path / "cluster", replicas=0)
    stack = Stack(
        redis_url=cluster.url,
        tmp=tmp_path,
        env={
            "RELAY_REDIS_CLUSTER_NODES": cluster.nodes_setting,
            "RELAY_QUEUE_REDIS_URL": redis_factory().url,
            "RELAY_REQUEST_DEADLINE": "1",
            "RELAY_LOG_LEVEL": "warning",
        },
    )
    try:
        cluster.start()
        stack.api()
        _hung_primary(stack, cluster, deadline=1.0)
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.close()
        cluster.close()


def _hung_primary(stack: Stack, cluster: Cluster, deadline: float) -> None:
    auth = {"authorization": f"Bearer {stack.create_key('acme')}"}

    hung = cluster.owner(keyspace.tag(keyspace.shard_for_batch("acme", "b1")))
    assert hung.pid is not None
    pid = hung.pid
    # /batches/b1 reads b1's shard (on ``hung``); /batches reads every shard.
    paths = ("/api/v1/batches/b1", "/api/v1/batches")
    with httpx.Client(base_url=stack.api_url, headers=auth, timeout=30) as http:
        for path in paths:  # connected to every node, the slot table known
            assert http.get(path).status_code in (200, 404), path
        os.kill(pid, signal.SIGSTOP)
        try:
            for path in paths:
                start = time.monotonic()
                r = http.get(path)
                took = time.monotonic() - start
                print(f"\n{path} with its primary hung: {r.status_code} in {took:.2f} s")
                assert r.status_code == 503, (path, r.text)
                assert took < deadline + 1, (path, took)
        finally:
            os.kill(pid, signal.SIGCONT)
        start = time.monotonic()
        for path in paths:
            wait_until(
                lambda path=path: http.get(path).status_code != 503,  # type: ignore[misc]
                60,
                0.2,
                f"{path} not answered after SIGCONT: " + stack.logs(),
            )
        print(f"answered again {time.monotonic() - start:.2f} s after SIGCONT")
