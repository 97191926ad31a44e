"""Real relay processes for tests and benchmarks: a process with its output in a log file,
waiting for a condition, stopping processes (SIGTERM, then SIGKILL), and the ``Stack`` of
API, workers and detectors an end-to-end test runs.

``Stack`` starts ``python -m relay serve|worker|detector`` with a test's settings, keeps
their output in files (shown when a test fails), and kills or stops them on demand. The
benchmarks (``bench/_stack.py``) start their processes with the same :class:`Proc`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx

from relay.crypto import generate_key
from relay.devtools.redis_server import free_port
from relay.devtools.supervisor import STOP_TIMEOUT, terminate_all

SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout relay runs from

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float, interval: float = 0.05, message: str = ""
) -> T:
    """Call ``predicate`` until it returns something truthy, and return that.

    Raises :class:`TimeoutError` with ``message`` (and the last value) after ``timeout``
    seconds; an exception from ``predicate`` (a process found dead) ends the wait at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"{message or 'condition not met'} (waited {timeout:g} s; last: {value!r})"
            )
        time.sleep(interval)


def relay_env(redis_url: str, settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of ``python -m relay`` children started by a test or a benchmark.

    This process's own without its ``RELAY_*`` and ``OTEL_*`` variables (a developer's
    settings or collector must not leak in), then ``redis_url``, a fresh encryption key,
    receivers on this machine allowed, unbuffered output and the checkout on ``PYTHONPATH``
    (for ``tests.*`` and ``bench.*`` plug-ins), then ``settings`` (``RELAY_*`` and ``OTEL_*``
    names) over all of that.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "OTEL_"))}
    env.update(
        RELAY_REDIS_URL=redis_url,
        RELAY_ENCRYPTION_KEY=generate_key(),
        RELAY_ALLOW_HTTP_TARGETS="true",
        RELAY_ALLOW_PRIVATE_TARGETS="true",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=str(SOURCE_ROOT),
    )
    env.update(settings or {})
    return env


@dataclass
class Proc:
    """One child process and the file holding its output (stdout and stderr)."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    stopping: bool = False  # asked to stop: its exit is not a failure

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM), without waiting."""
        self.stopping = True
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL, as a crash would, and reap it."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.kill()
        self.popen.wait()

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM, then SIGKILL if it is still there after ``timeout`` seconds."""
        stop_all([self], timeout)

    def tail(self, chars: int = 3000) -> str:
        """The end of its output so far ('' when there is none)."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def spawn(
    name: str,
    argv: list[str],
    log_dir: Path,
    env: Mapping[str, str],
    cwd: Path | None = None,
    *,
    own_session: bool = False,
) -> Proc:
    """Start ``argv`` with stdout and stderr in a new file ``log_dir/NAME-….log``; with
    ``own_session``, in a session of its own (``Stack.own_sessions``)."""
    log = log_dir / f"{name}-{time.monotonic_ns()}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=own_session,
        )
    return Proc(name, popen, log)


def stop_all(procs: Iterable[Proc], timeout: float = STOP_TIMEOUT) -> None:
    """Stop them side by side: SIGTERM, ``timeout`` seconds for all, SIGKILL what is left."""
    procs = list(procs)
    for proc in procs:
        proc.stopping = True
    for popen in terminate_all([p.popen for p in procs], timeout):
        with contextlib.suppress(ProcessLookupError):
            popen.kill()
        popen.wait()


@dataclass
class Stack:
    """Processes sharing one Redis and one set of settings (``RELAY_*`` overrides).

    ``own_sessions``: start each process in a session of its own, as ``relay dev`` does and
    as separate hosts or containers are: where the kernel shares the CPU between sessions
    (Linux's autogroup scheduling), processes left in the test's session share one
    session's part of it, so two workers would get no more CPU than one."""

    redis_url: str
    tmp: Path
    env: dict[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    api_url: str = ""
    own_sessions: bool = False

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
        proc = spawn(
            name,
            argv,
            self.tmp,
            {**self.env, **(env or {})},
            self.tmp,
            own_session=self.own_sessions,
        )
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
