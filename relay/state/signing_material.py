"""Each account's signing material in Redis, encrypted at rest, and its rotation.

The hash ``keyspace.signing(account)`` holds ``current`` and, for a grace period after a rotation,
``previous`` (each a Fernet token of :class:`SigningMaterial` JSON) with ``previous_until``.
Material is created on first use (``HSETNX``, so concurrent first uses agree on one). Decrypted
material is cached per process by its ciphertext, so a rotation is seen at once. A rotation is
refused while the previous one's grace runs (``rotate_signing.lua``): a second one would drop
the material a receiver may still hold alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import ResponseError

from relay.crypto import Encryptor, SigningMaterial
from relay.exceptions import RelayError, RotationInProgress
from relay.redis import keyspace
from relay.state.scripts import AsyncScripts, refusal
from relay.timefmt import now_ms

FIELDS = ["current", "previous", "previous_until"]


class SigningKeys:
    """Decrypts (with a per-process cache) and orders an account's signing material."""

    def __init__(self, encryptor: Encryptor, clock: Callable[[], int] = now_ms) -> None:
        self.encryptor = encryptor
        self.clock = clock  # ms since the epoch; tests pass their own
        self._cache: dict[bytes, SigningMaterial] = {}

    def _open(self, token: bytes) -> SigningMaterial:
        material = self._cache.get(token)
        if material is None:
            material = SigningMaterial.from_json(self.encryptor.decrypt(token))
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[token] = material
        return material

    def new_token(self) -> bytes:
        return self.encryptor.encrypt(SigningMaterial.generate(self.clock()).to_json().encode())

    def from_fields(self, values: list[Any]) -> list[SigningMaterial] | None:
        """``HMGET`` of FIELDS -> [current, previous while in grace], or None if none yet."""
        current, previous, until = values
        if current is None:
            return None
        out = [self._open(bytes(current))]
        if previous is not None and until is not None and int(until) > self.clock():
            out.append(self._open(bytes(previous)))
        return out

    def _require(self, values: list[Any]) -> list[SigningMaterial]:
        found = self.from_fields(values)
        if found is None:  # HSETNX just wrote it; only a concurrent DEL could get here
            raise RelayError("signing material vanished while it was being created")
        return found

    def for_accounts(
        self, client: redis.Redis, accounts: set[str]
    ) -> dict[str, list[SigningMaterial]]:
        """Material for several accounts in one round trip (created where missing)."""
        ordered = sorted(accounts)
        with client.pipeline(transaction=False) as pipe:
            for account in ordered:
                pipe.hmget(keyspace.signing(account), FIELDS)
            replies = pipe.execute()
        out: dict[str, list[SigningMaterial]] = {}
        for account, values in zip(ordered, replies, strict=True):
            found = self.from_fields(values)
            if found is None:
                client.hsetnx(keyspace.signing(account), "current", self.new_token())
                found = self._require(client.hmget(keyspace.signing(account), FIELDS))
            out[account] = found
        return out

    async def get(self, client: redis.asyncio.Redis, account: str) -> list[SigningMaterial]:
        return (await self.fetch(client, account))[0]

    async def fetch(
        self, client: redis.asyncio.Redis, account: str
    ) -> tuple[list[SigningMaterial], bool]:
        """The account's material, and whether this call made it (its first use)."""
        found = self.from_fields(await client.hmget(keyspace.signing(account), FIELDS))
        if found is not None:
            return found, False
        await client.hsetnx(keyspace.signing(account), "current", self.new_token())
        return self._require(await client.hmget(keyspace.signing(account), FIELDS)), True

    async def rotate(
        self, client: redis.asyncio.Redis, scripts: AsyncScripts, account: str, grace_s: float
    ) -> list[SigningMaterial]:
        """New material current, the old one signing too for ``grace_s``. Raises
        RotationInProgress (nothing changed) while the previous rotation's grace runs."""
        await self.get(client, account)  # rotating before first use still keeps a previous
        now = self.clock()
        try:
            await scripts(
                "rotate_signing",
                [keyspace.signing(account)],
                [self.new_token(), now, now + int(grace_s * 1000)],
            )
        except ResponseError as exc:
            if refusal(exc) == "rotating":
                until = await previous_until(client, account)
                raise RotationInProgress(until or now) from exc
            raise
        return await self.get(client, account)


async def previous_until(client: redis.asyncio.Redis, account: str) -> int | None:
    """When the account's previous signing material stops being used (ms); None when no
    rotation is under way."""
    raw = await client.hget(keyspace.signing(account), "previous_until")
    return int(raw) if raw else None
