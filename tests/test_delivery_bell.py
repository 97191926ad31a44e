"""The delivery bell (``relay.delivery.engine``): while an engine has a free slot it holds
every shard's wake-up marker and takes wake-ups from the bell, so a wake-up enqueues no RQ
job; a full or stopped engine lets the markers go and jobs wake the engines again."""

from __future__ import annotations

from relay.delivery.engine import run_due
from relay.redis import keyspace
from relay.runtime.context import WorkerContext
from relay.state import job_queues
from relay.state.job_queues import DELIVERY, queue_key
from tests.support.helpers import wait_until, worker_context


def _held(ctx: WorkerContext) -> list[bool]:
    client = ctx.queue_redis
    return [bool(client.exists(keyspace.wake(s))) for s in keyspace.all_shards()]


def test_a_listening_engine_takes_wake_ups_from_the_bell(redis_url: str) -> None:
    ctx = worker_context(redis_url)
    client = ctx.queue_redis
    try:
        engine = ctx.engine  # started: it listens
        wait_until(lambda: all(_held(ctx)), 5, 0.02, "the engine holds no marker")
        assert job_queues.wake(client, 3, ctx.settings) is False  # rung, no job
        assert client.llen(queue_key(DELIVERY)) == 0
        wait_until(lambda: client.llen(keyspace.delivery_wakeups()) == 0, 5, 0.02, "bell not taken")
        engine.close(5)
        assert not any(_held(ctx))  # dropped at once, not left to expire
        assert job_queues.wake(client, 3, ctx.settings) is True  # a job again
        assert client.llen(queue_key(DELIVERY)) == 1
        assert client.pttl(keyspace.delivery_wakeups()) > 0  # no engine: the rings expire
    finally:
        ctx.redis.close()


def test_an_engine_with_every_slot_taken_lets_the_markers_go(redis_url: str) -> None:
    ctx = worker_context(redis_url, RELAY_DELIVERY_CONCURRENCY="1")
    client = ctx.queue_redis
    try:
        engine = ctx.engine
        wait_until(lambda: all(_held(ctx)), 5, 0.02, "the engine holds no marker")
        assert engine.slots.take("http://busy.example:80")  # its one slot in use
        wait_until(
            lambda: not any(_held(ctx)), job_queues.ENGINE_HOLD_MS / 1000 + 3, 0.05, "still held"
        )
        assert job_queues.wake(client, 5, ctx.settings) is True  # another worker's engine, by a job
        engine.slots.release("http://busy.example:80", True)
        wait_until(lambda: all(_held(ctx)), 5, 0.02, "not held again")
        engine.close(5)
    finally:
        ctx.redis.close()


def test_a_delivery_job_does_not_undo_the_hold_of_its_processs_listening_engine(
    redis_url: str,
) -> None:
    """A job enqueued before the engine listened runs after it holds the markers: it must
    leave them held, or every wake-up of its shard would be a job until the next hold."""
    ctx = worker_context(redis_url)
    client = ctx.queue_redis
    try:
        engine = ctx.engine
        wait_until(lambda: all(_held(ctx)) and engine.holding, 5, 0.02, "not holding")
        assert run_due(ctx, 3) == "engine woken"
        assert _held(ctx)[3]
        assert job_queues.wake(client, 3, ctx.settings) is False  # rung, still no job
        engine.close(5)
        assert not engine.holding
        # With no engine holding them, the job clears its shard's marker as before.
        client.set(keyspace.wake(3), b"1")
        assert run_due(ctx, 3) == "engine woken"
        assert not _held(ctx)[3]
    finally:
        ctx.redis.close()
