"""What relay's commands cost a Redis that is busy: record them, replay them at full speed.

In ``bench redis_cost`` Redis is ~10 % busy (relay's Python processes take the rest of the
machine), so each round trip wakes it with cold caches, and that is most of what a document
costs it there. A primary near its capacity does not sleep between commands. To measure what
the same commands cost such a Redis, :class:`Capture` records every command relay sends (a
``MONITOR`` on a raw socket, from before relay's processes start), and :func:`replay` sends
them again, in the order Redis ran them, down one connection in pipelines of ``DEPTH``
commands to a fresh private Redis with the same AOF setting, measuring ``INFO cpu`` over the
segments of interest.

What the replay changes, so that one connection can run it: commands a script ran are left
out (the script runs them again), and so are a connection's set-up and bookkeeping (``HELLO``,
``CLIENT``, ``SELECT``, ``AUTH``, subscriptions, ``MONITOR``, ``SCRIPT``: the scripts are
loaded first, ``CONFIG``), transactions' ``MULTI``/``EXEC``/``WATCH`` (their commands run
plainly) and ``WAIT``; blocking reads do not block (``BLPOP`` -> ``LPOP`` of its first key,
``BLMOVE`` -> ``LMOVE``, ``XREADGROUP``/``XREAD`` without ``BLOCK``). Stream entry ids made by
``XADD *`` differ at replay, so acknowledgements of recorded ids find nothing (a cheap no-op).
Errors in the replay are counted and reported.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench._meter import RedisMeter
from relay.devtools.redis_server import RedisServer
from relay.state import scripts as relay_scripts

DEPTH = 64  # commands a round trip in the replay

_SKIP = {
    b"HELLO",
    b"CLIENT",
    b"SELECT",
    b"AUTH",
    b"SUBSCRIBE",
    b"PSUBSCRIBE",
    b"SSUBSCRIBE",
    b"UNSUBSCRIBE",
    b"PUNSUBSCRIBE",
    b"SUNSUBSCRIBE",
    b"MONITOR",
    b"SCRIPT",
    b"CONFIG",
    b"MULTI",
    b"EXEC",
    b"DISCARD",
    b"WATCH",
    b"UNWATCH",
    b"WAIT",
    b"QUIT",
    b"RESET",
    b"SLOWLOG",
}
_ESCAPES = {
    ord("n"): b"\n",
    ord("r"): b"\r",
    ord("t"): b"\t",
    ord("a"): b"\a",
    ord("b"): b"\b",
    ord('"'): b'"',
    ord("\\"): b"\\",
}


def parse(line: bytes) -> tuple[str, list[bytes]] | None:
    """One MONITOR line (``+<time> [<db> <client>] "ARG" "ARG" ...``, arguments quoted as
    Redis's ``sdscatrepr`` quotes them) as (client, arguments); None for anything else."""
    if not line.startswith(b"+") or b"[" not in line:
        return None
    head, _, rest = line.partition(b"] ")
    client = head.partition(b"[")[2].partition(b" ")[2].decode(errors="replace")
    args: list[bytes] = []
    i, n = 0, len(rest)
    while i < n:
        if rest[i] != ord('"'):
            i += 1
            continue
        i += 1
        out = bytearray()
        while i < n and rest[i] != ord('"'):
            c = rest[i]
            if c == ord("\\") and i + 1 < n:
                e = rest[i + 1]
                if e == ord("x") and i + 3 < n:
                    out.append(int(rest[i + 2 : i + 4], 16))
                    i += 4
                    continue
                out += _ESCAPES.get(e, bytes([e]))
                i += 2
                continue
            out.append(c)
            i += 1
        args.append(bytes(out))
        i += 1  # the closing quote
    return (client, args) if args else None


def replayable(args: list[bytes]) -> list[bytes] | None:
    """``args`` as one connection can replay them (module docstring), or None to leave out."""
    name = args[0].upper()
    if name in _SKIP:
        return None
    if name in (b"BLPOP", b"BRPOP"):
        return [name[1:], args[1]]
    if name == b"BLMOVE":
        return [b"LMOVE", *args[1:5]]
    if name == b"BRPOPLPUSH":
        return [b"RPOPLPUSH", *args[1:3]]
    if name in (b"XREADGROUP", b"XREAD"):
        out: list[bytes] = []
        skip = 0
        for a in args:
            if skip:
                skip -= 1
            elif a.upper() == b"BLOCK":
                skip = 1
            else:
                out.append(a)
        return out
    return args


@dataclass
class Capture:
    """Every command one Redis runs while open, as raw MONITOR lines (a thread reads them)."""

    host: str
    port: int
    lines: list[bytes] = field(default_factory=list)
    _sock: socket.socket | None = None
    _thread: threading.Thread | None = None

    def __enter__(self) -> Capture:
        self._sock = socket.create_connection((self.host, self.port), timeout=5)
        self._sock.sendall(b"MONITOR\r\n")
        self._thread = threading.Thread(target=self._read, name="monitor", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 5
        while not self.lines and time.monotonic() < deadline:  # "+OK"
            time.sleep(0.01)
        return self

    def _read(self) -> None:
        assert self._sock is not None
        self._sock.settimeout(None)
        buffer = b""
        try:
            while chunk := self._sock.recv(1 << 20):
                buffer += chunk
                *complete, buffer = buffer.split(b"\r\n")
                self.lines.extend(complete)
        except OSError:
            return  # closed by __exit__

    def mark(self) -> int:
        """Where the commands recorded from now on start (a settle pause first: MONITOR
        lines trail the commands by a moment)."""
        time.sleep(0.3)
        return len(self.lines)

    def __exit__(self, *_: object) -> None:
        if self._sock is not None:
            self._sock.close()
        if self._thread is not None:
            self._thread.join(timeout=5)


@dataclass
class Replayed:
    """One measured segment of a replay."""

    redis_commands: int  # as INFO commandstats counts them (a script's own included)
    cpu_s: float
    wall_s: float
    errors: int


def replay(
    lines: list[bytes], segments: dict[str, tuple[int, int]], tmp: Path, appendonly: bool = True
) -> dict[str, Replayed]:
    """Replay ``lines`` (from the first) on a fresh private Redis, measuring each of
    ``segments`` (name: (first line, end line), in order, not overlapping)."""
    server = RedisServer(tmp / "replay", appendonly=appendonly)
    server.start()
    client = redis.Redis.from_url(server.url)
    try:
        for name in relay_scripts.NAMES:
            client.script_load(relay_scripts.source(name))
        commands = [
            (i, args)
            for i, line in enumerate(lines)
            if (parsed := parse(line)) is not None
            and parsed[0] != "lua"
            and (args := replayable(parsed[1])) is not None
        ]
        out: dict[str, Replayed] = {}
        at = 0

        def send(upto: int) -> int:
            """Send the commands recorded before line ``upto``; returns how many failed."""
            nonlocal at
            errors = 0
            while at < len(commands) and commands[at][0] < upto:
                pipe = client.pipeline(transaction=False)
                while at < len(commands) and commands[at][0] < upto and len(pipe) < DEPTH:
                    pipe.execute_command(*commands[at][1])
                    at += 1
                errors += sum(isinstance(r, Exception) for r in pipe.execute(raise_on_error=False))
            return errors

        meter = RedisMeter(client)
        for name, (first, end) in segments.items():
            send(first)  # what comes before, unmeasured
            before, t0 = meter.read(), time.monotonic()
            errors = send(end)
            wall = time.monotonic() - t0
            seen = RedisMeter.delta(before, meter.read())
            out[name] = Replayed(sum(seen.calls.values()), seen.cpu_s, wall, errors)
        return out
    finally:
        client.close()
        server.stop()
