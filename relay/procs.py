"""Child processes on this machine: a free port, waiting for a condition, a process with its
output in a log file, and stopping processes (SIGTERM, then SIGKILL).

One implementation for every harness that runs relay's processes: the end-to-end tests
(``tests/procs.py``), the benchmarks (``bench/_stack.py``), :mod:`relay.redis_server` and
``relay dev`` (:mod:`relay.supervise`, whose children print to a console instead of a file).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from relay.crypto import generate_key

HOST = "127.0.0.1"
SOURCE_ROOT = Path(__file__).resolve().parent.parent  # the checkout relay runs from
STOP_TIMEOUT = 10.0  # seconds a process has between SIGTERM and SIGKILL

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (it may be taken later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


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

    This process's own without its ``RELAY_*`` variables (a developer's settings must not leak
    in), then ``redis_url``, a fresh encryption key, receivers on this machine allowed,
    unbuffered output and the checkout on ``PYTHONPATH`` (for ``tests.*`` and ``bench.*``
    plug-ins), then ``settings`` (``RELAY_*`` names) over all of that.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
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


def terminate_all(
    popens: Iterable[subprocess.Popen[bytes]], timeout: float = STOP_TIMEOUT
) -> list[subprocess.Popen[bytes]]:
    """SIGTERM every one still running, then give them ``timeout`` seconds together (they
    shut down side by side, not one after another). Returns those still running then; what
    to do with them (SIGKILL, their process group too) is the caller's."""
    running = [p for p in popens if p.poll() is None]
    for popen in running:
        with contextlib.suppress(ProcessLookupError):
            popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for popen in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(max(0.0, deadline - time.monotonic()))
    return [p for p in running if p.poll() is None]


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
) -> Proc:
    """Start ``argv`` with stdout and stderr in a new file ``log_dir/NAME-….log``."""
    log = log_dir / f"{name}-{time.monotonic_ns()}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
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
