"""API keys: ``rk_<prefix>_<secret>``, stored hashed, one account each.

A key is ``rk_`` + an 8-character public prefix (``[a-z0-9]``) + ``_`` + 32 random bytes in
URL-safe base64 without padding (43 characters). Only the SHA-256 of the whole key is stored,
in the hash ``keyspace.api_key(prefix)`` with fields ``hash`` (hex), ``account``, ``created_at``
(ms) and ``revoked_at`` (``''`` or ms); the prefix is listed in ``keyspace.api_keys()`` and the
account in ``keyspace.accounts()``. Keys are never deleted, only revoked, so a prefix never
changes owner.

An *operator key* (``relay keys create --operator NAME``) has the same form and storage, but
its record holds ``operator`` (the operator's name) instead of ``account``: the API's checks
(:func:`check_record`) need an ``account`` and so refuse it, and the console
(``relay.console``) admits only records with ``operator`` and no ``account``, so a customer's
key never opens it.

The synchronous functions serve the CLI and ``relay dev``; :func:`lookup_key_async` and
:class:`KeyCache` serve the API (see ``relay.api.fast_path`` for how the cache keeps the status
endpoints at one Redis round trip without delaying a revocation).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import redis
import redis.asyncio

from relay.redis import keyspace
from relay.timefmt import now_ms

# Used with fullmatch only: a `$` anchor would also accept a trailing newline.
ACCOUNT_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_KEY_RE = re.compile(r"rk_([a-z0-9]{8})_([A-Za-z0-9_-]{43})")
_PREFIX_RE = re.compile(r"(?:rk_)?([a-z0-9]{8})")
_PREFIX_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"

# The fields of a key record the API reads on every request, in this order.
RECORD_FIELDS = ("hash", "account", "revoked_at")


@dataclass(frozen=True, slots=True)
class PresentedKey:
    """A well-formed key as a client presented it: its prefix and the SHA-256 (hex)."""

    prefix: str
    digest: str


@dataclass(frozen=True)
class KeyInfo:
    """One stored key, without its secret (``relay keys list``)."""

    prefix: str
    account: str  # for an operator key, the operator's name
    created_at: int
    revoked_at: int | None
    operator: bool = False


def parse_key(key: str) -> PresentedKey | None:
    """The prefix and digest of a well-formed key; None for anything else."""
    m = _KEY_RE.fullmatch(key)
    if m is None:
        return None
    return PresentedKey(m.group(1), hashlib.sha256(key.encode()).hexdigest())


def check_record(values: Sequence[bytes | None], presented: PresentedKey) -> str | None:
    """The account when a record read as ``HMGET RECORD_FIELDS`` admits the key, else None.

    Admits only an existing, unrevoked record whose stored hash equals the presented key's
    (constant-time comparison).
    """
    stored, account, revoked = (values[0], values[1], values[2])
    if stored is None or account is None:
        return None
    if not hmac.compare_digest(stored, presented.digest.encode()):
        return None
    if revoked:
        return None
    return account.decode()


def create_key(client: redis.Redis, account: str) -> str:
    """Create and store a key for ``account``; returns the key (shown once, stored hashed).

    Raises ValueError for an account name outside ``[a-z0-9][a-z0-9_-]{0,63}``.
    """
    return _create(client, "account", account)


def create_operator_key(client: redis.Redis, name: str) -> str:
    """Create and store an operator key (the console, nothing else) for the operator ``name``
    (same rules as an account name); returns the key (shown once, stored hashed)."""
    return _create(client, "operator", name)


def _create(client: redis.Redis, kind: str, name: str) -> str:
    if not ACCOUNT_RE.fullmatch(name):
        raise ValueError(
            f"invalid {kind} name {name!r}: 1-64 of a-z 0-9 _ -, starting with a letter or digit"
        )
    while True:
        prefix = "".join(secrets.choice(_PREFIX_ALPHABET) for _ in range(8))
        secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()
        key = f"rk_{prefix}_{secret}"
        record = {
            "hash": hashlib.sha256(key.encode()).hexdigest(),
            kind: name,
            "created_at": now_ms(),
            "revoked_at": "",
        }
        # SADD is the atomic claim of the prefix: a (vanishingly rare) collision retries
        # instead of overwriting another account's key.
        if client.sadd(keyspace.api_keys(), prefix) == 1:
            # Not one transaction: the three keys lie in different Cluster slots. The account
            # is listed before its key exists, so a crash between leaves a name without a
            # key (harmless), never a key of an unlisted account.
            if kind == "account":
                client.sadd(keyspace.accounts(), name)
            client.hset(keyspace.api_key(prefix), mapping=record)
            return key


def lookup_key(client: redis.Redis, key: str) -> str | None:
    """The account of an active key; None for a malformed, unknown or revoked key."""
    presented = parse_key(key)
    if presented is None:
        return None
    values = client.hmget(keyspace.api_key(presented.prefix), list(RECORD_FIELDS))
    return check_record(values, presented)


async def lookup_key_async(client: redis.asyncio.Redis, key: str | PresentedKey) -> str | None:
    """:func:`lookup_key` for the API (one round trip, never blocks the event loop); takes
    the key or its already parsed form."""
    presented = parse_key(key) if isinstance(key, str) else key
    if presented is None:
        return None
    values = await client.hmget(keyspace.api_key(presented.prefix), list(RECORD_FIELDS))
    return check_record(values, presented)


# The fields of a key record the console reads, in this order.
OPERATOR_FIELDS = ("hash", "operator", "account", "revoked_at")


def check_operator_record(values: Sequence[bytes | None], presented: PresentedKey) -> str | None:
    """The operator's name when a record read as ``HMGET OPERATOR_FIELDS`` admits the key to
    the console: an existing, unrevoked operator record (no account) whose stored hash equals
    the presented key's (constant-time comparison). None for anything else, customer keys
    included."""
    stored, operator, account, revoked = (values[0], values[1], values[2], values[3])
    if stored is None or operator is None or account is not None:
        return None
    if not hmac.compare_digest(stored, presented.digest.encode()):
        return None
    if revoked:
        return None
    return operator.decode()


async def lookup_operator_async(client: redis.asyncio.Redis, key: str | PresentedKey) -> str | None:
    """The operator of an active operator key (one round trip); None for a malformed,
    unknown or revoked key and for every customer key."""
    presented = parse_key(key) if isinstance(key, str) else key
    if presented is None:
        return None
    values = await client.hmget(keyspace.api_key(presented.prefix), list(OPERATOR_FIELDS))
    return check_operator_record(values, presented)


# -- console sessions: the server side, so that logout and key revocation end them ---------


async def open_console_session(
    client: redis.asyncio.Redis, sid: str, prefix: str, max_age: int
) -> None:
    """Store a new console session of the operator key ``prefix`` for ``max_age`` seconds."""
    index = keyspace.console_key_sessions(prefix)
    async with client.pipeline(transaction=False) as pipe:
        pipe.set(keyspace.console_session(sid), prefix, ex=max_age)
        pipe.sadd(index, sid)
        pipe.expire(index, max_age)  # outlives every session it names: each login renews it
        await pipe.execute()


async def end_console_session(client: redis.asyncio.Redis, sid: str, prefix: str) -> None:
    """End a session (logout): its cookie and CSRF token open nothing from now on."""
    await client.delete(keyspace.console_session(sid))
    await client.srem(keyspace.console_key_sessions(prefix), sid)


async def console_session_active(
    client: redis.asyncio.Redis, sid: str, prefix: str, operator: str
) -> bool:
    """Whether the session ``sid`` is still open and its key ``prefix`` still an unrevoked
    operator key of ``operator`` (checked on every console page, one round trip)."""
    async with client.pipeline(transaction=False) as pipe:
        pipe.get(keyspace.console_session(sid))
        pipe.hmget(keyspace.api_key(prefix), ["operator", "account", "revoked_at"])
        alive, (stored_operator, account, revoked) = await pipe.execute()
    if alive is None or alive.decode() != prefix:
        return False
    return (
        stored_operator is not None
        and account is None
        and not revoked
        and stored_operator.decode() == operator
    )


def _ms_or_none(raw: bytes | None) -> int | None:
    return int(raw) if raw else None


def list_keys(client: redis.Redis) -> list[KeyInfo]:
    """Every stored key (prefix, account, timestamps), oldest first."""
    prefixes = sorted(p.decode() for p in client.smembers(keyspace.api_keys()))
    with client.pipeline(transaction=False) as pipe:
        for prefix in prefixes:
            pipe.hmget(
                keyspace.api_key(prefix), ["account", "created_at", "revoked_at", "operator"]
            )
        rows = pipe.execute()
    infos = [
        KeyInfo(
            prefix,
            (account or operator).decode(),
            int(created or 0),
            _ms_or_none(revoked),
            operator=account is None,
        )
        for prefix, (account, created, revoked, operator) in zip(prefixes, rows, strict=True)
        if account is not None or operator is not None
    ]
    infos.sort(key=lambda i: (i.created_at, i.prefix))
    return infos


def key_prefix(prefix_or_key: str) -> str | None:
    """The prefix of ``abcd1234``, ``rk_abcd1234`` or a whole key; None for anything else."""
    presented = parse_key(prefix_or_key)
    if presented is not None:
        return presented.prefix
    m = _PREFIX_RE.fullmatch(prefix_or_key)
    return m.group(1) if m else None


def written_keys(prefix: str) -> list[str]:
    """The Redis keys that creating or revoking the key ``prefix`` writes and that must
    survive a failover: its record and the lists of prefixes and accounts (what
    ``relay keys`` waits for the replicas to have, ``relay.redis.replicas.replicated_sync``)."""
    return [keyspace.api_key(prefix), keyspace.api_keys(), keyspace.accounts()]


def revoke_key(client: redis.Redis, prefix_or_key: str) -> bool:
    """Revoke a key given by its prefix (``abcd1234`` or ``rk_abcd1234``) or the whole key.

    Returns True when the key exists (it is revoked now, or already was), False when no such
    key exists (or a whole key was given whose secret does not match). The API refuses the
    key from its very next request on.
    """
    presented = parse_key(prefix_or_key)
    prefix = key_prefix(prefix_or_key)
    if prefix is None:
        return False
    record_key = keyspace.api_key(prefix)
    found = False

    def revoke(pipe: redis.client.Pipeline) -> None:
        # WATCH-ed read then MULTI write: never creates a record, never moves revoked_at.
        nonlocal found
        stored, revoked = pipe.hmget(record_key, ["hash", "revoked_at"])
        found = stored is not None and (
            presented is None or hmac.compare_digest(stored, presented.digest.encode())
        )
        if found and not revoked:
            pipe.multi()
            pipe.hset(record_key, "revoked_at", now_ms())

    client.transaction(revoke, record_key)
    if found:
        # The console's sessions of this key end now too (each request also reads
        # revoked_at, so none would open anything; this removes them as well).
        index = keyspace.console_key_sessions(prefix)
        sids = [s.decode() if isinstance(s, bytes) else str(s) for s in client.smembers(index)]
        for sid in sids:
            client.delete(keyspace.console_session(sid))
        client.delete(index)
    return found


class KeyCache:
    """``prefix -> (account, stored hash)`` for keys recently seen valid, bounded in size.

    An entry is only a guess used to build the request's single pipeline: every request
    still reads the key record in that pipeline and checks it before trusting anything.
    """

    def __init__(self, max_entries: int = 10_000) -> None:
        self._entries: dict[str, tuple[str, str]] = {}
        self._max = max_entries

    def get(self, presented: PresentedKey) -> str | None:
        """The cached account when the presented key matches the cached hash."""
        entry = self._entries.get(presented.prefix)
        if entry is None or not hmac.compare_digest(entry[1], presented.digest):
            return None
        return entry[0]

    def put(self, presented: PresentedKey, account: str) -> None:
        if len(self._entries) >= self._max and presented.prefix not in self._entries:
            # Evict the oldest insertion: cheap, and a miss costs one extra round trip.
            self._entries.pop(next(iter(self._entries)))
        self._entries[presented.prefix] = (account, presented.digest)

    def drop(self, prefix: str) -> None:
        self._entries.pop(prefix, None)

    def __len__(self) -> int:
        return len(self._entries)
