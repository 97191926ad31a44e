"""What an acknowledged write means: with ``RELAY_REDIS_WAIT_REPLICAS`` > 0 the API answers an
upload, a process request, a webhook registration or removal (a batch's or the operational
one), a batch's deletion and a signing rotation (or the first read, which makes the
material) only once that many replicas have it, or once ``RELAY_REDIS_WAIT_TIMEOUT_MS`` has
passed (then it answers anyway, logs a warning and counts
``relay_replica_wait_timeouts_total``): availability first, and a measure of how often an
acknowledged write was on the primary alone (docs/decisions.md, "Durability across a
failover"). The CLI waits the same way after the account-level writes
it makes (``relay keys create`` and ``revoke``: :func:`replicated_sync`) and says so when
the replicas did not confirm (``relay.cli.keys``).

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
the written shard's slot (``keyspace.replica_waits``), or for a key of no shard in that key's slot
(``keyspace.replica_wait_marker``), sent with ``WAIT`` on one connection to the primary of that
slot: each primary replicates its own stream.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import RedisError

from relay.config import Settings
from relay.exceptions import StoreUnavailable
from relay.redis import keyspace
from relay.redis.clients import is_cluster

log = logging.getLogger("relay.api")

WAITS = "relay_replica_waits_total|"
TIMEOUTS = "relay_replica_wait_timeouts_total|"


# How long a key's marker (keyspace.replica_wait_marker) outlives its wait.
_MARKER_MS = 60_000


def _marker(shard: int, key: str | None) -> tuple[Any, ...]:
    """The marker write of a wait on a Cluster: the shard's counter, or a key's marker."""
    if key is None:
        return ("INCR", keyspace.replica_waits(shard))
    return ("SET", keyspace.replica_wait_marker(key), "1", "PX", _MARKER_MS)


async def replicated(
    client: redis.asyncio.Redis,
    settings: Settings,
    what: str,
    shard: int = 0,
    *,
    key: str | None = None,
) -> bool:
    """Wait until the configured number of replicas have every write made so far (on a
    Cluster: those to the primary of ``shard``, the shard written, or with ``key``, of that
    key's slot: a key of no shard); True when they do (or none is asked for), False when the
    wait timed out or could not be made. Through Sentinel, raises StoreUnavailable when it
    falls short during a failover (module docstring), and through Sentinel or on a Cluster
    when the connection was lost (a failover, most likely)."""
    wanted = settings.redis_wait_replicas
    if wanted <= 0:
        return True
    sentinel = getattr(client, "sentinel", None)
    cluster = is_cluster(client)
    try:
        if cluster:
            timeout = settings.redis_wait_timeout_ms
            acked = await _wait_on_shard(client, _marker(shard, key), wanted, timeout)
            replies: list[Any] = [None, acked]
            await client.hincrby(keyspace.metrics(), WAITS, 1)
        else:
            async with client.pipeline(transaction=False) as pipe:
                pipe.hincrby(keyspace.metrics(), WAITS, 1)
                pipe.execute_command("WAIT", wanted, settings.redis_wait_timeout_ms)
                if sentinel is not None:  # which node this connection wrote to
                    pipe.execute_command("INFO", "server")
                replies = await pipe.execute()
    except RedisError as exc:
        _lost(what, wanted, exc, sentinel is not None or cluster)
        return False
    acked = replies[1]
    if int(acked) >= wanted:
        return True
    node = ""
    if sentinel is not None:
        info = replies[2]
        await _refuse_during_failover(client, sentinel, _text(info.get("run_id")), what)
        node = f" on the node of port {info.get('tcp_port')}"
    _short(what, int(acked), wanted, settings, node)
    with contextlib.suppress(RedisError):  # the warning above tells all the same
        await client.hincrby(keyspace.metrics(), TIMEOUTS, 1)
    return False


def _lost(what: str, wanted: int, exc: RedisError, failover: bool) -> None:
    """The wait could not be made: the write itself was acknowledged by the primary, only its
    replication is unknown. Through Sentinel or on a Cluster a connection lost after the
    write is most likely a failover, and the write may be on a primary about to be demoted:
    StoreUnavailable (not acknowledged)."""
    log.warning("%s: could not wait for %d replica(s): %s", what, wanted, exc)
    if failover:
        raise StoreUnavailable(f"{what}: the primary was lost; try again") from exc


def _short(what: str, acked: int, wanted: int, settings: Settings, node: str) -> None:
    log.warning(
        "%s: acknowledged with %d of %d replica(s) after %d ms%s (a failover now could lose it)",
        what,
        acked,
        wanted,
        settings.redis_wait_timeout_ms,
        node,
    )


def replicated_sync(
    client: redis.Redis, settings: Settings, what: str, written: Sequence[str]
) -> bool:
    """:func:`replicated` for a synchronous client (the CLI), after writes of the keys
    ``written`` (each a key of no shard: on a Cluster the wait is made on the primary of
    each one's slot, and True only when every one of them confirms). Raises StoreUnavailable
    as :func:`replicated` does."""
    wanted = settings.redis_wait_replicas
    if wanted <= 0 or not written:
        return True
    sentinel = getattr(client, "sentinel", None)
    cluster = is_cluster(client)
    timeout = settings.redis_wait_timeout_ms
    try:
        if cluster:
            acked = min(
                _wait_on_node_sync(client, markers, wanted, timeout)
                for markers in _markers_by_node(client, written)
            )
            replies: list[Any] = [None, acked]
            client.hincrby(keyspace.metrics(), WAITS, 1)
        else:
            with client.pipeline(transaction=False) as pipe:
                pipe.hincrby(keyspace.metrics(), WAITS, 1)
                pipe.execute_command("WAIT", wanted, timeout)
                if sentinel is not None:
                    pipe.execute_command("INFO", "server")
                replies = pipe.execute()
    except RedisError as exc:
        _lost(what, wanted, exc, sentinel is not None or cluster)
        return False
    acked = int(replies[1])
    if acked >= wanted:
        return True
    node = ""
    if sentinel is not None:
        info = replies[2]
        service = getattr(client.connection_pool, "service_name", None)
        for state in _sentinel_states(sentinel, service):
            _check_failover(state, _text(info.get("run_id")), what)
        node = f" on the node of port {info.get('tcp_port')}"
    _short(what, acked, wanted, settings, node)
    with contextlib.suppress(RedisError):
        client.hincrby(keyspace.metrics(), TIMEOUTS, 1)
    return False


def _markers_by_node(client: Any, written: Sequence[str]) -> list[list[tuple[Any, ...]]]:
    """The markers of ``written`` grouped by the primary that holds their slots."""
    by_node: dict[str, list[tuple[Any, ...]]] = {}
    for key in written:
        marker = _marker(0, key)
        by_node.setdefault(client.get_node_from_key(marker[1]).name, []).append(marker)
    return list(by_node.values())


def _wait_on_node_sync(
    client: Any, markers: list[tuple[Any, ...]], wanted: int, timeout_ms: int
) -> int:
    """The markers and ``WAIT`` on one connection to the primary holding their slots."""
    node = client.get_node_from_key(markers[0][1])
    with node.redis_connection.pipeline(transaction=False) as pipe:
        for marker in markers:
            pipe.execute_command(*marker)
        pipe.execute_command("WAIT", wanted, timeout_ms)
        return int(pipe.execute()[-1])


def _sentinel_states(sentinel: Any, service: str | None) -> list[dict[str, Any]]:
    """What each Sentinel that answers says of ``service`` (synchronous clients)."""
    if service is None:
        return []
    states = []
    for each in sentinel.sentinels:
        try:
            state = each.sentinel_masters().get(service)
        except RedisError:
            continue
        if state is not None:
            states.append(state)
    return states


def _check_failover(state: dict[str, Any], run_id: str, what: str) -> None:
    """Raise StoreUnavailable when a Sentinel's ``state`` of the service reports a failover
    in progress, or names as primary another node than the one written to (compared by run
    id: the address a pooled connection went to is not known once the pool has moved on)."""
    # No run id yet: the Sentinels switched to a primary they have not asked INFO of yet
    # (within a second of a failover): not known to be the node written to.
    named = _text(state.get("runid"))
    moved = not named or not run_id or named != run_id
    if moved or "failover_in_progress" in _text(state.get("flags")):
        log.warning("%s: not acknowledged, a failover is under way (503)", what)
        raise StoreUnavailable(f"{what}: a failover is under way; try again")


async def _wait_on_shard(client: Any, marker: tuple[Any, ...], wanted: int, timeout_ms: int) -> int:
    """The marker write and ``WAIT`` on one connection to the primary of its slot."""
    node = client.get_node_from_key(marker[1])
    conn = node.acquire_connection()
    try:
        await conn.send_packed_command(conn.pack_commands([marker, ("WAIT", wanted, timeout_ms)]))
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
        if state is not None:
            _check_failover(state, run_id, what)
