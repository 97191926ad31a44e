"""Real relay processes for end-to-end tests: API, workers and detectors as subprocesses.

``Stack`` starts ``python -m relay serve|worker|detector`` with a test's settings, keeps
their output in files (shown when a test fails), and kills or stops them on demand. The
processes themselves are :class:`relay.procs.Proc`, as in the benchmarks.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from relay.procs import Proc, free_port, relay_env, spawn, stop_all, wait_until


@dataclass
class Stack:
    """Processes sharing one Redis and one set of settings (``RELAY_*`` overrides)."""

    redis_url: str
    tmp: Path
    env: dict[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    api_url: str = ""

    def __post_init__(self) -> None:
        settings = {
            "RELAY_LEASE_SECONDS": "3",
            "RELAY_SWEEP_INTERVAL": "0.2",
            "RELAY_DELIVERY_TIMEOUT": "2",
            "RELAY_RETRY_SCHEDULE": "0.2,0.2,0.2",
            "RELAY_RETRY_JITTER": "0",
            "RELAY_LOG_LEVEL": "info",
            "RELAY_STATUS_RATE_LIMIT": "100000/minute",
        }
        self.env = relay_env(self.redis_url, {**settings, **self.env})

    def _spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> Proc:
        argv = [sys.executable, "-m", "relay", *args]
        proc = spawn(name, argv, self.tmp, {**self.env, **(env or {})}, self.tmp)
        self.procs.append(proc)
        return proc

    def api(self, **env: str) -> Proc:
        port = free_port()
        proc = self._spawn("api", "serve", "--host", "127.0.0.1", "--port", str(port), env=env)
        self.api_url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(self.api_url + "/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, 20, 0.1, "the API did not come up: " + self.logs())
        return proc

    def worker(self, *args: str, **env: str) -> Proc:
        """``relay worker ARGS`` (e.g. ``"--queues", "processing"``)."""
        return self._spawn("worker", "worker", *args, env=env)

    def detector(self, **env: str) -> Proc:
        return self._spawn("detector", "detector", env=env)

    def cli(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "relay", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.tmp,
            check=False,
        )

    def create_key(self, account: str) -> str:
        done = self.cli("keys", "create", "--account", account)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name} (pid {p.pid}, rc {p.popen.poll()}) ---\n{p.tail(4000)}"
            for p in self.procs
        )

    def close(self) -> None:
        stop_all(self.procs, timeout=15)
