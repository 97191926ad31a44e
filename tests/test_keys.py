"""Key names: the Lua key functions the scripts derive keys with, written from those of
relay.redis.keyspace, build exactly what they build; script refusals are read back exactly."""

from __future__ import annotations

import inspect

import pytest
import redis
from redis.exceptions import ResponseError

from relay.redis import keyspace
from relay.state.model import valid_batch_name
from relay.state.scripts import all_helpers, lua_key_function, refusal


def _lib() -> str:
    """Every helper a script may use, in the order a script gets them
    (``relay.state.scripts.source``)."""
    return "".join(text for _, text in all_helpers())


def _lua(client: redis.Redis, expr: str, *args: str) -> str:
    """Evaluate ``expr`` after the shared helpers."""
    return bytes(client.eval(f"{_lib()}\nreturn {expr}", 0, *args)).decode()


_SAMPLES = {"account": "acme", "name": "b-1.x", "status": "failed", "token": "0f1e2d3c4b5a6978"}


@pytest.mark.parametrize("shard", [0, 7, keyspace.DEFAULT_SHARDS - 1])
def test_the_scripts_key_functions_build_what_keyspace_builds(
    redis: redis.Redis, shard: int
) -> None:
    """Each key function the scripts call, written in Lua from keyspace's own, gives the
    same key for real values (ids, names with dots and dashes, the operational batch)."""
    p = keyspace.shard_prefix(shard)
    samples = {
        **_SAMPLES,
        "doc_id": keyspace.new_id("doc", shard),
        "delivery_id": keyspace.new_id("msg", shard),
        "index": "12",
        "kind": "s3",
    }
    assert len(keyspace.IN_SCRIPTS) >= 20
    for fn_name, fn in keyspace.IN_SCRIPTS.items():
        params = list(inspect.signature(fn).parameters)
        sharded = params[0] == "shard"
        values = [samples[n] for n in (params[1:] if sharded else params)]
        lua_name = f"key_{fn_name}" if sharded else fn_name
        argv = ([p] if sharded else []) + values
        expr = f"{lua_name}({', '.join(f'ARGV[{i + 1}]' for i in range(len(argv)))})"
        expected = fn(shard, *values) if sharded else fn(*values)
        assert _lua(redis, expr, *argv) == expected, fn_name
    for batch in ("~ops", keyspace.OPERATIONAL_BATCH):
        assert _lua(redis, "key_webhook(ARGV[1], 'acme', ARGV[2])", p, batch) == (
            keyspace.webhook(shard, "acme", batch)
        )
    doc_id = samples["doc_id"]
    member = keyspace.slice_member(doc_id, 12)
    assert _lua(redis, "slice_member(ARGV[1], 12)", doc_id) == member
    assert _lua(redis, "table.concat({parse_slice(ARGV[1])}, ' ')", member) == f"{doc_id} 12"
    assert _lua(redis, "tostring(parse_slice(ARGV[1]))", doc_id) == "nil"  # a document's id
    assert keyspace.slice_of(member) == (doc_id, 12)
    assert keyspace.slice_of(doc_id) == (doc_id, None)


def test_a_key_function_the_scripts_cannot_write_is_refused() -> None:
    """A key outside the shard, or one whose text Lua would need to escape, is refused when
    the scripts are written, not built wrong."""

    def outside(shard: int, account: str) -> str:
        return f"relay:account:{account}"

    def quoted(shard: int, name: str) -> str:
        return keyspace.shard_prefix(shard) + f"it's:{name}"

    for fn in (outside, quoted):
        with pytest.raises(ValueError, match=fn.__name__):
            lua_key_function(fn)


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
