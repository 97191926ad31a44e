"""API keys (``relay.state.api_keys``) against a real Redis: format, storage, lookup, revocation."""

from __future__ import annotations

import asyncio
import hashlib
import re

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis

from relay.redis import keyspace
from relay.state.api_keys import (
    KeyCache,
    create_key,
    create_operator_key,
    list_keys,
    lookup_key,
    lookup_key_async,
    lookup_operator_async,
    parse_key,
    revoke_key,
)

KEY_RE = re.compile(r"^rk_[a-z0-9]{8}_[A-Za-z0-9_-]{43}$")


def test_created_key_has_the_format_and_is_stored_hashed(redis: redis.Redis) -> None:
    key = create_key(redis, "acme")
    assert KEY_RE.match(key), key
    prefix = key[3:11]
    record = redis.hgetall(keyspace.api_key(prefix))
    assert record[b"hash"] == hashlib.sha256(key.encode()).hexdigest().encode()
    assert record[b"account"] == b"acme"
    assert int(record[b"created_at"]) > 1_700_000_000_000
    assert record[b"revoked_at"] == b""
    assert key.encode() not in b"".join(record.values())  # the secret itself is not stored
    assert redis.sismember(keyspace.api_keys(), prefix)
    assert redis.sismember(keyspace.accounts(), "acme")


def test_keys_are_unique(redis: redis.Redis) -> None:
    made = {create_key(redis, "acme") for _ in range(20)}
    assert len(made) == 20
    assert len({k[3:11] for k in made}) == 20


@pytest.mark.parametrize(
    "account", ["", "Acme", "-acme", "a" * 65, "ac me", "acmé", "a/b", "acme\n"]
)
def test_invalid_account_names_are_refused(redis: redis.Redis, account: str) -> None:
    with pytest.raises(ValueError, match="invalid account"):
        create_key(redis, account)
    assert redis.scard(keyspace.api_keys()) == 0


@pytest.mark.parametrize("account", ["a", "acme", "acme_2-x", "0" + "a" * 63])
def test_valid_account_names(redis: redis.Redis, account: str) -> None:
    assert lookup_key(redis, create_key(redis, account)) == account


def test_lookup_refuses_unknown_malformed_and_tampered_keys(redis: redis.Redis) -> None:
    key = create_key(redis, "acme")
    assert lookup_key(redis, key) == "acme"
    tampered = key[:-1] + ("A" if key[-1] != "A" else "B")
    assert lookup_key(redis, tampered) is None  # right prefix, wrong secret
    assert lookup_key(redis, "rk_zzzzzzzz_" + "a" * 43) is None  # unknown prefix
    for garbage in ["", "rk_", key + "x", key[:-1], key.upper(), "Bearer " + key, key + "\n"]:
        assert lookup_key(redis, garbage) is None, garbage
        assert parse_key(garbage) is None


def test_revoke_by_prefix_or_key(redis: redis.Redis) -> None:
    first, second, third = (create_key(redis, "acme") for _ in range(3))
    assert revoke_key(redis, first[3:11]) is True
    assert revoke_key(redis, "rk_" + second[3:11]) is True
    assert revoke_key(redis, third) is True
    for key in (first, second, third):
        assert lookup_key(redis, key) is None
    revoked_at = redis.hget(keyspace.api_key(first[3:11]), "revoked_at")
    assert revoked_at and int(revoked_at) > 0
    # Revoking again keeps the first revocation time and reports the key as found.
    assert revoke_key(redis, first[3:11]) is True
    assert redis.hget(keyspace.api_key(first[3:11]), "revoked_at") == revoked_at


def test_revoke_unknown_creates_nothing(redis: redis.Redis) -> None:
    assert revoke_key(redis, "abcd1234") is False
    assert revoke_key(redis, "not a prefix") is False
    assert redis.exists(keyspace.api_key("abcd1234")) == 0
    key = create_key(redis, "acme")
    forged = key[:12] + "x" * 43  # the right prefix with another secret revokes nothing
    assert revoke_key(redis, forged) is False
    assert lookup_key(redis, key) == "acme"


def test_list_keys(redis: redis.Redis) -> None:
    a = create_key(redis, "acme")
    b = create_key(redis, "globex")
    revoke_key(redis, b)
    infos = {i.prefix: i for i in list_keys(redis)}
    assert set(infos) == {a[3:11], b[3:11]}
    assert infos[a[3:11]].account == "acme"
    assert infos[a[3:11]].revoked_at is None
    assert infos[b[3:11]].account == "globex"
    revoked_at = infos[b[3:11]].revoked_at
    assert revoked_at is not None
    assert infos[b[3:11]].created_at <= revoked_at


def test_async_lookup(redis_url: str, redis: redis.Redis) -> None:
    key = create_key(redis, "acme")

    async def run() -> list[str | None]:
        client = AsyncRedis.from_url(redis_url)
        try:
            found = [await lookup_key_async(client, key)]
            found.append(await lookup_key_async(client, "rk_nope"))
            revoke_key(redis, key)
            found.append(await lookup_key_async(client, key))
            return found
        finally:
            await client.aclose()

    assert asyncio.run(run()) == ["acme", None, None]


def test_operator_keys_open_the_console_only(redis_url: str, redis: redis.Redis) -> None:
    operator = create_operator_key(redis, "ops")
    customer = create_key(redis, "acme")
    # The API's checks refuse an operator key; the console's refuse a customer key.
    assert lookup_key(redis, operator) is None

    async def run() -> list[str | None]:
        client = AsyncRedis.from_url(redis_url)
        try:
            found = [await lookup_operator_async(client, operator)]
            found.append(await lookup_operator_async(client, customer))
            found.append(await lookup_key_async(client, operator))
            tampered = operator[:-1] + ("A" if operator[-1] != "A" else "B")
            found.append(await lookup_operator_async(client, tampered))
            revoke_key(redis, operator)
            found.append(await lookup_operator_async(client, operator))
            return found
        finally:
            await client.aclose()

    assert asyncio.run(run()) == ["ops", None, None, None, None]
    listed = {i.account: i.operator for i in list_keys(redis)}
    assert listed == {"ops": True, "acme": False}
    assert redis.sismember(keyspace.accounts(), "ops") == 0


def test_key_cache_matches_hash_and_is_bounded() -> None:
    cache = KeyCache(max_entries=2)
    one = parse_key("rk_aaaaaaaa_" + "a" * 43)
    two = parse_key("rk_bbbbbbbb_" + "b" * 43)
    three = parse_key("rk_cccccccc_" + "c" * 43)
    impostor = parse_key("rk_aaaaaaaa_" + "z" * 43)
    assert one and two and three and impostor
    cache.put(one, "acme")
    assert cache.get(one) == "acme"
    assert cache.get(impostor) is None  # same prefix, other secret
    cache.put(two, "globex")
    cache.put(three, "initech")
    assert len(cache) == 2
    assert cache.get(one) is None  # the oldest went
    cache.drop(three.prefix)
    assert cache.get(three) is None
    assert cache.get(two) == "globex"
