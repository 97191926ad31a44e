"""Real relay processes for end-to-end tests: API, workers and detectors as subprocesses.

``Stack`` starts ``python -m relay serve|worker|detector`` with a test's settings, keeps
their output in files (shown when a test fails), and kills or stops them on demand.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from relay.crypto import generate_key
from tests.helpers import free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(10)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class Stack:
    """Processes sharing one Redis and one set of settings (``RELAY_*`` overrides)."""

    redis_url: str
    tmp: Path
    env: dict[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    api_url: str = ""

    def __post_init__(self) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        base.update(
            {
                "RELAY_REDIS_URL": self.redis_url,
                "RELAY_ENCRYPTION_KEY": generate_key(),
                "RELAY_ALLOW_HTTP_TARGETS": "true",
                "RELAY_ALLOW_PRIVATE_TARGETS": "true",
                "RELAY_LEASE_SECONDS": "3",
                "RELAY_SWEEP_INTERVAL": "0.2",
                "RELAY_DELIVERY_TIMEOUT": "2",
                "RELAY_RETRY_SCHEDULE": "0.2,0.2,0.2",
                "RELAY_RETRY_JITTER": "0",
                "RELAY_LOG_LEVEL": "info",
                "RELAY_STATUS_RATE_LIMIT": "100000/minute",
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": str(ROOT),
            }
        )
        base.update(self.env)
        self.env = base

    def _spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> Proc:
        log = self.tmp / f"{name}-{len(self.procs)}.log"
        out = log.open("wb")
        popen = subprocess.Popen(
            [sys.executable, "-m", "relay", *args],
            env={**self.env, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=self.tmp,
        )
        out.close()
        proc = Proc(name, popen, log)
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
        parts = []
        for p in self.procs:
            text = p.log.read_text(errors="replace") if p.log.exists() else ""
            parts.append(
                f"--- {p.name} (pid {p.popen.pid}, rc {p.popen.poll()}) ---\n{text[-4000:]}"
            )
        return "\n".join(parts)

    def close(self) -> None:
        for p in self.procs:
            p.stop()
