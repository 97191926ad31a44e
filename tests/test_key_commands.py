"""``relay keys`` (``relay.cli.keys``) as an operator runs it, a real subprocess: what a
created or revoked key means with ``RELAY_REDIS_WAIT_REPLICAS`` - on a real Sentinel
topology (a primary, a replica, three Sentinels), a key the command printed survives the
primary's SIGKILL right after it; one the replica did not confirm is said so (exit 3) and can
be lost."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import redis

from relay.cli.keys import NOT_CONFIRMED
from relay.config import load_settings
from relay.devtools.cluster import Cluster, probe
from relay.devtools.redis_server import HOST, RedisServer
from relay.redis import keyspace
from relay.redis.clients import RedisTarget, async_client, sync_client
from relay.redis.replicas import replicated
from relay.state import api_keys
from tests.support.helpers import relay_cli, wait_until
from tests.support.sentinels import PASSWORD, Topology


def _through_sentinel(topo: Topology, **more: str) -> dict[str, str]:
    """The settings of a CLI that finds the primary through the topology's Sentinels."""
    return {
        "RELAY_REDIS_URL": topo.url,
        **topo.settings,
        "RELAY_REDIS_WAIT_REPLICAS": "1",
        **more,
    }


def _key_of(out: str) -> str:
    key = out.strip().splitlines()[-1]
    assert api_keys.parse_key(key) is not None, out
    return key


def _failed_over(topo: Topology, started: float) -> float:
    """Wait (30 s at most) until the Sentinels name the replica; the seconds it took."""
    assert topo.replica is not None
    replica = topo.replica.port
    wait_until(lambda: topo.current_primary() == replica, 30, 0.1, "no failover: " + topo.logs())
    return time.monotonic() - started


def test_a_key_the_cli_created_survives_the_primarys_death_right_after(
    sentinel_topology: Topology,
) -> None:
    topo = sentinel_topology
    started = time.monotonic()
    made = relay_cli(None, "keys", "create", "--account", "acme", settings=_through_sentinel(topo))
    assert made.returncode == 0, made.stderr
    assert "warning" not in made.stderr, made.stderr
    key = _key_of(made.stdout)
    operator = relay_cli(
        None, "keys", "create", "--operator", "ops", settings=_through_sentinel(topo)
    )
    assert operator.returncode == 0, operator.stderr
    operator_key = _key_of(operator.stdout)
    # A revocation waits the same way.
    other = _key_of(
        relay_cli(
            None, "keys", "create", "--account", "other", settings=_through_sentinel(topo)
        ).stdout
    )
    revoked = relay_cli(
        None, "keys", "revoke", other.split("_")[1], settings=_through_sentinel(topo)
    )
    assert revoked.returncode == 0, revoked.stderr
    topo.primary.kill()  # SIGKILL, the moment the commands answered
    killed = time.monotonic()
    took = _failed_over(topo, killed)
    client = sync_client(topo.target())
    try:
        assert api_keys.lookup_key(client, key) == "acme"  # on the promoted replica
        assert api_keys.lookup_key(client, other) is None  # still revoked there
        assert api_keys.lookup_key(client, operator_key) is None  # an operator key opens no API
        infos = {i.prefix: i for i in api_keys.list_keys(client)}
        assert infos[operator_key.split("_")[1]].operator
        assert infos[other.split("_")[1]].revoked_at is not None
        # The account is listed too (relay.state.api_keys.written_keys: every key the command
        # wrote).
        assert client.sismember(keyspace.accounts(), "acme")
    finally:
        client.close()
    print(
        f"\nkeys created and revoked in {killed - started:.1f} s; new primary named "
        f"{took:.1f} s after the kill; the keys as the commands left them there"
    )
    assert time.monotonic() - started < 60


def test_a_key_the_replica_did_not_confirm_is_said_so_and_can_be_lost(
    sentinel_topology: Topology,
) -> None:
    """The same command while the replica lags: the key is printed (it works on the primary),
    stderr says it is not confirmed and the exit code is 3; the primary's death then takes
    it. What the warning warns of, shown."""
    topo = sentinel_topology
    assert topo.replica is not None and topo.replica.pid is not None
    replica = topo.replica
    started = time.monotonic()
    primary = redis.Redis(host=HOST, port=topo.primary.port, password=PASSWORD)
    assert replica.pid is not None
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        # More than the socket buffers hold: what follows stays in the primary's memory.
        filler = b"x" * (1024 * 1024)
        for i in range(48):
            primary.set(f"filler{i}", filler)
        made = relay_cli(
            None,
            "keys",
            "create",
            "--account",
            "acme",
            settings=_through_sentinel(topo, RELAY_REDIS_WAIT_TIMEOUT_MS="300"),
        )
        assert made.returncode == NOT_CONFIRMED, (made.returncode, made.stderr)
        key = _key_of(made.stdout)
        assert "relay: warning:" in made.stderr
        assert "did not confirm it within 300 ms" in made.stderr, made.stderr
        assert api_keys.lookup_key(primary, key) == "acme"  # it works, on the primary alone
        topo.primary.kill()
    finally:
        os.kill(replica.pid, signal.SIGCONT)
        primary.close()
    _failed_over(topo, time.monotonic())
    client = sync_client(topo.target())
    try:
        assert api_keys.lookup_key(client, key) is None  # lost with the primary, as warned
    finally:
        client.close()
    assert time.monotonic() - started < 60


# -- without replicas: the exit codes, on the test's single Redis ---------------------------


def test_without_the_replicas_asked_for_create_and_revoke_exit_3_and_say_so(
    redis_url: str, redis: redis.Redis
) -> None:
    lone = {"RELAY_REDIS_WAIT_REPLICAS": "1", "RELAY_REDIS_WAIT_TIMEOUT_MS": "100"}
    made = relay_cli(redis_url, "keys", "create", "--account", "acme", settings=lone)
    assert made.returncode == NOT_CONFIRMED, made.stderr
    key = _key_of(made.stdout)
    assert api_keys.lookup_key(redis, key) == "acme"
    prefix = key.split("_")[1]
    assert f"the key {prefix} is on the primary only" in made.stderr
    revoked = relay_cli(redis_url, "keys", "revoke", prefix, settings=lone)
    assert revoked.returncode == NOT_CONFIRMED, revoked.stderr
    assert revoked.stdout.strip() == f"revoked {prefix}"
    assert f"run `relay keys revoke {prefix}` again" in revoked.stderr
    assert api_keys.lookup_key(redis, key) is None
    # Not asked for (the default): no wait, exit 0.
    plain = relay_cli(redis_url, "keys", "create", "--account", "acme")
    assert plain.returncode == 0 and "warning" not in plain.stderr, plain.stderr
    # A revocation of no key is exit 1, whatever the setting.
    missing = relay_cli(redis_url, "keys", "revoke", "zzzzzzzz", settings=lone)
    assert missing.returncode == 1 and "no key with prefix" in missing.stderr


# -- on a Redis Cluster: the wait is made on the primary of every slot written --------------


def _replica_of(cluster: Cluster, primary: RedisServer) -> RedisServer:
    client = probe(primary.port)
    try:
        port = int(client.info("replication")["slave0"]["port"])
    finally:
        client.close()
    return next(n for n in cluster.nodes if n.port == port)


def test_on_a_cluster_the_cli_waits_on_the_primary_of_every_slot_it_wrote(
    cluster: Cluster,
) -> None:
    settings = {
        "RELAY_REDIS_URL": cluster.url,
        "RELAY_REDIS_CLUSTER_NODES": cluster.nodes_setting,
        "RELAY_QUEUE_REDIS_URL": "redis://127.0.0.1:1/0",  # unused by `relay keys`
        "RELAY_REDIS_WAIT_REPLICAS": "1",
        "RELAY_REDIS_WAIT_TIMEOUT_MS": "300",
    }
    made = relay_cli(None, "keys", "create", "--account", "acme", settings=settings)
    assert made.returncode == 0, made.stderr
    prefix = _key_of(made.stdout).split("_")[1]
    written = api_keys.written_keys(prefix)
    for key in written:
        # Each key's marker went to the primary holding that key, and expires.
        owner = cluster.owner(key)
        assert cluster.owner(keyspace.replica_wait_marker(key)).port == owner.port
        node = probe(owner.port)
        try:
            assert 0 < node.pttl(keyspace.replica_wait_marker(key)) <= 60_000
        finally:
            node.close()
    assert len({cluster.owner(k).port for k in written}) >= 2  # more than one primary waited on

    # The API's waits after a write of a key of no shard (signing material) use its slot too.
    async def signing_wait() -> bool:
        client = async_client(RedisTarget.from_settings(load_settings(settings, dotenv=None)))
        try:
            await client.hset(keyspace.signing("acme"), "current", "x")
            return await replicated(
                client, load_settings(settings, dotenv=None), "t", key=keyspace.signing("acme")
            )
        finally:
            await client.aclose()

    assert asyncio.run(signing_wait()) is True

    # The replica of one written slot's primary stopped: that wait falls short, exit 3.
    lagging = _replica_of(cluster, cluster.owner(keyspace.api_keys()))
    assert lagging.pid is not None
    os.kill(lagging.pid, signal.SIGSTOP)
    try:
        short = relay_cli(None, "keys", "create", "--account", "acme", settings=settings)
    finally:
        os.kill(lagging.pid, signal.SIGCONT)
    assert short.returncode == NOT_CONFIRMED, short.stderr
    assert "did not confirm it within 300 ms" in short.stderr
