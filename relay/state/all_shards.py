"""Reads across every shard for the operators' views: ``/metrics`` gauges and the console.

Each read is one pipelined round trip over every shard in use (or over a bounded list of ids) and
returns plain numbers or records: the routes and the console know no key (docs/architecture.md,
"Import contracts"). A read that finds Redis unreachable raises the client's error.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from relay.redis import keyspace
from relay.redis.keyspace import OUTBOX_GROUP
from relay.state import job_queues as queues
from relay.state.model import Delivery, Webhook
from relay.state.store import BatchRef, locate_batch

# The newest deliveries of every shard the console's pages look at, at most.
SCAN_CAP = 20_000


class AllShards:
    """The cross-shard reads, over the API process's ``redis.asyncio`` client."""

    def __init__(
        self, client: redis.asyncio.Redis, queues: redis.asyncio.Redis | None = None
    ) -> None:
        self.redis = client
        self.queues = client if queues is None else queues  # RQ's Redis (queue depths)

    # -- gauges ---------------------------------------------------------------------------

    async def queue_depths(self) -> dict[str, int]:
        """Jobs waiting in each RQ queue, by queue name."""
        names = (queues.PROCESSING, queues.DELIVERY)
        async with self.queues.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.llen(queues.queue_key(name))
            lengths = await pipe.execute()
        return {name: int(n) for name, n in zip(names, lengths, strict=True)}

    async def documents(self) -> tuple[int, int]:
        """(documents waiting for a worker, documents being processed) over every shard."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for s in keyspace.all_shards():
                pipe.get(keyspace.waiting(s))
                pipe.zcard(keyspace.leases(s))
            counts = await pipe.execute()
        return sum(int(n or 0) for n in counts[0::2]), sum(int(n) for n in counts[1::2])

    async def due(self, now: int) -> int:
        """Pending deliveries whose next attempt time has come by ``now``."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for s in keyspace.all_shards():
                pipe.zcount(keyspace.due(s), "-inf", now)
            counts = await pipe.execute()
        return sum(int(n) for n in counts)

    async def oldest_due(self, now: int) -> int | None:
        """When the oldest due delivery came due (ms), None when none is due.

        A claimed delivery stays in ``due`` scored at its lease expiry, in the future while
        the lease holds: only scores up to now are due (an expired lease is due again)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for s in keyspace.all_shards():
                pipe.zrangebyscore(keyspace.due(s), "-inf", now, start=0, num=1, withscores=True)
            firsts = await pipe.execute()
        scores = [int(score) for found in firsts for _, score in found]
        return min(scores) if scores else None

    async def outbox_backlog(self) -> int:
        """Outbox entries not yet acknowledged by the detectors, over every shard."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for s in keyspace.all_shards():
                pipe.xinfo_groups(keyspace.outbox(s))
                pipe.xlen(keyspace.outbox(s))
            replies = await pipe.execute(raise_on_error=False)
        total = 0
        for groups, length in zip(replies[0::2], replies[1::2], strict=True):
            if isinstance(groups, (RedisConnectionError, RedisTimeoutError)):
                raise groups
            if isinstance(groups, Exception) or isinstance(length, Exception):
                continue  # no outbox on this shard yet: nothing waits
            info = next(
                (g for g in groups if g["name"] in (OUTBOX_GROUP, OUTBOX_GROUP.encode())), None
            )
            if info is None:  # no detector has run yet: every entry waits
                total += int(length)
            elif info.get("lag") is None:  # Redis cannot tell (entries deleted mid-stream)
                total += int(length)  # an upper bound: acknowledged entries are trimmed each sweep
            else:  # not yet read by any detector + read but not acknowledged
                total += int(info["lag"]) + int(info["pending"])
        return total

    async def counters(self) -> dict[bytes, bytes]:
        """The counters and histograms workers flush to Redis (``relay.state.metrics``)."""
        found: dict[bytes, bytes] = await self.redis.hgetall(keyspace.metrics())
        return found

    # -- the console's pages --------------------------------------------------------------

    async def newest_deliveries(self, since_ms: int, until_ms: int) -> list[tuple[int, str]]:
        """(created ms, id) of the newest deliveries of every shard created in
        [since_ms, until_ms] (0: no upper bound), newest first, at most :data:`SCAN_CAP`."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for s in keyspace.all_shards():
                pipe.zrevrangebyscore(
                    keyspace.shard_deliveries(s),
                    until_ms or "+inf",
                    since_ms,
                    start=0,
                    num=SCAN_CAP,
                    withscores=True,
                )
            per_shard = await pipe.execute()
        rows = [(int(score), raw.decode()) for rows in per_shard for raw, score in rows]
        rows.sort(reverse=True)
        return rows[:SCAN_CAP]

    async def delivery_hashes(self, ids: list[str]) -> list[tuple[dict[bytes, bytes], list[bytes]]]:
        """The stored hash and attempts of each delivery (an empty hash for one not there)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for ident in ids:
                shard = keyspace.shard_of_id("msg", ident) or 0
                pipe.hgetall(keyspace.delivery(shard, ident))
                pipe.lrange(keyspace.delivery_attempts(shard, ident), 0, -1)
            replies = await pipe.execute()
        return list(zip(replies[::2], replies[1::2], strict=True))

    async def delivery(self, delivery_id: str) -> Delivery | None:
        """Any account's delivery by id, with its attempts (None when there is none)."""
        if keyspace.shard_of_id("msg", delivery_id) is None:
            return None
        ((h, attempts),) = await self.delivery_hashes([delivery_id])
        return Delivery.from_hash(h, attempts) if h else None

    @staticmethod
    def batch_of(delivery: Delivery) -> BatchRef:
        """The batch of a delivery, in the shard its id names (a batch's deliveries live in
        its shard)."""
        shard = keyspace.shard_of_id("msg", delivery.id)
        return BatchRef(delivery.account, delivery.batch_name, shard)

    async def locate(self, account: str, name: str) -> BatchRef:
        """The account's batch of that name, in the shard it lives in."""
        return await locate_batch(self.redis, account, name)

    async def webhooks_of(self, refs: list[BatchRef]) -> list[Webhook | None]:
        """The webhook of each batch (None where it has none)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for ref in refs:
                pipe.hgetall(keyspace.webhook(ref.shard, ref.account, ref.name))
            replies: list[Any] = await pipe.execute()
        return [
            Webhook.from_hash(ref.name, h) if h else None
            for ref, h in zip(refs, replies, strict=True)
        ]

    async def due_backlog(self, now: int) -> tuple[int, int | None, dict[bytes, bytes]]:
        """(deliveries due by ``now``, when the oldest of them came due or None, the flushed
        counters) in one round trip: the console overview's numbers."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for s in keyspace.all_shards():
                pipe.zcount(keyspace.due(s), "-inf", now)
                pipe.zrange(keyspace.due(s), 0, 0, withscores=True)
            pipe.hgetall(keyspace.metrics())
            replies = await pipe.execute()
        backlog = sum(int(n) for n in replies[0:-1:2])
        oldest = [int(rows[0][1]) for rows in replies[1:-1:2] if rows and rows[0][1] <= now]
        return backlog, (min(oldest) if oldest else None), replies[-1]
