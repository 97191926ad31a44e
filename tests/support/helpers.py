"""Small helpers shared by the tests (no fixtures here: those live in ``conftest.py``).

``free_port`` (relay's, :mod:`relay.devtools.redis_server`) and ``wait_until`` (``procs.py`` here,
shared with the benchmarks) are re-exported so that tests import their helpers from one place.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import redis
import redis.asyncio

from relay.config import load_settings
from relay.crypto import generate_key
from relay.devtools.processes import wait_until as wait_until
from relay.devtools.redis_server import AppendFsync, RedisServer
from relay.devtools.redis_server import free_port as free_port
from relay.runtime.context import WorkerContext
from relay.state.store import BatchRef
from relay.timefmt import now_ms

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]  # the checkout


class RedisFactory(Protocol):
    """The ``redis_factory`` fixture: a new started RedisServer in its own tmp directory."""

    def __call__(
        self,
        *,
        appendonly: bool = True,
        appendfsync: AppendFsync = "everysec",
        password: str | None = None,
        port: int | None = None,
    ) -> RedisServer: ...


class FakeClock:
    """A clock for the stores' ``clock=`` (ms since the epoch) that moves only when told to.

    It starts at the real time, so what it stamps still reads as a plausible date; a test lets
    a lease or a due time pass with :meth:`advance` instead of sleeping through it.
    """

    def __init__(self, start_ms: int | None = None) -> None:
        self.ms = now_ms() if start_ms is None else start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> int:
        """Move on by ``ms`` milliseconds; returns the new time."""
        self.ms += ms
        return self.ms


class Clients:
    """What a state test drives one Redis with: a sync client (the workers' side), an asyncio
    client (the API's) with an event loop to ``run`` it on, and a :class:`FakeClock` for the
    stores. Test harnesses subclass it; ``close`` after the test."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.aclient = redis.asyncio.Redis.from_url(url)
        self.client = redis.Redis.from_url(url)
        self.clock = FakeClock()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.run(self.aclient.aclose())
        self.loop.close()
        self.client.close()


class _Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


def closed_after(harness: C) -> Iterator[C]:
    """A fixture's body: ``yield from closed_after(H(redis_url))`` yields the harness to the
    test and closes it after."""
    yield harness
    harness.close()


def worker_context(
    redis_url: str, clock: Callable[[], int] = now_ms, /, **settings: str
) -> WorkerContext:
    """A worker's context on ``redis_url`` with a new encryption key, the ``RELAY_*``
    ``settings`` given and ``clock`` (the caller closes ``ctx.redis``)."""
    env = {"RELAY_REDIS_URL": redis_url, "RELAY_ENCRYPTION_KEY": generate_key(), **settings}
    return WorkerContext(load_settings(env, dotenv=None), clock)


def refs_in_distinct_shards(account: str, n: int) -> list[BatchRef]:
    """``n`` batches of ``account`` that live in ``n`` different shards."""
    found: dict[int, BatchRef] = {}
    i = 0
    while len(found) < n:
        ref = BatchRef(account, f"b{i}")
        found.setdefault(ref.shard, ref)
        i += 1
    return list(found.values())


def relay_cli(
    redis_url: str | None,
    *args: str,
    encryption_key: str | None = None,
    timeout: float = 30,
    cwd: Path | None = None,
    settings: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m relay ARGS`` on ``redis_url`` (None: no ``RELAY_REDIS_URL``; no other
    ``RELAY_*`` from this process but ``settings``), as an operator runs it, in ``cwd``
    (default: this one); its output as text."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(settings or {})
    env["PYTHONPATH"] = str(ROOT)
    if redis_url is not None:
        env["RELAY_REDIS_URL"] = redis_url
    if encryption_key is not None:
        env["RELAY_ENCRYPTION_KEY"] = encryption_key
    return subprocess.run(
        [sys.executable, "-m", "relay", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
