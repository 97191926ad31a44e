"""How many shards: the counts a deployment has used, kept in Redis and followed by every process.

``relay:shards`` (a hash, no hash tag: one key, read by every process) maps each count of
shards the deployment has used to the time (ms) from which new batches take it. The first
process that starts records its ``RELAY_SHARDS`` with time 0; a process started with a larger
count records it ``RELAY_SHARDS_DELAY`` ahead, so that every running process, each re-reading
the counts four times per delay, knows the new count before any batch is created under it:
two processes never disagree on where a new batch goes, whichever one the client talks to
(a rolling restart). A count lower than one recorded is refused at start (``ShardCountError``):
data lives in the shards above it.

Every process installs what it read in :mod:`relay.redis.keyspace` (:func:`relay.redis.keyspace.use`), which
then places new batches, looks for existing ones under every count, and lists the shards the
per-shard loops walk. A batch stays in the shard it was created in; documents and deliveries
carry their shard in their id.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from relay.config import Settings
from relay.exceptions import ConfigError
from relay.redis import keyspace
from relay.redis.clients import UNREACHABLE, RedisTarget, sync_client

log = logging.getLogger("relay.redis.shards")

KEY = f"{keyspace.PREFIX}:shards"
RETRY_SECONDS = 1.0  # between tries to read the counts while Redis is unreachable


class ShardCountError(ConfigError):
    """``RELAY_SHARDS`` is lower than a count the deployment has used."""


def _parse(raw: dict[Any, Any]) -> keyspace.ShardMap | None:
    counts = sorted((int(c), int(since)) for c, since in raw.items())
    return keyspace.ShardMap(tuple(counts)) if counts else None


def load(client: Any) -> keyspace.ShardMap | None:
    """The counts recorded in Redis, None when none is."""
    return _parse(client.hgetall(KEY))


def register(client: Any, wanted: int, delay_ms: int, now_ms: int) -> keyspace.ShardMap:
    """Record ``wanted`` (from 0 when it is the first count, else from ``now_ms + delay_ms``)
    unless it is recorded, and answer every count recorded. Raises ShardCountError when a
    larger count is recorded. ``HSETNX``: two processes raising at once keep the first's time."""
    found = load(client)
    if found is not None and wanted < found.total:
        used = ", ".join(str(c) for c, _ in found.counts)
        raise ShardCountError(
            f"RELAY_SHARDS={wanted} is lower than {found.total}, a count this deployment has"
            f" used (counts used: {used}): data lives in every shard below {found.total}, so"
            f" shards cannot be taken away. Set RELAY_SHARDS={found.total} or more."
        )
    if found is None or wanted not in dict(found.counts):
        client.hsetnx(KEY, str(wanted), "0" if found is None else str(now_ms + delay_ms))
        found = load(client) or keyspace.ShardMap(((wanted, 0),))
    return found


class Follower:
    """Records this process's count, installs the deployment's counts in :mod:`relay.redis.keyspace`
    and re-reads them in a daemon thread (``start``), so a count another process raised is
    known here before it takes new batches."""

    def __init__(self, settings: Settings, client: Any = None) -> None:
        self.wanted = settings.shards
        self.delay_ms = round(settings.shards_delay * 1000)
        self.period = settings.shards_delay / 4
        self.client = client or sync_client(RedisTarget.from_settings(settings), retries=0)
        self.registered = False
        self.stop = threading.Event()

    def step(self) -> None:
        """Register (first) or re-read the counts, and install them."""
        read = load(self.client) if self.registered else None
        if read is None:  # first, or a flushed Redis: record this process's count (again)
            read = register(self.client, self.wanted, self.delay_ms, int(time.time() * 1000))
            self.registered = True
        found = read
        if found != keyspace.shard_map():
            log.info("shards: %s", ", ".join(f"{c} from {s} ms" for c, s in found.counts))
            keyspace.use(found)

    def first(self, *, unreachable_ok: bool = True) -> None:
        """The first step, at start: raises ShardCountError. With Redis unreachable a
        long-running process starts with its own count and the thread keeps trying; a
        one-shot command (``unreachable_ok=False``) fails as any of its commands would."""
        keyspace.use(keyspace.ShardMap(((self.wanted, 0),)))
        try:
            self.step()
        except UNREACHABLE as exc:
            if not unreachable_ok:
                raise
            log.warning("shard counts not read (Redis unreachable: %s); will retry", exc)

    def run(self) -> None:
        while not self.stop.wait(self.period if self.registered else RETRY_SECONDS):
            try:
                self.step()
            except ShardCountError:
                # Raised while this process could not read Redis: it follows the counts used.
                log.exception("shard counts")
                self.registered = True
            except Exception:
                log.warning("shard counts not re-read", exc_info=True)

    def start(self) -> Follower:
        self.first()
        threading.Thread(target=self.run, name="relay-shards", daemon=True).start()
        return self


def follow(settings: Settings) -> Follower:
    """At a process's start: record ``RELAY_SHARDS``, install the counts, keep following."""
    return Follower(settings).start()
