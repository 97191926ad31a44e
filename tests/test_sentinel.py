"""Redis through Sentinel, on a real topology started by the test (a primary, a replica, three
Sentinels): the settings, every kind of relay client following a change of primary (a
demoted primary answering READONLY included), and what an acknowledged write means across a
failover (``RELAY_REDIS_WAIT_REPLICAS``)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError

from relay.config import Secret, load_settings
from relay.devtools.redis_server import HOST
from relay.exceptions import ConfigError
from relay.redis import keyspace
from relay.redis.clients import RedisTarget, async_client, sync_client
from relay.redis.replicas import TIMEOUTS, WAITS, replicated
from relay.redis.status_lane import Address, StatusLane
from relay.redis.status_target import SentinelLocate, lane_from_url, status_client
from tests.support.helpers import wait_until
from tests.support.sentinels import (
    PASSWORD,
    SENTINEL_PASSWORD,
    SERVICE,
    Topology,
)

# -- settings (no topology) -----------------------------------------------------------------


def test_sentinel_settings_parse_and_round_trip() -> None:
    s = load_settings(
        environ={
            "RELAY_REDIS_SENTINELS": "s1:26379, [::1]:26380,10.0.0.3:26381",
            "RELAY_REDIS_SENTINEL_SERVICE": "relay",
            "RELAY_REDIS_SENTINEL_PASSWORD": "pw",
        },
        dotenv=None,
    )
    assert s.redis_sentinels == (("s1", 26379), ("::1", 26380), ("10.0.0.3", 26381))
    assert s.redis_sentinel_password == Secret("pw") and "pw" not in repr(s)
    assert load_settings(environ=s.to_env(), dotenv=None) == s
    target = RedisTarget.from_settings(s)
    assert target.via_sentinel and target.service == "relay"
    assert target.sentinel_password == "pw" and "pw" not in repr(target)
    default = load_settings(environ={}, dotenv=None)
    assert default.redis_sentinels == () and default.redis_sentinel_service == SERVICE
    assert not RedisTarget.from_settings(default).via_sentinel
    assert default.redis_wait_replicas == 0


@pytest.mark.parametrize("bad", ["s1", "s1:", ":26379", "s1:port", "s1:0", "s1:70000"])
def test_a_bad_sentinel_list_is_refused_naming_the_setting(bad: str) -> None:
    with pytest.raises(ConfigError, match="RELAY_REDIS_SENTINELS"):
        load_settings(environ={"RELAY_REDIS_SENTINELS": bad}, dotenv=None)


def test_a_unix_url_cannot_go_through_sentinel() -> None:
    target = RedisTarget("unix:///tmp/redis.sock", sentinels=(("s1", 26379),))
    with pytest.raises(ConfigError, match="unix"):
        sync_client(target)
    with pytest.raises(ConfigError, match="unix"):
        lane_from_url(target.url, target=target)


# -- a real topology ------------------------------------------------------------------------


def _swap_roles(topo: Topology) -> int:
    """Make the replica the primary and the primary its replica by hand, then point the
    Sentinels at the new primary - without the CLIENT KILL a Sentinel-led failover sends,
    so connections to the old primary stay open and meet READONLY."""
    assert topo.replica is not None
    new, old = topo.replica.port, topo.primary.port
    with topo.client(new) as c:
        c.execute_command("REPLICAOF", "NO", "ONE")
    with topo.client(old) as c:
        c.execute_command("REPLICAOF", HOST, str(new))
    for port in topo.sentinel_ports:
        s = redis.Redis(host=HOST, port=port, password=SENTINEL_PASSWORD)
        try:
            s.execute_command("SENTINEL", "REMOVE", SERVICE)
            s.execute_command("SENTINEL", "MONITOR", SERVICE, HOST, str(new), "2")
            s.execute_command("SENTINEL", "SET", SERVICE, "auth-pass", PASSWORD)
        finally:
            s.close()
    wait_until(lambda: topo.current_primary() == new, 10, 0.1, "Sentinels did not switch")
    return new


def test_every_client_follows_a_demoted_primary_that_answers_readonly(
    sentinel_topology: Topology,
) -> None:
    target = sentinel_topology.target()
    sync = sync_client(target)
    old = sentinel_topology.primary.port

    async def run() -> None:
        aclient = async_client(target)
        lane = status_client(target, aclient)
        assert isinstance(lane, StatusLane)
        asked: list[int] = []
        locate = lane.locate
        assert isinstance(locate, SentinelLocate)

        async def counting() -> Address:
            address = await locate()
            asked.append(address.port)
            return address

        lane.locate = counting
        try:
            # Every client holds a connection to the primary before the change.
            assert sync.set("before", "1")
            assert await aclient.set("before-async", "1")
            pipe = lane.pipeline()
            pipe.execute_command("SET", "before-lane", "1")
            assert await pipe.execute() == [b"OK"]
            assert asked == [old]

            new = await asyncio.to_thread(_swap_roles, sentinel_topology)

            # The lane: READONLY, then the same round once more on the located primary.
            pipe = lane.pipeline()
            pipe.execute_command("SET", "after-lane", "1")
            assert await pipe.execute() == [b"OK"]
            assert asked == [old, new]
            # The API's client sends nothing twice: READONLY fails this one command...
            with pytest.raises(RedisConnectionError, match="now a slave"):
                await aclient.set("after-async", "1")
            # ...and the next goes to the new primary.
            assert await aclient.set("after-async", "2")
            # A worker's client retries: READONLY costs it nothing.
            assert sync.set("after", "1")
            with sentinel_topology.client(new) as c:
                assert c.mget("after", "after-async", "after-lane") == ["1", "2", "1"]
                assert c.info("replication")["role"] == "master"
            with sentinel_topology.client(old) as c:
                assert c.get("before") == "1" and c.info("replication")["role"] == "slave"
        finally:
            await lane.close()
            await locate.aclose()
            await aclient.aclose()
            sync.close()

    asyncio.run(run())


def test_acknowledged_writes_across_a_failover(sentinel_topology: Topology) -> None:
    """With RELAY_REDIS_WAIT_REPLICAS=1: a write a replica acknowledged survives the primary's
    death; one acknowledged after the wait timed out (the replica lagging) can be lost, and is
    counted."""
    assert sentinel_topology.replica is not None
    replica = sentinel_topology.replica
    target = sentinel_topology.target()
    settings = load_settings(
        environ={"RELAY_REDIS_WAIT_REPLICAS": "1", "RELAY_REDIS_WAIT_TIMEOUT_MS": "300"},
        dotenv=None,
    )
    filler = b"x" * (1024 * 1024)
    timings: dict[str, float] = {}

    async def run() -> None:
        client = async_client(target)
        try:
            await client.set("kept", "1")
            assert await replicated(client, settings, "kept") is True
            assert replica.pid is not None
            os.kill(replica.pid, signal.SIGSTOP)  # the replica lags
            try:
                # More than the socket buffers hold: what follows stays in the primary's
                # memory, which dies with it.
                for i in range(48):
                    await client.set(f"filler{i}", filler)
                await client.set("at-risk", "1")
                started = time.monotonic()
                assert await replicated(client, settings, "at-risk") is False
                timings["wait"] = time.monotonic() - started
                sentinel_topology.primary.kill()
                timings["killed"] = time.monotonic()
            finally:
                os.kill(replica.pid, signal.SIGCONT)
        finally:
            await client.aclose()

    asyncio.run(run())
    assert 0.25 <= timings["wait"] < 2, timings
    wait_until(
        lambda: sentinel_topology.current_primary() == replica.port,
        30,
        0.1,
        "no failover: " + sentinel_topology.logs(),
    )
    failover = time.monotonic() - timings["killed"]
    after = sync_client(target)
    try:
        assert after.get("kept") == b"1"
        assert after.get("at-risk") is None  # acknowledged, counted, and lost
        # The counters went where the writes went: the timeout's count died with them too.
        counts = after.hgetall(keyspace.metrics())
        assert int(counts.get(WAITS.encode(), b"0")) == 1
        assert counts.get(TIMEOUTS.encode()) is None
    finally:
        after.close()
    print(
        f"\nfailover: new primary named {failover:.1f} s after the kill; "
        "'kept' kept, 'at-risk' lost"
    )
