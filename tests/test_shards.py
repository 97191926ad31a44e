"""RELAY_SHARDS: the counts of shards a deployment has used, and what follows from them (ids,
where a batch is looked for and created, the shards the loops walk)."""

from __future__ import annotations

import re
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from relay.cli import commands
from relay.config import load_settings
from relay.exceptions import ConfigError
from relay.redis import keyspace, shards
from relay.state.store import BatchQuery, BatchRef
from tests.test_store import Harness


@pytest.fixture(autouse=True)
def _restore_map() -> Iterator[None]:
    before = keyspace.shard_map()
    yield
    keyspace.use(before)


def _old_event_id(home: int, raised: int, entry_id: str) -> str:
    """The event id as relay wrote it before RELAY_SHARDS (4 + 48 + 48 bits)."""
    alphabet = "abcdefghijklmnopqrstuvwxyz234567"
    ms, _, seq = entry_id.partition("-")
    value = (raised << 96) | (int(ms) << 48) | (int(seq or 0) & ((1 << 48) - 1))
    return f"msg_{home:x}" + "".join(alphabet[(value >> (5 * i)) & 31] for i in reversed(range(20)))


@pytest.mark.parametrize("shard", [0, 15, 16, 200, 1023])
def test_ids_carry_their_shard_in_one_digit_below_16_and_three_from_16(shard: int) -> None:
    for kind in ("doc", "msg"):
        ident = keyspace.new_id(kind, shard)
        assert keyspace.shard_of_id(kind, ident) == shard
        assert len(ident) == (25 if shard < 16 else 27)
        assert re.fullmatch(keyspace.id_pattern(kind), ident)
    assert keyspace.shard_of_id("doc", "doc_3" + "a" * 20) == 3  # an id written before: unchanged
    assert keyspace.shard_of_id("doc", "doc_03" + "a" * 20) is None  # two digits: no such id


def test_event_ids_below_16_shards_are_unchanged_and_wider_ones_round_trip() -> None:
    entry = "1764600000123-7"
    for home, raised in [(0, 0), (3, 15), (15, 9)]:
        assert keyspace.event_id(home, raised, entry) == _old_event_id(home, raised, entry)
    ids = {keyspace.event_id(home, raised, entry) for home in (3, 40) for raised in (3, 40, 1023)}
    assert len(ids) == 6  # unique across the raising shard and the home shard
    for ident in ids:
        assert keyspace.event_time(ident) == 1764600000123
    assert keyspace.shard_of_id("msg", keyspace.event_id(40, 3, entry)) == 40
    assert keyspace.shard_of_id("msg", keyspace.event_id(3, 40, entry)) == 3
    for shard in (3, 40, 255):  # a completion's id: its batch's shard, its creation time
        for ident in (
            keyspace.completion_id(shard, "acme", "b", 1764600000123, 2),
            keyspace.fact_id(shard, 1764600000123, "acme", "delivery.failed", "msg_x", "3"),
        ):
            assert keyspace.shard_of_id("msg", ident) == shard
            assert keyspace.event_time(ident) == 1764600000123


def test_a_raised_count_takes_new_batches_from_its_time_and_keeps_the_old_places() -> None:
    keyspace.use(keyspace.ShardMap(((16, 0), (64, 10**15))))  # 64 not yet in force
    names = [f"b{i}" for i in range(200)]
    assert {keyspace.shard_for_batch("acme", n) for n in names} == set(range(16))
    assert keyspace.all_shards() == range(64)  # the loops already walk the new shards
    keyspace.use(keyspace.ShardMap(((16, 0), (64, 1))))
    placed = {keyspace.shard_for_batch("acme", n) for n in names}
    assert max(placed) >= 16 and placed <= set(range(64))
    for n in names:  # looked for where 16 shards put it, then where 64 do
        assert keyspace.batch_shards("acme", n)[0] == keyspace.batch_shards("acme", n)[-1] % 16
    # The reserved pseudo-batches stay under the first count.
    assert keyspace.events_shard("acme") < 16
    assert keyspace.home_shard("acme", keyspace.OPERATIONAL_BATCH) < 16


def test_register_records_the_first_count_raises_later_and_refuses_lower(
    redis: redis.Redis,
) -> None:
    first = shards.register(redis, 16, 5_000, now_ms=1_000)
    assert first.counts == ((16, 0),)
    assert shards.register(redis, 16, 5_000, now_ms=2_000).counts == ((16, 0),)
    raised = shards.register(redis, 64, 5_000, now_ms=3_000)
    assert raised.counts == ((16, 0), (64, 8_000))
    assert raised.current(7_999) == 16 and raised.current(8_000) == 64
    # A second process with 64 keeps the first one's time.
    assert shards.register(redis, 64, 5_000, now_ms=4_000).counts == raised.counts
    with pytest.raises(shards.ShardCountError, match="RELAY_SHARDS=16 is lower than 64"):
        shards.register(redis, 16, 5_000, now_ms=5_000)
    assert shards.load(redis) == raised  # the refusal wrote nothing


def test_a_running_process_follows_a_count_another_one_raised(redis: redis.Redis) -> None:
    url = redis.connection_pool.connection_kwargs
    settings = load_settings(
        {
            "RELAY_REDIS_URL": f"redis://127.0.0.1:{url['port']}/0",
            "RELAY_SHARDS_DELAY": "1s",
        },
        dotenv=None,
    )
    follower = shards.Follower(settings).start()
    try:
        assert keyspace.shard_map().counts == ((16, 0),)
        shards.register(redis, 64, 1_000, now_ms=int(time.time() * 1000))
        deadline = time.monotonic() + 10
        while keyspace.all_shards() != range(64) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert keyspace.all_shards() == range(64)
        assert keyspace.shard_map().current(int(time.time() * 1000)) == 16  # not yet in force
    finally:
        follower.stop.set()


def test_the_status_read_finds_a_batch_under_either_count(redis: redis.Redis) -> None:
    keyspace.use(keyspace.ShardMap(((16, 0), (64, 1))))
    name = next(
        n for n in (f"b{i}" for i in range(500)) if len(keyspace.batch_shards("acme", n)) > 1
    )
    old, new = keyspace.batch_shards("acme", name)
    query = BatchQuery(name)
    for shard in (old, new):
        redis.flushall()
        redis.hset(keyspace.batch(shard, "acme", name), mapping={"name": name, "status": "open"})
        pipe = redis.pipeline(transaction=False)
        query.queue(pipe, "acme")
        replies = pipe.execute()
        assert len(replies) == 2 and replies[[old, new].index(shard)]
        assert query.decode(replies, "acme") is not None


@pytest.mark.parametrize("raw", ["15", "257", "x"])
def test_the_setting_is_bounded(raw: str) -> None:
    with pytest.raises(ConfigError, match="RELAY_SHARDS"):
        load_settings({"RELAY_SHARDS": raw}, dotenv=None)


def test_a_process_started_with_fewer_shards_exits_with_the_reason(
    redis: redis.Redis,
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shards.register(redis, 64, 1_000, now_ms=0)
    monkeypatch.setenv("RELAY_REDIS_URL", redis_url)
    monkeypatch.setenv("RELAY_SHARDS", "16")
    monkeypatch.chdir(tmp_path)  # no .env
    assert commands.main(["deliveries", "list"]) == 2
    err = capsys.readouterr().err
    assert "RELAY_SHARDS=16 is lower than 64" in err and "Set RELAY_SHARDS=64" in err


def test_a_batch_of_the_old_count_is_found_and_a_new_one_takes_the_new_count(
    redis_url: str,
) -> None:
    h = Harness(redis_url)
    try:
        # Two names whose shard under 64 is not their shard under 16.
        moving = [f"b{i}" for i in range(500) if zlib.crc32(f"acme\x00b{i}".encode()) % 64 >= 16]
        old, new = moving[:2]
        h.upload(BatchRef("acme", old))  # written under 16 shards
        keyspace.use(keyspace.ShardMap(((16, 0), (64, 1))))
        found = h.run(h.api.locate("acme", old))
        assert found.shard == keyspace.batch_shards("acme", old)[0] < 16
        assert keyspace.shard_of_id("doc", h.upload(found).id) == found.shard  # more into it
        made = h.run(h.api.locate("acme", new))
        assert made.shard == keyspace.batch_shards("acme", new)[-1] >= 16
        assert keyspace.shard_of_id("doc", h.upload(made).id) == made.shard
        listed, _ = h.run(h.api.list_batches("acme", before=None, limit=10))
        assert {b.name for b in listed} == {old, new}
    finally:
        h.close()
