"""What an acknowledged write means: with ``RELAY_REDIS_WAIT_REPLICAS`` > 0 the API answers an
upload, a process request or a webhook registration only once that many replicas have it, or
once ``RELAY_REDIS_WAIT_TIMEOUT_MS`` has passed (then it answers anyway, logs a warning and
counts ``relay_replica_wait_timeouts_total``): availability first, and a measure of how often
an acknowledged write was on the primary alone (docs/decisions.md, "Durability across a
failover").

Except when the shortfall is a failover under way (through Sentinel): a Sentinel reports a
failover in progress, or names another primary than the one written to. The replica has been
(or is being) promoted, and the node the write went to will be made its replica, dropping the
write: the API answers 503 (:class:`relay.exceptions.StoreUnavailable`) and the client's retry
goes to the new primary. This is the case of a graceful ``SENTINEL FAILOVER``: the old primary
takes writes until the Sentinels demote it, and without the check every one of them would be
acknowledged and lost. (A write answered 503 may have reached the replica all the same: an
upload retried with its ``Idempotency-Key`` then answers that document, not a second one.)

Redis ``WAIT`` counts the replicas that have the writes *of the connection it is sent on*; the
request's writes went out on whatever pooled connections (and RQ's enqueue on another client).
So the wait rides on a marker write of its own, sent with ``WAIT`` on one connection: Redis
replicates one ordered stream, so a replica that acknowledged the marker has every write that
finished before it, the request's included. On a Redis Cluster the marker is a counter in
the written shard's slot (``keyspace.replica_waits``), sent with ``WAIT`` on one connection to the
primary of that slot: each primary replicates its own stream.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import redis.asyncio
from redis.exceptions import RedisError

from relay.config import Settings
from relay.exceptions import StoreUnavailable
from relay.redis import keyspace
from relay.redis.clients import is_cluster

log = logging.getLogger("relay.api")

WAITS = "relay_replica_waits_total|"
TIMEOUTS = "relay_replica_wait_timeouts_total|"


async def replicated(
    client: redis.asyncio.Redis, settings: Settings, what: str, shard: int = 0
) -> bool:
    """Wait until the configured number of replicas have every write made so far (on a
    Cluster: those to the primary of ``shard``, the shard written); True when they do (or
    none is asked for), False when the wait timed out or could not be made. Through Sentinel,
    raises StoreUnavailable when it falls short during a failover (module docstring), and
    through Sentinel or on a Cluster when the connection was lost (a failover, most likely)."""
    wanted = settings.redis_wait_replicas
    if wanted <= 0:
        return True
    sentinel = getattr(client, "sentinel", None)
    cluster = is_cluster(client)
    try:
        if cluster:
            timeout = settings.redis_wait_timeout_ms
            replies: list[Any] = [None, await _wait_on_shard(client, shard, wanted, timeout)]
            await client.hincrby(keyspace.metrics(), WAITS, 1)
        else:
            async with client.pipeline(transaction=False) as pipe:
                pipe.hincrby(keyspace.metrics(), WAITS, 1)
                pipe.execute_command("WAIT", wanted, settings.redis_wait_timeout_ms)
                if sentinel is not None:  # which node this connection wrote to
                    pipe.execute_command("INFO", "server")
                replies = await pipe.execute()
    except RedisError as exc:
        # The write itself was acknowledged by the primary; only its replication is unknown.
        log.warning("%s: could not wait for %d replica(s): %s", what, wanted, exc)
        if sentinel is not None or cluster:
            # Through Sentinel a connection lost after the write is most likely a failover:
            # the write may be on a primary about to be demoted. Not acknowledged.
            raise StoreUnavailable(f"{what}: the primary was lost; try again") from exc
        return False
    acked = replies[1]
    if int(acked) >= wanted:
        return True
    node = ""
    if sentinel is not None:
        info = replies[2]
        await _refuse_during_failover(client, sentinel, _text(info.get("run_id")), what)
        node = f" on the node of port {info.get('tcp_port')}"
    log.warning(
        "%s: acknowledged with %d of %d replica(s) after %d ms%s (a failover now could lose it)",
        what,
        acked,
        wanted,
        settings.redis_wait_timeout_ms,
        node,
    )
    with contextlib.suppress(RedisError):  # the warning above tells all the same
        await client.hincrby(keyspace.metrics(), TIMEOUTS, 1)
    return False


async def _wait_on_shard(client: Any, shard: int, wanted: int, timeout_ms: int) -> int:
    """``INCR`` of the shard's marker and ``WAIT`` on one connection to its primary."""
    marker = keyspace.replica_waits(shard)
    node = client.get_node_from_key(marker)
    conn = node.acquire_connection()
    try:
        await conn.send_packed_command(
            conn.pack_commands([("INCR", marker), ("WAIT", wanted, timeout_ms)])
        )
        await conn.read_response()
        acked = await conn.read_response()
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        node.release(conn)
    if isinstance(acked, Exception):
        raise acked
    return int(acked)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


async def _refuse_during_failover(
    client: redis.asyncio.Redis, sentinel: Any, run_id: str, what: str
) -> None:
    """Raise StoreUnavailable when a Sentinel reports a failover in progress, or names as
    primary another node than the one written to (compared by run id: the address a pooled
    connection went to is not known once the pool has moved on); nothing when the Sentinels
    cannot be asked."""
    service = getattr(client.connection_pool, "service_name", None)
    if service is None:
        return
    for each in sentinel.sentinels:
        try:
            state = (await each.sentinel_masters()).get(service)
        except RedisError:
            continue
        if state is None:
            continue
        # No run id yet: the Sentinels switched to a primary they have not asked INFO of yet
        # (within a second of a failover): not known to be the node written to.
        named = _text(state.get("runid"))
        moved = not named or not run_id or named != run_id
        if moved or "failover_in_progress" in _text(state.get("flags")):
            log.warning("%s: not acknowledged, a failover is under way (503)", what)
            raise StoreUnavailable(f"{what}: a failover is under way; try again")
