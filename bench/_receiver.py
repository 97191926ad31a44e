"""Start and query the receiver process (``bench/receiver_app.py`` under uvicorn)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx

from bench._common import ROOT
from bench._stack import wait_http
from relay.devtools.processes import Proc, spawn
from relay.devtools.redis_server import free_port


class ReceiverProcess:
    """``uvicorn bench.receiver_app:app`` on 127.0.0.1, one worker, no access log."""

    def __init__(self, log_dir: Path, env: dict[str, str], wait: bool = True) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: Proc = spawn(
            "receiver",
            [
                sys.executable, "-m", "uvicorn", "bench.receiver_app:app",
                "--host", "127.0.0.1", "--port", str(self.port),
                "--log-level", "warning", "--no-access-log", "--workers", "1",
            ],
            log_dir,
            env,
            ROOT,
        )  # fmt: skip
        self.client = httpx.Client(base_url=self.base, timeout=10)
        if wait:
            self.ready()

    def ready(self) -> None:
        """Return once the receiver answers."""
        wait_http(self.base + "/_count", 30, self.proc)

    def url(self, path: str = "/hook") -> str:
        return self.base + path

    def count(self) -> int:
        n: int = self.client.get("/_count").json()["count"]
        return n

    def wait(self, n: int, timeout: float) -> int:
        """Block until the receiver holds ``n`` requests or ``timeout`` passes; the count."""
        got: int = self.client.get(
            "/_wait", params={"n": n, "timeout": timeout}, timeout=timeout + 5
        ).json()["count"]
        return got

    def records(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.client.get("/_records").json()
        return rows

    def reset(self) -> None:
        self.client.post("/_reset").raise_for_status()

    def stop(self) -> None:
        self.client.close()
        self.proc.stop()
