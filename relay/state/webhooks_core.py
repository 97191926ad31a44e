"""What the sync and async webhook stores do, written once, without I/O.

An operation is a generator (httpcore's sans-I/O style): it *yields* a round, the Redis calls
to send in one pipelined round trip, is *sent* their replies, and *returns* its result; an
error reply (a script's refusal) is *thrown* into it, where it becomes a domain error.
:func:`run` and :func:`run_async` are the two thin executors; ``WebhookStore`` and
``AsyncWebhookStore`` call one each, so a change to what a search, a recovery, a retry or a
release sends or how it reads the replies is made in one place for both. The event feeds'
page (``relay.state.event_feed.feed_page``) is an operation too, run by ``EventLog`` and
``AsyncEventLog`` the same way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from redis.exceptions import ResponseError

from relay.exceptions import DeliveryNotFound, NotRetryable, StateError
from relay.redis import keyspace
from relay.redis.clients import is_cluster
from relay.state.delivery_search import (
    DeliveryQuery,
    RecoverRun,
    Recovery,
    decode_cursor,
    encode_cursor,
    merge_pages,
    page_calls,
)
from relay.state.model import Delivery, DeliveryStatus
from relay.state.scripts import refusal
from relay.state.store import BatchRef

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """One Redis call of a round: a command (``hgetall``, ``lrange`` ...) or, when
    ``script`` is set, that Lua script with ``args`` = (KEYS, ARGV)."""

    command: str
    args: tuple[Any, ...]
    script: bool = False


Round = list[Call]
Operation = Generator[Round, list[Any], T]


def script(name: str, keys_: list[str], args: list[Any]) -> Call:
    return Call(name, (keys_, args), script=True)


def _queue(pipe: Any, scripts: Any, call: Call) -> Any:
    if call.script:
        return scripts.run(call.command, *call.args, pipe)
    return getattr(pipe, call.command)(*call.args)


def _first_error(replies: list[Any]) -> list[Any]:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _cluster_round(client: Any, scripts: Any, calls: Round) -> list[Any]:
    """A round on a Redis Cluster: each script on its own (the client loads a script a node
    lacks and runs it again, which its pipeline does not do: a promoted replica starts with
    no script), the commands between them pipelined; every call is sent, then the first
    error raised, as a pipeline does."""
    replies: list[Any] = []
    pending: list[Call] = []

    def flush() -> None:
        if pending:
            with client.pipeline(transaction=False) as pipe:
                for call in pending:
                    _queue(pipe, scripts, call)
                replies.extend(pipe.execute(raise_on_error=False))
            pending.clear()

    for call in calls:
        if not call.script:
            pending.append(call)
            continue
        flush()
        try:
            replies.append(scripts(call.command, *call.args))
        except ResponseError as exc:
            replies.append(exc)
    flush()
    return _first_error(replies)


async def _cluster_round_async(client: Any, scripts: Any, calls: Round) -> list[Any]:
    """:func:`_cluster_round` on a ``redis.asyncio`` Cluster client."""
    replies: list[Any] = []
    pending: list[Call] = []

    async def flush() -> None:
        if pending:
            async with client.pipeline(transaction=False) as pipe:
                for call in pending:
                    _queue(pipe, scripts, call)
                replies.extend(await pipe.execute(raise_on_error=False))
            pending.clear()

    for call in calls:
        if not call.script:
            pending.append(call)
            continue
        await flush()
        try:
            replies.append(await scripts(call.command, *call.args))
        except ResponseError as exc:
            replies.append(exc)
    await flush()
    return _first_error(replies)


def _round(client: Any, scripts: Any, calls: Round) -> list[Any]:
    if len(calls) == 1:  # sent on its own: a pipeline holding a script adds SCRIPT EXISTS
        call = calls[0]
        if call.script:
            return [scripts(call.command, *call.args)]
        return [getattr(client, call.command)(*call.args)]
    if is_cluster(client):
        return _cluster_round(client, scripts, calls)
    with client.pipeline(transaction=False) as pipe:
        for call in calls:
            _queue(pipe, scripts, call)
        # The first error raised as the server sent it (execute's own raise rewords it).
        return _first_error(pipe.execute(raise_on_error=False))


async def _round_async(client: Any, scripts: Any, calls: Round) -> list[Any]:
    if len(calls) == 1:  # as in _round
        call = calls[0]
        if call.script:
            return [await scripts(call.command, *call.args)]
        return [await getattr(client, call.command)(*call.args)]
    if is_cluster(client):
        return await _cluster_round_async(client, scripts, calls)
    async with client.pipeline(transaction=False) as pipe:
        for call in calls:
            queued = _queue(pipe, scripts, call)
            if inspect.isawaitable(queued):  # a script on an asyncio pipeline
                await queued
        return _first_error(await pipe.execute(raise_on_error=False))


class _Driver(Generic[T]):
    """Steps one operation: the round it asks for (``calls``), until it has returned
    (``done``, ``result``). The generator protocol is handled here, once for both executors."""

    def __init__(self, op: Operation[T]) -> None:
        self.op = op
        self.calls: Round = []
        self.done = False
        self.result: T | None = None
        self._step(lambda: next(op))

    def send(self, outcome: list[Any] | ResponseError) -> None:
        """The round's replies, or its first error reply (thrown into the operation)."""
        if isinstance(outcome, ResponseError):
            self._step(lambda: self.op.throw(outcome))
        else:
            self._step(lambda: self.op.send(outcome))

    def _step(self, step: Callable[[], Round]) -> None:
        try:
            self.calls = step()
        except StopIteration as stop:
            self.done, self.result = True, stop.value


# In both executors an error the operation raises itself propagates: one caught by their
# `except` is thrown back into the finished generator, which raises it again at once.


def run(client: Any, scripts: Any, op: Operation[T]) -> T:
    """Run ``op`` on a synchronous redis-py client, one pipelined round trip per round; the
    first error reply of a round is thrown into ``op``."""
    d = _Driver(op)
    while not d.done:
        try:
            d.send(_round(client, scripts, d.calls))
        except ResponseError as exc:
            d.send(exc)
    return cast(T, d.result)


async def run_async(client: Any, scripts: Any, op: Operation[T]) -> T:
    """:func:`run` on a ``redis.asyncio`` client."""
    d = _Driver(op)
    while not d.done:
        try:
            d.send(await _round_async(client, scripts, d.calls))
        except ResponseError as exc:
            d.send(exc)
    return cast(T, d.result)


# -- the operations -------------------------------------------------------------------------


def load_calls(ids: list[str]) -> Round:
    """Each delivery's hash and attempts (the shard follows from the id)."""
    out: Round = []
    for ident in ids:
        shard = keyspace.shard_of_id("msg", ident)
        if shard is None:
            raise ValueError(f"not a delivery id: {ident!r}")
        out.append(Call("hgetall", (keyspace.delivery(shard, ident),)))
        out.append(Call("lrange", (keyspace.delivery_attempts(shard, ident), 0, -1)))
    return out


def loaded(replies: list[Any]) -> list[Delivery]:
    """The deliveries of :func:`load_calls`' replies, in order (ones gone meanwhile left out)."""
    return [
        Delivery.from_hash(h, attempts)
        for h, attempts in zip(replies[::2], replies[1::2], strict=True)
        if h
    ]


def load(ids: list[str]) -> Operation[list[Delivery]]:
    """The deliveries with their attempts, in the order of ``ids`` (one round trip)."""
    if not ids:
        return []
    return loaded((yield load_calls(ids)))


def retry_call(
    shard: int, delivery_id: str, ref: BatchRef, now: int
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of ``retry_delivery`` for the delivery of ``ref``'s webhook."""
    return (
        [
            keyspace.delivery(shard, delivery_id),
            keyspace.due(shard),
            keyspace.webhook(shard, ref.account, ref.name),
            keyspace.delivery_attempts(shard, delivery_id),
        ],
        [delivery_id, now],
    )


def _retry_refusal(delivery_id: str, exc: ResponseError) -> StateError | ResponseError:
    """The domain error for the retry script's refusal (the reply itself otherwise)."""
    reason = refusal(exc)
    if reason == "missing":
        return DeliveryNotFound(f"no delivery {delivery_id!r}")
    if reason in NotRetryable.MESSAGES:
        return NotRetryable(reason)
    return exc


def retry(delivery_id: str, owner: BatchRef | None, now: int) -> Operation[Delivery]:
    """Deliver again now, same webhook-id: the delivery when it is ``owner``'s (any batch's
    with None: operators), read back after the retry. Three round trips. Raises
    DeliveryNotFound, NotRetryable."""
    missing = DeliveryNotFound(
        f"no delivery {delivery_id!r}" + ("" if owner is None else " for this batch")
    )
    shard = keyspace.shard_of_id("msg", delivery_id)
    if shard is None or (owner is not None and shard != owner.shard):
        raise missing
    (found,) = yield [Call("hmget", (keyspace.delivery(shard, delivery_id), ["account", "batch"]))]
    if found[0] is None or found[1] is None:
        raise missing
    ref = BatchRef(found[0].decode(), found[1].decode(), shard)  # its batch's shard
    if owner is not None and ref != owner:
        raise missing
    k, a = retry_call(shard, delivery_id, ref, now)
    try:
        yield [script("retry_delivery", k, a)]
    except ResponseError as exc:
        raise _retry_refusal(delivery_id, exc) from exc
    done = loaded((yield load_calls([delivery_id])))
    if not done:  # only if deleted by hand meanwhile
        raise missing
    return done[0]


def release(claimed: list[tuple[int, str]], token: str, due_at: int) -> Operation[int]:
    """Hand claimed deliveries (shard, id) back unattempted, due again at ``due_at`` (ms), in
    one round trip; how many were still ours to hand back."""
    if not claimed:
        return 0
    replies = yield [
        script("release_delivery", [keyspace.delivery(s, i), keyspace.due(s)], [i, token, due_at])
        for s, i in claimed
    ]
    return sum(int(r) for r in replies)


def search(
    q: DeliveryQuery, limit: int, cursor: str | None
) -> Operation[tuple[list[Delivery], str | None]]:
    """One page of the exact, indexed search (``relay.state.delivery_search``): two round trips."""
    calls = page_calls(q, limit, decode_cursor(cursor))
    pages = yield [script("delivery_page", k, a) for _, k, a in calls]
    page, after = merge_pages(pages, limit)
    if not page:
        return [], None
    found = yield load_calls([ident for _, ident in page])
    return loaded(found), encode_cursor(after)


def recover(
    run_: RecoverRun, progress: Callable[[Recovery], None] | None = None
) -> Operation[Recovery]:
    """Chunked server-side recovery, one round trip per round of chunks."""
    while run_.pending:
        calls = run_.calls()
        replies = yield [script("recover_deliveries", k, a) for _, k, a in calls]
        run_.feed([s for s, _, _ in calls], replies)
        if progress is not None:
            progress(run_.result)
    return run_.result


def query(
    account: str | None,
    status: DeliveryStatus | str | None,
    batch: str | None,
    since_ms: int | None,
    until_ms: int | None,
) -> DeliveryQuery:
    return DeliveryQuery(
        account=account,
        status=None if status is None else DeliveryStatus(status),
        batch=batch,
        since_ms=since_ms,
        until_ms=until_ms,
    )
