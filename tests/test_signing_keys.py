"""Each account's signing material in Redis (relay.state.signing_material): created on first use,
encrypted at rest, rotated with a grace period (on a clock the test moves), decrypted once per
ciphertext, read for many accounts in one round trip."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from relay.crypto import Encryptor, SigningMaterial, generate_key
from relay.exceptions import ConfigError, RotationInProgress
from relay.redis import keyspace as keys
from relay.state.scripts import AsyncScripts
from relay.state.signing_material import SigningKeys
from tests.support.helpers import Clients, closed_after

GRACE_S = 60.0


class H(Clients):
    """One process's SigningKeys (``sk``) on the test's Redis and fake clock."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.scripts = AsyncScripts(self.aclient)
        self.key = generate_key()
        self.sk = self.keys()

    def keys(self, key: str | None = None) -> SigningKeys:
        """Another process's SigningKeys (its own cache), with our key unless told."""
        return SigningKeys(Encryptor([key or self.key]), self.clock)

    def get(self, account: str, sk: SigningKeys | None = None) -> list[SigningMaterial]:
        return self.run((sk or self.sk).get(self.aclient, account))

    def rotate(self, account: str, grace_s: float = GRACE_S) -> list[SigningMaterial]:
        return self.run(self.sk.rotate(self.aclient, self.scripts, account, grace_s))

    def reads(self) -> int:
        """Reads the server has processed so far (each round trip is one; this INFO too)."""
        return int(self.client.info("stats")["total_reads_processed"])


@pytest.fixture
def h(redis_url: str) -> Iterator[H]:
    yield from closed_after(H(redis_url))


def test_material_is_created_on_first_use_and_kept(h: H) -> None:
    assert h.client.exists(keys.signing("acme")) == 0
    (first,) = h.get("acme")
    assert first.created_at_ms == h.clock()
    h.clock.advance(1_000)
    (again,) = h.get("acme")
    assert again == first
    (elsewhere,) = h.get("acme", h.keys())  # another process reads the same material
    assert elsewhere == first
    (other,) = h.get("other")
    assert other.secret != first.secret and other.private_key != first.private_key


def test_concurrent_first_uses_agree_on_one_material(h: H) -> None:
    processes = [h.keys() for _ in range(5)]

    async def all_at_once() -> list[list[SigningMaterial]]:
        return await asyncio.gather(*(sk.get(h.aclient, "acme") for sk in processes))

    got = h.run(all_at_once())
    assert len({m[0].secret for m in got}) == 1


def test_material_is_encrypted_at_rest(h: H) -> None:
    (material,) = h.get("acme")
    stored = h.client.hget(keys.signing("acme"), "current")
    assert stored is not None
    assert material.secret not in stored and material.to_json().encode() not in stored
    assert SigningMaterial.from_json(Encryptor([h.key]).decrypt(stored)) == material


def test_rotation_keeps_the_previous_material_for_the_grace_period(h: H) -> None:
    (old,) = h.get("acme")
    new, previous = h.rotate("acme")
    assert previous == old and new != old and new.created_at_ms == h.clock()
    assert h.get("acme", h.keys()) == [new, old]  # every process signs with both
    h.clock.advance(int(GRACE_S * 1000) - 1)
    assert h.get("acme") == [new, old]
    h.clock.advance(1)  # the grace period is over
    assert h.get("acme") == [new]
    assert h.get("acme", h.keys()) == [new]


def test_rotating_before_first_use_still_keeps_a_previous(h: H) -> None:
    new, previous = h.rotate("fresh")
    assert new != previous
    assert h.get("fresh") == [new, previous]


def test_a_zero_grace_drops_the_previous_material_at_once(h: H) -> None:
    h.get("acme")
    (new,) = h.rotate("acme", grace_s=0)
    assert h.get("acme") == [new]


def test_decrypted_material_is_cached_by_its_ciphertext(h: H) -> None:
    (first,) = h.get("acme")
    assert h.get("acme")[0] is first  # decrypted once
    # Without the key that encrypted it, only what is cached can still be opened.
    h.get("other", h.keys())
    h.sk.encryptor = Encryptor([generate_key()])
    assert h.get("acme")[0] is first
    with pytest.raises(ConfigError):
        h.get("other")
    # A rotation writes a new ciphertext: seen at once, not hidden by the cache.
    h.sk.encryptor = Encryptor([h.key])
    new, previous = h.rotate("acme")
    assert previous is first and new != first


def test_for_accounts_reads_several_accounts_in_one_round_trip(h: H) -> None:
    accounts = {"a1", "a2", "a3"}
    expected = {account: h.get(account) for account in accounts}
    h.rotate("a2")
    expected["a2"] = h.get("a2")
    reader = h.keys()  # a delivery worker's own SigningKeys
    before = h.reads()
    found = reader.for_accounts(h.client, accounts)
    assert h.reads() - before == 2  # the pipeline, then the INFO that counts
    assert found == expected
    assert len(found["a2"]) == 2


def test_for_accounts_creates_what_is_missing(h: H) -> None:
    (known,) = h.get("known")
    found = h.sk.for_accounts(h.client, {"known", "new"})
    assert found["known"] == [known]
    assert h.get("new") == found["new"] and found["new"][0] != known


def test_a_wrong_encryption_key_is_a_config_error(h: H) -> None:
    h.get("acme")
    stranger = h.keys(generate_key())
    with pytest.raises(ConfigError, match="RELAY_ENCRYPTION_KEY"):
        h.get("acme", stranger)
    with pytest.raises(ConfigError, match="RELAY_ENCRYPTION_KEY"):
        stranger.for_accounts(h.client, {"acme"})
    # A key list that still holds the old key (a key rotation in progress) opens it.
    assert h.get("acme", SigningKeys(Encryptor([generate_key(), h.key]), h.clock))


def test_a_rotation_is_refused_while_the_previous_ones_grace_runs(h: H) -> None:
    (old,) = h.get("acme")
    new, previous = h.rotate("acme")
    stored = h.client.hgetall(keys.signing("acme"))
    with pytest.raises(RotationInProgress) as refused:
        h.rotate("acme")
    assert refused.value.until_ms == h.clock() + int(GRACE_S * 1000)
    assert h.client.hgetall(keys.signing("acme")) == stored  # nothing changed
    assert h.get("acme") == [new, old]  # the old material still signs
    h.clock.advance(int(GRACE_S * 1000))  # the grace period is over: rotating is taken again
    newer, previous = h.rotate("acme")
    assert previous == new and newer not in (new, old)
