"""Key names: the Lua helpers that derive keys from ids build exactly what relay.redis.keyspace
does, and script refusals are read back exactly."""

from __future__ import annotations

from importlib import resources

import pytest
import redis
from redis.exceptions import ResponseError

from relay.redis import keyspace
from relay.state.model import valid_batch_name
from relay.state.scripts import refusal


def _lib() -> str:
    """The shared helpers, all of them (``_lib.lua``, then ``_fair.lua``): a script starts with
    those it uses, in this order (``relay.state.scripts.source``)."""
    lua = resources.files("relay.state") / "lua"
    return (lua / "_lib.lua").read_text() + "\n" + (lua / "_fair.lua").read_text()


def _lua(client: redis.Redis, expr: str, *args: str) -> str:
    """Evaluate ``expr`` after the shared helpers."""
    return bytes(client.eval(f"{_lib()}\nreturn {expr}", 0, *args)).decode()


@pytest.mark.parametrize("shard", [0, 7, keyspace.DEFAULT_SHARDS - 1])
def test_lua_key_helpers_equal_the_python_ones(redis: redis.Redis, shard: int) -> None:
    p = keyspace.shard_prefix(shard)
    doc_id, msg_id = keyspace.new_id("doc", shard), keyspace.new_id("msg", shard)
    assert _lua(redis, "key_doc(ARGV[1], ARGV[2])", p, doc_id) == keyspace.doc(shard, doc_id)
    assert _lua(redis, "key_events(ARGV[1])", p) == keyspace.events(shard)
    for name, made, batch in [
        ("key_batch_deliveries", keyspace.batch_deliveries, "~ops"),
        ("key_delivery_by_seq", keyspace.batch_delivery_by_seq, "~ops"),
        ("key_batch_parked", keyspace.batch_parked, "~ops"),
        ("key_webhook", keyspace.webhook, "b-1.x"),
        ("key_batch", keyspace.batch, "b-1.x"),
        ("key_batch_started", keyspace.batch_started, "b-1.x"),
        ("key_batch_ready", keyspace.batch_ready, "b-1.x"),
    ]:
        expr = f"{name}(ARGV[1], ARGV[2], ARGV[3])"
        assert _lua(redis, expr, p, "acme", batch) == made(shard, "acme", batch), name
    assert _lua(redis, "key_blob(ARGV[1], ARGV[2])", p, doc_id) == keyspace.blob(shard, doc_id)
    assert _lua(redis, "key_delivery(ARGV[1], ARGV[2])", p, msg_id) == keyspace.delivery(
        shard, msg_id
    )
    assert _lua(
        redis, "key_delivery_attempts(ARGV[1], ARGV[2])", p, msg_id
    ) == keyspace.delivery_attempts(shard, msg_id)
    assert _lua(redis, "key_fair_account(ARGV[1], ARGV[2])", p, "acme") == keyspace.fair_account(
        shard, "acme"
    )
    assert _lua(redis, "key_fair_ring(ARGV[1])", p) == keyspace.fair_ring(shard)
    assert _lua(redis, "key_waiting(ARGV[1])", p) == keyspace.waiting(shard)
    assert _lua(redis, "key_waiting_slices(ARGV[1])", p) == keyspace.waiting_slices(shard)
    assert _lua(redis, "key_doc_slices(ARGV[1], ARGV[2])", p, doc_id) == keyspace.doc_slices(
        shard, doc_id
    )
    member = keyspace.slice_member(doc_id, 12)
    assert _lua(redis, "slice_member(ARGV[1], 12)", doc_id) == member
    assert _lua(redis, "table.concat({parse_slice(ARGV[1])}, ' ')", member) == f"{doc_id} 12"
    assert _lua(redis, "tostring(parse_slice(ARGV[1]))", doc_id) == "nil"  # a document's id
    assert keyspace.slice_of(member) == (doc_id, 12)
    assert keyspace.slice_of(doc_id) == (doc_id, None)
    assert _lua(redis, "key_doc_items(ARGV[1], ARGV[2])", p, doc_id) == keyspace.doc_items(
        shard, doc_id
    )
    assert _lua(redis, "key_finished(ARGV[1])", p) == keyspace.finished(shard)
    assert _lua(redis, "finished_member(ARGV[1], ARGV[2])", "acme", "b-1.x") == (
        keyspace.finished_member("acme", "b-1.x")
    )
    token = "0f1e2d3c4b5a6978"
    assert _lua(redis, "key_purge_docs(ARGV[1], ARGV[2])", p, token) == keyspace.purge_docs(
        shard, token
    )
    assert _lua(
        redis, "key_purge_deliveries(ARGV[1], ARGV[2])", p, token
    ) == keyspace.purge_deliveries(shard, token)
    assert _lua(redis, "key_account_deliveries(ARGV[1], ARGV[2])", p, "acme") == (
        keyspace.account_deliveries(shard, "acme")
    )
    assert _lua(redis, "key_status_deliveries(ARGV[1], ARGV[2])", p, "failed") == (
        keyspace.status_deliveries(shard, "failed")
    )
    assert _lua(
        redis, "key_account_status_deliveries(ARGV[1], ARGV[2], ARGV[3])", p, "acme", "failed"
    ) == keyspace.account_status_deliveries(shard, "acme", "failed")
    # The prefix a script finds back from a delivery key is the shard's.
    dk = keyspace.delivery(shard, msg_id)
    assert _lua(redis, "delivery_prefix(ARGV[1], ARGV[2])", dk, msg_id) == p
    # The prefix a script finds back from a batch key is the shard's.
    batch = keyspace.batch(shard, "acme", "b-1.x")
    assert _lua(redis, "batch_prefix(ARGV[1], ARGV[2], ARGV[3])", batch, "acme", "b-1.x") == p


def test_every_shard_key_carries_its_hash_tag() -> None:
    s = 5
    tagged = [
        keyspace.batch(s, "a", "b"),
        keyspace.doc(s, "doc_5x"),
        keyspace.leases(s),
        keyspace.batch_ready(s, "a", "b"),
        keyspace.fair_account(s, "a"),
        keyspace.fair_ring(s),
        keyspace.waiting(s),
        keyspace.waiting_slices(s),
        keyspace.doc_slices(s, "doc_5x"),
        keyspace.outbox(s),
        keyspace.due(s),
        keyspace.wake(s),
        keyspace.delivery(s, "msg_5x"),
        keyspace.shard_deliveries(s),
        keyspace.account_deliveries(s, "a"),
        keyspace.account_status_deliveries(s, "a", "failed"),
        keyspace.status_deliveries(s, "failed"),
        keyspace.finished(s),
        keyspace.purging(s),
        keyspace.purge_docs(s, "t"),
        keyspace.purge_deliveries(s, "t"),
    ]
    assert all(k.startswith(keyspace.shard_prefix(s)) for k in tagged)
    assert all(keyspace.tag(s) in k for k in tagged)


def test_ids_carry_their_shard() -> None:
    ident = keyspace.new_id("msg", 11)
    assert keyspace.shard_of_id("msg", ident) == 11
    assert keyspace.shard_of_id("doc", ident) is None
    assert keyspace.shard_of_id("msg", ident + "x") is None


def test_refusals_are_matched_exactly(redis: redis.Redis) -> None:
    with pytest.raises(ResponseError) as refused:
        redis.eval(f"{_lib()}\nreturn refuse('missing')", 0)
    assert refusal(refused.value) == "missing"
    # An error reply that merely mentions the word is not a refusal.
    with pytest.raises(ResponseError) as other:
        redis.eval("return redis.error_reply('ERR key missing somewhere')", 0)
    assert refusal(other.value) is None


def test_the_operational_pseudo_batch_is_the_same_in_lua_and_no_batch_name(
    redis: redis.Redis,
) -> None:
    assert _lua(redis, "OPERATIONAL_BATCH") == keyspace.OPERATIONAL_BATCH
    assert not valid_batch_name(keyspace.OPERATIONAL_BATCH)


def test_a_completion_id_is_derived_from_the_completion() -> None:
    ident = keyspace.completion_id(5, "acme", "b1", 1_700_000_000_123, 3)
    assert ident == keyspace.completion_id(5, "acme", "b1", 1_700_000_000_123, 3)
    assert keyspace.shard_of_id("msg", ident) == 5
    assert keyspace.event_time(ident) == 1_700_000_000_123  # never after the event
    others = {
        keyspace.completion_id(5, "acme", "b1", 1_700_000_000_124, 3),  # the batch made again
        keyspace.completion_id(5, "acme", "b1", 1_700_000_000_123, 4),  # the next completion
        keyspace.completion_id(5, "acme", "b2", 1_700_000_000_123, 3),
        keyspace.completion_id(5, "acme2", "b1", 1_700_000_000_123, 3),
        keyspace.completion_id(5, "acme\x00b", "1", 1_700_000_000_123, 3),
    }
    assert ident not in others and len(others) == 5
