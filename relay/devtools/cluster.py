"""A Redis Cluster on loopback for tests: three primaries, each with one replica.

The nodes are :class:`relay.devtools.redis_server.RedisServer` processes (AOF on, a password, every
node also authenticating to its primary) started with ``--cluster-enabled yes`` and a short
``cluster-node-timeout``, so a killed primary is replaced by its replica in a few seconds;
``redis-cli --cluster create`` (Debian's redis-tools, beside redis-server) assigns the slots.

A node's cluster bus listens 10,000 ports above its port. Both are picked below the kernel's
ephemeral range (``ip_local_port_range``, 32768 and up by default), where outgoing connections
take their local ports, and a node whose bind still loses a race to another test process is
started again on a new pair.
"""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path

import redis

from relay.devtools.cluster import log_tails, node_client
from relay.devtools.redis_server import HOST, RedisServer, RedisServerError, port_is_free

PASSWORD = "cluster-nodes-secret"
NODE_TIMEOUT_MS = 1000


# Node ports 10,000-22,767: their bus ports (+10,000) end below 32,768.
PORT_RANGE = (10_000, 22_767)
NODE_START_TRIES = 5


def cluster_port() -> int:
    """A free port whose cluster-bus port (+10,000) is free too."""
    for _ in range(1000):
        port = random.randint(*PORT_RANGE)
        if port_is_free(port) and port_is_free(port + 10_000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def probe(port: int) -> redis.Redis:
    """A plain, short-timeout client of one node (not cluster-aware)."""
    return node_client(port, PASSWORD, 1)


class Cluster:
    """Start with :meth:`start`, stop with :meth:`close` (kills whatever still runs)."""

    def __init__(self, dir: Path, primaries: int = 3, replicas: int = 1) -> None:
        self.dir = dir
        self.nodes = [self._node(dir / f"node{i}") for i in range(primaries * (1 + replicas))]
        self.replicas = replicas

    @staticmethod
    def _node(dir: Path) -> RedisServer:
        return RedisServer(
            dir,
            port=cluster_port(),
            password=PASSWORD,
            extra_args=(
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(dir / "nodes.conf"),
                "--cluster-node-timeout",
                str(NODE_TIMEOUT_MS),
                "--masterauth",
                PASSWORD,
                # A replica fails over however long ago it last heard its primary.
                "--cluster-replica-validity-factor",
                "0",
            ),
        )

    @property
    def nodes_setting(self) -> str:
        """The value of ``RELAY_REDIS_CLUSTER_NODES``: every node as a seed."""
        return ",".join(f"{HOST}:{n.port}" for n in self.nodes)

    @property
    def url(self) -> str:
        """``RELAY_REDIS_URL`` beside the nodes: the nodes' password (host ignored)."""
        return f"redis://:{PASSWORD}@ignored.invalid:1/0"

    def _start_node(self, index: int) -> None:
        """Start node ``index``; a port pair lost between the pick and the bind (the check is
        only a look) is given up for a new one, and the node started again."""
        for attempt in range(1, NODE_START_TRIES + 1):
            node = self.nodes[index]
            try:
                node.start()
                return
            except RedisServerError as exc:
                if "Address already in use" not in str(exc) or attempt == NODE_START_TRIES:
                    raise
            (node.dir / "nodes.conf").unlink(missing_ok=True)
            self.nodes[index] = self._node(node.dir)

    def start(self, timeout: float = 30) -> None:
        for index in range(len(self.nodes)):
            self._start_node(index)
        if len(self.nodes) == 1:  # redis-cli creates three primaries at least
            client = probe(self.nodes[0].port)
            try:
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            finally:
                client.close()
            self.wait_ok(timeout)
            return
        done = subprocess.run(
            [
                "redis-cli", "-a", PASSWORD, "--no-auth-warning",
                "--cluster", "create", *[f"{HOST}:{n.port}" for n in self.nodes],
                "--cluster-replicas", str(self.replicas), "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{done.stdout}\n{done.stderr}")
        self.wait_ok(timeout)
        self.wait_replicas_synced(timeout)

    def wait_replicas_synced(self, timeout: float = 30) -> None:
        """Until every running replica's link to its primary is up (a replica that never
        synced would take over with nothing)."""
        deadline = time.monotonic() + timeout
        while True:
            pending = []
            for node in self.nodes:
                if not node.running:
                    continue
                client = probe(node.port)
                try:
                    info = client.info("replication")
                    if info.get("role") == "slave" and info.get("master_link_status") != "up":
                        pending.append(node.port)
                except redis.RedisError:
                    pending.append(node.port)
                finally:
                    client.close()
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"replicas {pending} did not sync:\n{self.logs()}")
            time.sleep(0.1)

    def wait_ok(self, timeout: float = 30) -> None:
        """Until every live node says ``cluster_state:ok`` and agrees on which primaries own
        the slots, all of them running (a killed primary is replaced first)."""
        deadline = time.monotonic() + timeout
        while not self._ok():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster did not settle:\n{self.logs()}")
            time.sleep(0.1)

    def _ok(self) -> bool:
        views = set()
        for node in self.nodes:
            if not node.running:
                continue
            client = probe(node.port)
            try:
                if client.cluster("INFO").get("cluster_state") != "ok":
                    return False
                views.add(tuple(sorted(self._primaries_seen(client))))
            except redis.RedisError:
                return False
            finally:
                client.close()
        if len(views) != 1:
            return False
        running = {n.port for n in self.nodes if n.running}
        return set(views.pop()) <= running

    @staticmethod
    def _primaries_seen(client: redis.Redis) -> list[int]:
        ports = []
        for slot_range in client.execute_command("CLUSTER", "SLOTS"):
            ports.append(int(slot_range[2][1]))
        return ports

    def primaries(self) -> list[RedisServer]:
        """The nodes that own slots now."""
        for node in self.nodes:
            if node.running:
                client = probe(node.port)
                try:
                    owners = set(self._primaries_seen(client))
                finally:
                    client.close()
                return [n for n in self.nodes if n.port in owners]
        return []

    def owner(self, key: str) -> RedisServer:
        """The primary that owns ``key``'s slot now."""
        for node in self.nodes:
            if not node.running:
                continue
            client = probe(node.port)
            try:
                slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
                for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                    if int(start) <= slot <= int(end):
                        port = int(primary[1])
                        return next(n for n in self.nodes if n.port == port)
            finally:
                client.close()
        raise RuntimeError(f"no node knows the owner of {key!r}")

    def move_slot(self, key: str, to: RedisServer, timeout: float = 30) -> int:
        """Move ``key``'s slot to the primary ``to`` as an operator would, during traffic:
        ``SETSLOT IMPORTING`` on ``to``, ``MIGRATING`` on the owner, then ``MIGRATE`` of every
        key of the slot in one call (until none is left: a write already past its ``ASK``
        check may still add one), then ``SETSLOT NODE`` on every primary. Returns the keys
        moved. (One ``MIGRATE`` of the whole slot, not ``redis-cli --cluster reshard``'s ten
        keys at a time: a relay script reads keys derived from ids it finds, which must not be
        half moved; docs/decisions.md, "Redis Cluster".)"""
        owner = self.owner(key)
        src, dst = probe(owner.port), probe(to.port)
        try:
            slot = int(src.execute_command("CLUSTER", "KEYSLOT", key))
            src_id, dst_id = (
                src.execute_command("CLUSTER", "MYID"),
                dst.execute_command("CLUSTER", "MYID"),
            )
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
            moved = 0
            deadline = time.monotonic() + timeout
            while True:
                found = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1_000_000)
                if not found:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"slot {slot} still has keys on {owner.port}")
                src.execute_command(
                    "MIGRATE", HOST, to.port, "", 0, 10_000, "AUTH", PASSWORD, "KEYS", *found
                )
                moved += len(found)
            dst.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
            for node in self.primaries():
                if node.port not in (owner.port, to.port):
                    client = probe(node.port)
                    try:
                        client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
                    finally:
                        client.close()
            return moved
        finally:
            src.close()
            dst.close()

    def logs(self) -> str:
        return log_tails(self.dir, 10)

    def close(self) -> None:
        for node in self.nodes:
            node.kill()


def batch_keys(cluster: Cluster) -> list[bytes]:
    """Every key of a batch (``relay:{rN}:batch:*``) on every primary: none is left once
    every batch is purged (the streams, counters and indexes a shard keeps are not these)."""
    found: list[bytes] = []
    for node in cluster.primaries():
        client = probe(node.port)
        try:
            found += [
                k.encode()
                for k in client.scan_iter(match="relay:{r*}:batch:*", count=1000)
                if isinstance(k, str)
            ]
        finally:
            client.close()
    return found
