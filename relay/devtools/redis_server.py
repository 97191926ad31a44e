"""A private ``redis-server`` process: for ``relay dev`` and for the test suite.

The server binds 127.0.0.1 only, keeps its data (the AOF) and its log in one directory and can be
killed and started again on the same port and directory, so a test can cut Redis away from the
processes using it and bring it back with its data.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Literal
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from relay.devtools import supervisor
from relay.exceptions import RelayError

HOST = "127.0.0.1"
AppendFsync = Literal["always", "everysec", "no"]

# Where Debian, Homebrew and source builds put it, for a PATH that lacks them (cron, sudo -E...).
_FALLBACK_PATHS = ("/usr/bin/redis-server", "/usr/local/bin/redis-server", "/usr/sbin/redis-server")
_BIND_RETRIES = 5


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (it may be taken later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServerError(RelayError):
    """``redis-server`` is missing, did not start, or did not stop."""


def find_redis_server() -> str | None:
    """The path of the ``redis-server`` executable, or None when it is not installed."""
    found = shutil.which("redis-server")
    if found:
        return found
    return next((p for p in _FALLBACK_PATHS if os.access(p, os.X_OK)), None)


def port_is_free(port: int) -> bool:
    """Whether ``port`` on 127.0.0.1 can be bound now (by a server that sets SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


class RedisServer:
    """One ``redis-server`` child process on 127.0.0.1, its data and log under ``dir``.

    ``port=None`` picks a free port at the first :meth:`start` and keeps it for good, so
    :meth:`restart` comes back on the same address with the same AOF. ``appendfsync`` is
    ``everysec`` by default (what production uses); ``always`` makes every acknowledged write
    durable, for tests that kill the server right after writing.
    """

    def __init__(
        self,
        dir: Path,
        port: int | None = None,
        appendonly: bool = True,
        password: str | None = None,
        *,
        appendfsync: AppendFsync = "everysec",
        executable: str | None = None,
        extra_args: tuple[str, ...] = (),
        die_with_parent: bool = False,
    ) -> None:
        self.dir = Path(dir).resolve()
        self.appendonly = appendonly
        self.appendfsync: AppendFsync = appendfsync
        self.password = password
        self.extra_args = extra_args
        self._executable = executable
        self._port = port
        self._port_is_fixed = port is not None
        self._proc: subprocess.Popen[bytes] | None = None
        # relay dev's: the server shuts down (SIGTERM: the AOF is flushed) when the thread
        # that started it ends, even by SIGKILL. Not for tests' servers, started by threads
        # that end before the server should.
        self._die_with_parent = die_with_parent

    # -- address ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RedisServerError("the port is chosen at the first start()")
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``, with the password when there is one."""
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}{HOST}:{self.port}/0"

    @property
    def logfile(self) -> Path:
        return self.dir / "redis.log"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs, else None."""
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 10) -> None:
        """Spawn the server and return once it answers PING; raise RedisServerError if not.

        A port lost to another process between choosing and binding is retried a few times:
        with a new free port when this server chose its own and has never run, else on the same
        port (a restart must come back where its clients are).
        """
        if self.running:
            raise RedisServerError(f"redis-server already runs on port {self.port}")
        executable = self._executable or find_redis_server()
        if executable is None:
            raise RedisServerError(
                "redis-server not found on PATH; install it (`make redis`, or "
                "`apt-get install redis-server`)"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        log = ""
        for attempt in range(1, _BIND_RETRIES + 1):
            if self._port is None:
                self._port = free_port()
            log_offset = self.logfile.stat().st_size if self.logfile.exists() else 0
            self._proc = subprocess.Popen(
                [executable, *self._args()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=self.dir,
                # Its own session: a Ctrl-C in the terminal reaches our process, which stops the
                # server last, after the processes that use it.
                start_new_session=True,
                preexec_fn=supervisor.die_with_parent() if self._die_with_parent else None,
            )
            if self._wait_ready(deadline):
                return
            self._reap()
            log = self._log_since(log_offset) or log  # a cut-short attempt may log nothing
            port_taken = "Address already in use" in log
            if port_taken and attempt < _BIND_RETRIES and time.monotonic() < deadline:
                if not self._port_is_fixed:
                    self._port = None  # ours to choose again
                time.sleep(min(0.1 * attempt, max(0.0, deadline - time.monotonic())))
                continue
            break
        tail = "\n".join(log.strip().splitlines()[-15:]) or "(empty log)"
        raise RedisServerError(
            f"redis-server did not start on port {self._port} within {timeout:g} s; "
            f"{self.logfile}:\n{tail}"
        )

    def stop(self, timeout: float = 10) -> bool:
        """Graceful shutdown: SIGTERM, on which Redis writes and fsyncs the AOF and exits.

        Returns True when it exited by itself within ``timeout`` seconds (or was not running);
        False when it had to be killed.
        """
        proc = self._proc
        if proc is None or proc.poll() is not None:
            self._proc = None
            return True
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._reap()
            return False
        self._proc = None
        return True

    def kill(self) -> None:
        """SIGKILL, as a crash would: whatever the AOF had not written yet is lost."""
        self._reap()

    def restart(self, timeout: float = 10) -> None:
        """Start again on the same port and directory (stopping first if it still runs)."""
        if self.running:
            self.stop(timeout)
        self._port_is_fixed = self._port is not None
        self.start(timeout)

    def __enter__(self) -> RedisServer:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RedisServer(dir={str(self.dir)!r}, port={self._port}, pid={self.pid})"

    # -- internals -------------------------------------------------------------------------

    def _args(self) -> list[str]:
        args = [
            "--port", str(self.port),
            "--bind", HOST,
            "--dir", str(self.dir),
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--daemonize", "no",
            "--logfile", str(self.logfile),
            "--protected-mode", "yes",
        ]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password]
        return [*args, *self.extra_args]

    def _wait_ready(self, deadline: float) -> bool:
        """Poll until our process answers (True) or exits or the deadline passes (False)."""
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            if self._answers():
                return True
            time.sleep(0.02)
        return False

    def _answers(self) -> bool:
        """Our server is up: it answers, has loaded its data, and is our process (not a squatter
        that won the port)."""
        client = redis.Redis(
            host=HOST,
            port=self.port,
            password=self.password,
            socket_connect_timeout=0.25,
            socket_timeout=0.25,
            retry=Retry(NoBackoff(), 0),  # one probe; the caller's loop does the retrying
        )
        try:
            info = client.info("server")
        except redis.RedisError:  # refused, still loading the AOF, timeout
            return False
        finally:
            client.close()
        return self._proc is not None and info.get("process_id") == self._proc.pid

    def _reap(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        proc.wait()

    def _log_since(self, offset: int) -> str:
        try:
            with self.logfile.open("rb") as fh:
                fh.seek(offset)
                return fh.read().decode(errors="replace")
        except OSError:
            return ""
