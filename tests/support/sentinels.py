"""A Redis Sentinel topology on loopback for tests: a primary, a replica and three Sentinels.

The data nodes are :class:`relay.devtools.redis_server.RedisServer` processes (AOF on, a password);
the Sentinels are ``redis-sentinel`` processes (Debian's package; ``make test`` installs it)
with ``down-after-milliseconds 1000``, so a killed primary is replaced in a few seconds.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import redis

from relay.devtools.cluster import log_tails, node_client
from relay.devtools.redis_server import HOST, RedisServer, free_port
from relay.redis.clients import RedisTarget

SERVICE = "mymaster"
PASSWORD = "data-nodes-secret"
SENTINEL_PASSWORD = "sentinels-secret"


def find_redis_sentinel() -> str | None:
    return shutil.which("redis-sentinel") or (
        "/usr/bin/redis-sentinel" if Path("/usr/bin/redis-sentinel").exists() else None
    )


def _probe(port: int, password: str | None) -> redis.Redis:
    return node_client(port, password, 0.5)


class Topology:
    """Start with :meth:`start`, stop with :meth:`close` (kills whatever still runs)."""

    def __init__(self, dir: Path, executable: str) -> None:
        self.dir = dir
        self.executable = executable
        self.primary = RedisServer(
            dir / "primary", password=PASSWORD, extra_args=("--masterauth", PASSWORD)
        )
        self.replica: RedisServer | None = None
        self.sentinel_ports: list[int] = []
        self.sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def sentinels_setting(self) -> str:
        """The value of ``RELAY_REDIS_SENTINELS``."""
        return ",".join(f"{HOST}:{p}" for p in self.sentinel_ports)

    @property
    def url(self) -> str:
        """``RELAY_REDIS_URL`` through Sentinel: the data nodes' password (host ignored)."""
        return f"redis://:{PASSWORD}@ignored.invalid:1/0"

    @property
    def settings(self) -> dict[str, str]:
        """The settings beside ``RELAY_REDIS_URL`` = :attr:`url` of a relay process that
        finds the primary through these Sentinels."""
        return {
            "RELAY_REDIS_SENTINELS": self.sentinels_setting,
            "RELAY_REDIS_SENTINEL_PASSWORD": SENTINEL_PASSWORD,
        }

    def target(self) -> RedisTarget:
        """relay's Redis target through these Sentinels."""
        return RedisTarget(
            self.url,
            sentinels=tuple((HOST, p) for p in self.sentinel_ports),
            sentinel_password=SENTINEL_PASSWORD,
        )

    def start(self, timeout: float = 30) -> None:
        self.primary.start()
        self.replica = RedisServer(
            self.dir / "replica",
            password=PASSWORD,
            extra_args=(
                "--replicaof", HOST, str(self.primary.port), "--masterauth", PASSWORD,
            ),
        )  # fmt: skip
        self.replica.start()
        for i in range(3):
            port = free_port()
            conf = self.dir / f"sentinel{i}" / "sentinel.conf"
            conf.parent.mkdir(parents=True, exist_ok=True)
            conf.write_text(
                f"port {port}\nbind {HOST}\ndaemonize no\ndir {conf.parent}\n"
                f"logfile {conf.parent / 'sentinel.log'}\n"
                f"requirepass {SENTINEL_PASSWORD}\nsentinel sentinel-pass {SENTINEL_PASSWORD}\n"
                f"sentinel monitor {SERVICE} {HOST} {self.primary.port} 2\n"
                f"sentinel auth-pass {SERVICE} {PASSWORD}\n"
                f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                f"sentinel failover-timeout {SERVICE} 5000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            self.sentinel_ports.append(port)
            self.sentinels.append(
                subprocess.Popen(
                    [self.executable, str(conf)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + timeout
        while not self._settled():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Sentinel topology did not settle:\n{self.logs()}")
            time.sleep(0.2)

    def _settled(self) -> bool:
        """Every Sentinel knows the primary, the replica (in sync) and the two others."""
        assert self.replica is not None
        primary = self.primary.port

        def knows_all(s: redis.Redis) -> bool:
            return (
                s.sentinel_get_master_addr_by_name(SERVICE) == (HOST, primary)
                and len(s.sentinel_slaves(SERVICE)) >= 1
                and len(s.sentinel_sentinels(SERVICE)) >= 2
            )

        try:
            info = _probe(self.replica.port, PASSWORD).info("replication")
            if info.get("master_link_status") != "up":
                return False
            return self._every_sentinel(knows_all)
        except redis.RedisError:
            return False

    def _every_sentinel(self, check: Callable[[redis.Redis], bool]) -> bool:
        """``check`` holds on every Sentinel, asked in turn (each client closed after)."""
        for port in self.sentinel_ports:
            s = _probe(port, SENTINEL_PASSWORD)
            try:
                if not check(s):
                    return False
            finally:
                s.close()
        return True

    def current_primary(self) -> int | None:
        """The port the Sentinels' majority name as primary now (None when they disagree)."""
        seen: list[int] = []
        for port in self.sentinel_ports:
            s = _probe(port, SENTINEL_PASSWORD)
            try:
                addr = s.sentinel_get_master_addr_by_name(SERVICE)
                if addr:
                    seen.append(int(addr[1]))
            except redis.RedisError:
                pass
            finally:
                s.close()
        best = max(set(seen), key=seen.count, default=None)
        return best if best is not None and seen.count(best) >= 2 else None

    def server(self, port: int) -> RedisServer:
        """The data node on ``port`` (the first primary or the first replica)."""
        for node in (self.primary, self.replica):
            if node is not None and node.port == port:
                return node
        raise KeyError(port)

    def sentinel(self, i: int = 0) -> redis.Redis:
        """A client of Sentinel ``i`` (the caller closes it)."""
        return _probe(self.sentinel_ports[i], SENTINEL_PASSWORD)

    def in_step(self, primary: int) -> bool:
        """``primary`` is what every Sentinel names, and the other data node is its replica, in
        sync and known to every Sentinel as a good one: ready for the next failover."""
        other = next(n.port for n in (self.primary, self.replica) if n and n.port != primary)

        def knows_other_as_good(s: redis.Redis) -> bool:
            if s.sentinel_get_master_addr_by_name(SERVICE) != (HOST, primary):
                return False
            return any(
                int(r["port"]) == other
                and r.get("master-link-status") == "ok"
                and not ({"s_down", "o_down", "disconnected"} & set(r["flags"].split(",")))
                for r in s.sentinel_slaves(SERVICE)
            )

        try:
            node = _probe(other, PASSWORD)
            try:
                info = node.info("replication")
            finally:
                node.close()
            if info.get("role") != "slave" or info.get("master_port") != primary:
                return False
            if info.get("master_link_status") != "up":
                return False
            return self._every_sentinel(knows_other_as_good)
        except redis.RedisError:
            return False

    def role(self, port: int) -> str | None:
        """ROLE of the data node on ``port`` (``master``/``slave``), None when it does not
        answer."""
        node = _probe(port, PASSWORD)
        try:
            return str(node.execute_command("ROLE")[0])
        except redis.RedisError:
            return None
        finally:
            node.close()

    def client(self, port: int) -> redis.Redis:
        """A plain client of one data node."""
        return _probe(port, PASSWORD)

    def logs(self) -> str:
        return log_tails(self.dir, 15)

    def close(self) -> None:
        for proc in self.sentinels:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        self.sentinels = []
        for server in (self.replica, self.primary):
            if server is not None:
                server.kill()
