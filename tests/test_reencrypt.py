"""``relay reencrypt`` on a real Redis: material stored under key A, the key rotated to "B,A",
the command run, and the material then read with B alone."""

from __future__ import annotations

from subprocess import CompletedProcess

import pytest
import redis

from relay.crypto import Encryptor, SigningMaterial, generate_key
from relay.exceptions import ConfigError
from relay.redis import keyspace
from relay.state.reencrypt import reencrypt
from relay.state.scripts import source
from relay.state.signing_material import FIELDS, SigningKeys
from relay.timefmt import now_ms
from tests.support.helpers import relay_cli

ACCOUNTS = [f"acct-{i:02d}" for i in range(23)]


def reencrypt_cli(redis_url: str, encryption_key: str, *args: str) -> CompletedProcess[str]:
    return relay_cli(redis_url, *args, encryption_key=encryption_key, timeout=60)


def _store_under(client: redis.Redis, key: str) -> dict[str, list[SigningMaterial]]:
    """Every account's current material under ``key``; acct-00 also has a previous one."""
    material = SigningKeys(Encryptor([key])).for_accounts(client, set(ACCOUNTS))
    previous = SigningMaterial.generate(now_ms())
    client.hset(
        keyspace.signing("acct-00"),
        mapping={
            "previous": Encryptor([key]).encrypt(previous.to_json().encode()),
            "previous_until": now_ms() + 3_600_000,
        },
    )
    material["acct-00"] = [material["acct-00"][0], previous]
    return material


def _read_with(client: redis.Redis, key: str, account: str) -> list[SigningMaterial]:
    found = SigningKeys(Encryptor([key])).from_fields(
        client.hmget(keyspace.signing(account), FIELDS)
    )
    assert found is not None
    return found


def _raw(client: redis.Redis) -> dict[str, list[bytes | None]]:
    return {a: client.hmget(keyspace.signing(a), ["current", "previous"]) for a in ACCOUNTS}


def test_rotate_then_reencrypt_then_read_with_the_new_key_only(
    redis_url: str, redis: redis.Redis
) -> None:
    key_a, key_b = generate_key(), generate_key()
    stored = _store_under(redis, key_a)
    with pytest.raises(ConfigError):  # before: B alone cannot read what A encrypted
        _read_with(redis, key_b, "acct-05")

    # Small batches, so the SCAN walk takes several rounds.
    done = reencrypt_cli(redis_url, f"{key_b},{key_a}", "reencrypt", "--batch", "5")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "24 value(s) re-encrypted with the first key, 0 already under it, in 23 key(s)"
    )

    for account in ACCOUNTS:
        read = _read_with(redis, key_b, account)
        assert [m.whsec for m in read] == [m.whsec for m in stored[account]]
        assert [m.whsk for m in read] == [m.whsk for m in stored[account]]
    with pytest.raises(ConfigError):  # and A alone no longer reads it
        _read_with(redis, key_a, "acct-05")

    # Idempotent: a second run rewrites nothing.
    before = _raw(redis)
    again = reencrypt_cli(redis_url, f"{key_b},{key_a}", "reencrypt")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("0 value(s) re-encrypted with the first key, 24 already")
    assert _raw(redis) == before


def test_unreadable_values_are_named_and_fail_the_run(redis_url: str, redis: redis.Redis) -> None:
    key_a, key_b, key_c = generate_key(), generate_key(), generate_key()
    SigningKeys(Encryptor([key_a])).for_accounts(redis, {"ok"})
    SigningKeys(Encryptor([key_c])).for_accounts(redis, {"lost"})  # C is not configured
    done = reencrypt_cli(redis_url, f"{key_b},{key_a}", "reencrypt")
    assert done.returncode == 1
    assert f"unreadable: {keyspace.signing('lost')} current" in done.stderr
    assert "1 value(s) re-encrypted" in done.stdout and "1 unreadable" in done.stdout
    assert len(_read_with(redis, key_b, "ok")) == 1


def test_without_a_key_it_refuses(redis_url: str) -> None:
    done = reencrypt_cli(redis_url, "", "reencrypt")
    assert done.returncode == 2
    assert "RELAY_ENCRYPTION_KEY is not set" in done.stderr


def test_the_write_is_a_compare_and_set(redis: redis.Redis) -> None:
    """A rotation between the command's read and its write wins: the script replaces a field
    only while it still holds the token that was read."""
    key_a, key_b = generate_key(), generate_key()
    SigningKeys(Encryptor([key_a])).for_accounts(redis, {"racer"})
    read = redis.hget(keyspace.signing("racer"), "current")
    assert read is not None
    newer = Encryptor([key_b]).encrypt(b"written by a rotation meanwhile")
    redis.hset(keyspace.signing("racer"), "current", newer)
    cas = redis.register_script(source("reencrypt_signing"))
    rotated = Encryptor([key_b, key_a]).rotate(read)
    assert cas(keys=[keyspace.signing("racer")], args=["current", read, rotated]) == 0
    assert redis.hget(keyspace.signing("racer"), "current") == newer
    assert cas(keys=[keyspace.signing("racer")], args=["current", newer, b"x"]) == 1
    assert redis.hget(keyspace.signing("racer"), "current") == b"x"


def test_report_counts_values_not_keys(redis: redis.Redis) -> None:
    key_a, key_b = generate_key(), generate_key()
    _store_under(redis, key_a)
    report = reencrypt(redis, Encryptor([key_b, key_a]), batch=7)
    assert (report.keys, report.reencrypted, report.already_current) == (23, 24, 0)
    assert report.changed_meanwhile == 0 and report.unreadable == []
