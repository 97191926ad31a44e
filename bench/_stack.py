"""Real relay processes on a private Redis, for the benchmarks (as relay/devtools/processes.py is
for the tests; both run their processes as its :class:`Proc`).

``Stack`` starts its own ``redis-server`` (127.0.0.1, a free port, AOF everysec as in
production) in a temporary directory and ``python -m relay serve|worker|detector`` children
with benchmark settings; ``close()`` stops the children (SIGTERM, then SIGKILL), then Redis,
and removes the directory. The system Redis on 6379 is never touched.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from bench._common import BenchError, proc_status_kib
from relay.devtools.processes import Proc, relay_env, spawn, stop_all, wait_until
from relay.devtools.redis_server import RedisServer, free_port

ACCOUNT = "bench"
# The settings every benchmark's relay runs with: they measure throughput, so no rate limit
# or per-account quota may throttle them.
UNTHROTTLED = {
    "RELAY_STATUS_RATE_LIMIT": "1000000/minute",
    "RELAY_ACCOUNT_UPLOAD_RATE_LIMIT": "1000000/minute",
    "RELAY_ACCOUNT_PROCESS_RATE_LIMIT": "1000000/minute",
    "RELAY_ACCOUNT_MAX_PENDING_BYTES": str(64 * 1024**3),
    "RELAY_ACCOUNT_MAX_INFLIGHT": "100000",
    "RELAY_LOG_LEVEL": "warning",
}


def wait_http(url: str, timeout: float = 20, proc: Proc | None = None) -> None:
    """Until GET ``url`` answers 200 (BenchError if ``proc`` dies or time runs out)."""

    def up() -> bool:
        if proc is not None and not proc.alive:
            raise BenchError(f"{proc.name} exited with {proc.popen.poll()}:\n{proc.tail()}")
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, timeout, 0.05, f"{url} did not answer")


def _for_checkout(env: dict[str, str], source: Path) -> dict[str, str]:
    """``env`` for relay processes run from the checkout ``source``: its code first on
    ``PYTHONPATH``, without the ``RELAY_*`` settings it does not know."""
    example = source / ".env.example"
    if not (source / "relay" / "__init__.py").is_file() or not example.is_file():
        raise BenchError(f"{source} is not a relay checkout (no relay/ or .env.example)")
    known = {
        line.split("=", 1)[0]
        for line in example.read_text().splitlines()
        if line.startswith("RELAY_") and "=" in line
    }
    # Set by relay_env for every process, not listed in .env.example.
    known |= {"RELAY_REDIS_URL", "RELAY_ENCRYPTION_KEY"}
    out = {k: v for k, v in env.items() if not k.startswith("RELAY_") or k in known}
    out["PYTHONPATH"] = str(source.resolve())
    return out


@dataclass
class Started:
    """What ``Stack.start`` started, and the API key it made."""

    api: Proc | None
    workers: list[Proc]
    detector: Proc | None
    key: str


@dataclass
class Stack:
    """A private Redis plus relay processes sharing one set of ``RELAY_*`` settings."""

    settings: dict[str, str] = field(default_factory=dict)
    appendonly: bool = True
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="relay-bench-")))
    procs: list[Proc] = field(default_factory=list)
    api_url: str = ""
    env: dict[str, str] = field(default_factory=dict)
    redis_server: RedisServer | None = None
    # RQ's queues on a Redis of their own (RELAY_QUEUE_REDIS_URL), as beside a Cluster.
    separate_queues: bool = False
    queue_server: RedisServer | None = None
    # Another checkout whose relay the processes run (e.g. the commit before a change, as a
    # baseline in the same run): its code on PYTHONPATH, and only the RELAY_* settings it
    # knows (the names in its .env.example; relay refuses unknown ones at start).
    source: Path | None = None

    def __post_init__(self) -> None:
        self.redis_server = RedisServer(self.tmp / "redis", appendonly=self.appendonly)
        self.redis_server.start()
        settings = dict(UNTHROTTLED)
        if self.separate_queues:
            self.queue_server = RedisServer(self.tmp / "queues", appendonly=self.appendonly)
            self.queue_server.start()
            settings["RELAY_QUEUE_REDIS_URL"] = self.queue_server.url
        self.env = relay_env(self.redis_server.url, {**settings, **self.settings})
        if self.source is not None:
            self.env = _for_checkout(self.env, self.source)
        self.redis = redis.Redis.from_url(self.redis_server.url)
        # RQ's Redis: where the workers register.
        self.rq = (
            redis.Redis.from_url(self.queue_server.url)
            if self.queue_server is not None
            else self.redis
        )

    @property
    def redis_url(self) -> str:
        assert self.redis_server is not None
        return self.redis_server.url

    @property
    def redis_pid(self) -> int | None:
        return self.redis_server.pid if self.redis_server is not None else None

    def _relay(self, name: str, *args: str, env: dict[str, str] | None = None) -> Proc:
        proc = spawn(
            name,
            [sys.executable, "-m", "relay", *args],
            self.tmp,
            {**self.env, **(env or {})},
            self.tmp,
        )
        self.procs.append(proc)
        return proc

    def start(self, *, api: bool = True, workers: int = 1, detector: bool = True) -> Started:
        """Start the processes at once (their imports overlap), create an API key meanwhile,
        and return once the API answers and RQ lists every worker."""
        before = int(self.rq.scard("rq:workers"))
        api_proc = self.api(wait=False) if api else None
        worker_procs = [self.worker(wait=False) for _ in range(workers)]
        detector_proc = self.detector() if detector else None
        key = self.create_key()
        if api_proc is not None:
            wait_http(self.api_url + "/healthz", 30, api_proc)
        self._wait_workers(before + workers, worker_procs)
        return Started(api_proc, worker_procs, detector_proc, key)

    def api(self, wait: bool = True) -> Proc:
        port = free_port()
        proc = self._relay("api", "serve", "--host", "127.0.0.1", "--port", str(port))
        self.api_url = f"http://127.0.0.1:{port}"
        if wait:
            wait_http(self.api_url + "/healthz", 30, proc)
        return proc

    def worker(self, wait: bool = True) -> Proc:
        """Start ``relay worker``; with ``wait``, return once RQ lists it."""
        before = int(self.rq.scard("rq:workers"))
        proc = self._relay("worker", "worker")
        if wait:
            self._wait_workers(before + 1, [proc])
        return proc

    def _wait_workers(self, count: int, procs: list[Proc]) -> None:
        def registered() -> bool:
            for proc in procs:
                if not proc.alive:
                    raise BenchError(f"worker exited:\n{proc.tail()}")
            return int(self.rq.scard("rq:workers")) >= count

        wait_until(registered, 30, 0.05, "the workers did not register with RQ")

    def detector(self, **env: str) -> Proc:
        """Start ``relay detector`` (``env``: ``RELAY_*`` overrides for this process only)."""
        return self._relay("detector", "detector", env=env)

    def create_key(self, account: str = ACCOUNT) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "relay", "keys", "create", "--account", account],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.tmp,
            check=False,
        )
        if done.returncode != 0:
            raise BenchError(f"relay keys create failed: {done.stderr}")
        return done.stdout.strip().splitlines()[-1]

    def pids(self, **extra: int) -> dict[str, int | None]:
        """Every live child's pid by ``name-N``, Redis's, and ``extra`` (for ``CpuMeter``)."""
        out: dict[str, int | None] = {"redis": self.redis_pid}
        counts: dict[str, int] = {}
        for p in self.procs:
            counts[p.name] = counts.get(p.name, 0) + 1
            if p.alive:
                out[f"{p.name}-{counts[p.name]}"] = p.pid
        return {**out, **extra}

    def check_alive(self) -> None:
        for p in self.procs:
            if not p.alive and not p.stopping:
                raise BenchError(f"{p.name} (pid {p.pid}) exited:\n{p.tail()}")

    def rss(self) -> dict[str, dict[str, float | None]]:
        """VmRSS and VmHWM (peak) in MiB of every live process, by ``name-N``."""
        out: dict[str, dict[str, float | None]] = {}
        counts: dict[str, int] = {}
        for p in self.procs:
            counts[p.name] = counts.get(p.name, 0) + 1
            if not p.alive:
                continue
            rss, hwm = proc_status_kib(p.pid, "VmRSS"), proc_status_kib(p.pid, "VmHWM")
            out[f"{p.name}-{counts[p.name]}"] = {
                "rss_mib": None if rss is None else round(rss / 1024, 1),
                "peak_mib": None if hwm is None else round(hwm / 1024, 1),
            }
        return out

    def close(self) -> None:
        stop_all(self.procs)  # side by side: each takes a second or two to shut down
        self.redis.close()
        if self.redis_server is not None:
            self.redis_server.stop()
        if self.queue_server is not None:
            self.rq.close()
            self.queue_server.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            for p in self.procs:
                text = p.tail(1500).strip()
                if text:
                    print(f"--- {p.name} (pid {p.pid}) log tail ---\n{text}", file=sys.stderr)
        self.close()
