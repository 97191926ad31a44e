"""Process supervision for ``relay dev``: children, their output, restarts, stopping.

The pieces :class:`relay.devtools.dev.Supervisor` is built from, each usable on its own: a
:class:`Console` that prints many processes' lines behind their names, a :class:`Child` process
whose output is pumped there, a :class:`RestartBudget` for one that keeps crashing,
:func:`stop_children` (SIGTERM, then SIGKILL), :func:`lock_state_dir` so one supervisor owns a
state directory, :func:`stop_orphans` for the processes a killed supervisor left behind (listed
in ``dev.pids``), :func:`on_stop_signals` and the :func:`healthy` probe.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

from relay.exceptions import RelayError

RESTARTS_PER_MINUTE = 5
STOP_TIMEOUT = 10.0  # seconds a process has between SIGTERM and SIGKILL


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


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` after which the child gets ``sig`` when the thread that started it
    ends, however it ends (SIGKILL included: a supervisor that cannot clean up after itself).
    Linux only (``prctl(PR_SET_PDEATHSIG)``); None elsewhere, where ``stop_orphans`` at the
    next start is the only cleanup. Made before the fork: the child only makes two calls."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the prctl: nobody will signal
            os.kill(os.getpid(), sig)

    return preexec


class DevError(RelayError):
    """``relay dev`` cannot start (no redis-server, state directory in use, bad key file).

    Defined here because :func:`lock_state_dir` raises it and this module does not import
    :mod:`relay.devtools.dev`; that module re-exports it as ``relay.devtools.dev.DevError``.
    """


@dataclass
class RestartBudget:
    """Backoff for a crashing child: 0.5 s doubling to 10 s, and at most ``limit`` restarts in
    any ``window`` seconds (after that it waits until the oldest one leaves the window)."""

    limit: int = RESTARTS_PER_MINUTE
    window: float = 60.0
    times: deque[float] = field(default_factory=deque)

    def delay(self, now: float) -> float:
        while self.times and now - self.times[0] >= self.window:
            self.times.popleft()
        backoff = min(0.5 * 2.0 ** len(self.times), 10.0)
        if len(self.times) >= self.limit:
            backoff = max(backoff, self.times[0] + self.window - now)
        return backoff

    def record(self, now: float) -> None:
        self.times.append(now)


def healthy(url: str, timeout: float = 1.0) -> bool:
    """Whether ``url`` answers 200 (no proxy: it is our own local server)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


# -- console, children ----------------------------------------------------------------------


class Console:
    """Lines from many threads, each behind a padded name: ``worker   | ...``.

    Writing never raises: when the output goes away (``relay dev | head`` once ``head`` is
    done: EPIPE; a closed terminal: EIO) the console goes quiet, points its file descriptor at
    /dev/null (so neither a later write nor the flush at exit fails) and calls ``on_closed``
    once: the supervisor stops everything, as it would on Ctrl-C.
    """

    def __init__(self, out: IO[str], width: int = 8) -> None:
        self._out = out
        self._width = width
        self._lock = threading.Lock()
        self.closed = False
        self.on_closed: Callable[[], None] | None = None

    def say(self, name: str, text: str) -> None:
        self._emit(
            "".join(f"{name:<{self._width}} | {line}\n" for line in text.splitlines() or [""])
        )

    def write(self, text: str) -> None:
        self._emit(text)

    def _emit(self, text: str) -> None:
        with self._lock:
            if self.closed:
                return
            try:
                self._out.write(text)
                self._out.flush()
            except (OSError, ValueError):  # EPIPE, EIO; ValueError: the file was closed
                self._close()

    def check(self) -> None:
        """Notice a reader that went away while nothing was written (a pipe's write end
        polls as POLLERR once its last reader closed)."""
        with self._lock:
            if self.closed:
                return
            try:
                fd = self._out.fileno()
            except (OSError, ValueError):  # not a file (a test's StringIO)
                return
            poller = select.poll()
            poller.register(fd, 0)  # POLLERR and POLLHUP are always reported
            if any(events & (select.POLLERR | select.POLLNVAL) for _, events in poller.poll(0)):
                self._close()

    def _close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._out.fileno())
            os.close(devnull)
        if self.on_closed is not None:
            # Another thread: the callback may take the lock (it may say something).
            threading.Thread(target=self.on_closed, name="dev-output-closed", daemon=True).start()


class Child:
    """One supervised process, its output pumped to the console by a thread."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], console: Console) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.console = console
        self.proc: subprocess.Popen[bytes] | None = None
        self.budget = RestartBudget()
        self.restart_at: float | None = None
        self._pump: threading.Thread | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the supervisor only; it stops us in order
            # A supervisor SIGKILLed stops nothing itself: the children stop on their own.
            preexec_fn=die_with_parent(),
        )
        self._pump = threading.Thread(
            target=self._copy_output, args=(self.proc,), name=f"dev-{self.name}", daemon=True
        )
        self._pump.start()

    def _copy_output(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.stdout is None:
            return
        with proc.stdout:
            for raw in iter(proc.stdout.readline, b""):
                self.console.say(self.name, raw.decode(errors="replace").rstrip("\r\n"))

    def send(self, sig: signal.Signals, *, group: bool = False) -> None:
        """Send ``sig`` to the process, or to its whole process group (its own forks too)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(self.proc.pid, sig)
            elif self.proc.poll() is None:
                self.proc.send_signal(sig)

    def join_output(self, timeout: float = 2.0) -> None:
        if self._pump is not None:
            self._pump.join(timeout)


def stop_children(children: list[Child], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM every child, wait up to ``timeout`` seconds for all, SIGKILL what is left."""
    stragglers = terminate_all([c.proc for c in children if c.proc is not None], timeout)
    for child in children:
        if child.proc in stragglers:
            child.console.say("dev", f"{child.name} did not stop within {timeout:g} s; killing it")
        child.send(signal.SIGKILL, group=True)  # the stragglers and any forks they left
        if child.proc is not None:
            child.proc.wait()
        child.join_output()


# -- state directory: one supervisor at a time, orphans of a killed one ----------------------


def lock_state_dir(state_dir: Path) -> IO[str]:
    """Hold ``state_dir/dev.lock`` for as long as the returned file stays open."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fh = (state_dir / "dev.lock").open("a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise DevError(f"another `relay dev` is running on {state_dir}") from None
    return fh


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def stop_orphans(state_dir: Path, console: Console) -> None:
    """Stop the processes a killed supervisor left behind (listed in ``state_dir/dev.pids``).

    A pid counts only while ``/proc/PID/cmdline`` still shows relay or redis-server, so a pid
    reused by something else is left alone (and without ``/proc`` nothing is touched).
    """
    path = state_dir / "dev.pids"
    try:
        pids: dict[str, int] = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    orphans: dict[str, int] = {}
    for name, pid in pids.items():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if (b"redis-server" if name == "redis" else b"relay") in cmdline:
            orphans[name] = pid
    for name, pid in orphans.items():
        console.say("dev", f"stopping {name} (pid {pid}) left over from an earlier run")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while any(_pid_alive(p) for p in orphans.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in orphans.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    path.unlink(missing_ok=True)


@contextlib.contextmanager
def on_stop_signals(handler: Callable[[], None]) -> Iterator[None]:
    """Route SIGINT, SIGTERM and SIGHUP to ``handler`` (main thread only; restored after)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: FrameType | None) -> None:
        handler()

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in sigs}
    for sig in sigs:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
