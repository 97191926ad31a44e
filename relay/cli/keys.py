"""``relay keys create|list|revoke|unblock``: the operator commands over API keys.

A key created or revoked here is an acknowledged write like an upload: with
``RELAY_REDIS_WAIT_REPLICAS`` > 0 the command waits (``RELAY_REDIS_WAIT_TIMEOUT_MS`` at most)
until that many replicas have it (``relay.redis.replicas.replicated_sync``), so a failover right
after the command cannot lose the key or undo the revocation. When they do not confirm in
time the write stands on the primary alone: ``create`` still prints the key (it works), and
both say so on stderr and exit with :data:`NOT_CONFIRMED` (3), so a script can tell. When a
failover is under way (through Sentinel) or the primary was lost, the write may be dropped:
``create`` prints no key (its prefix, to revoke it should it have survived), both exit 1,
and running the command again is the answer.

Exit codes: 0 done (and confirmed, when asked for); 1 not done (no such key, Redis
unreachable, a failover under way); 2 a bad argument; 3 done on the primary but not confirmed
by the replicas.

``unblock`` lifts the bad-key block of one client address (``relay.state.address_blocks``).
"""

from __future__ import annotations

import argparse
import sys

import redis

from relay.config import Settings
from relay.exceptions import StoreUnavailable
from relay.redis.clients import RedisTarget, sync_client
from relay.redis.replicas import replicated_sync
from relay.state import address_blocks, api_keys
from relay.text import for_terminal

NOT_CONFIRMED = 3


def run(settings: Settings, args: argparse.Namespace) -> int:
    client = sync_client(RedisTarget.from_settings(settings))
    command = args.keys_cmd
    if command == "create":
        return _create(client, settings, args)
    if command == "list":
        return _list(client)
    if command == "unblock":
        return _unblock(client, args.address)
    return _revoke(client, settings, args.prefix)


def _confirmed(client: redis.Redis, settings: Settings, what: str, prefix: str) -> bool:
    """Whether the replicas asked for have the write (True when none is asked for)."""
    return replicated_sync(client, settings, what, api_keys.written_keys(prefix))


def _not_confirmed(settings: Settings, what: str, then: str) -> None:
    print(
        f"relay: warning: {what} is on the primary only: {settings.redis_wait_replicas} "
        f"replica(s) (RELAY_REDIS_WAIT_REPLICAS) did not confirm it within "
        f"{settings.redis_wait_timeout_ms} ms, and a failover now could lose it; {then}",
        file=sys.stderr,
    )


def _create(client: redis.Redis, settings: Settings, args: argparse.Namespace) -> int:
    try:
        if args.operator:
            key = api_keys.create_operator_key(client, args.operator)
            what = f"operator key for {args.operator} (the console only"
        else:
            key = api_keys.create_key(client, args.account)
            what = f"API key for account {args.account} ("
    except ValueError as exc:
        print(f"relay: {exc}", file=sys.stderr)
        return 2
    prefix = key.split("_")[1]
    try:
        confirmed = _confirmed(client, settings, f"key {prefix}", prefix)
    except StoreUnavailable as exc:
        print(
            f"relay: key {prefix} not acknowledged ({exc}); create another, and revoke this "
            f"one (`relay keys revoke {prefix}`) should it have survived",
            file=sys.stderr,
        )
        return 1
    print(f"{what}{'; ' if args.operator else ''}shown once, stored hashed):", file=sys.stderr)
    print(key)
    if not confirmed:
        _not_confirmed(
            settings,
            f"the key {prefix}",
            f"check that it works once the replicas are back (`relay keys list` lists it), "
            f"or revoke it (`relay keys revoke {prefix}`) and create another",
        )
        return NOT_CONFIRMED
    return 0


def _list(client: redis.Redis) -> int:
    for info in api_keys.list_keys(client):
        state = "revoked" if info.revoked_at else "active"
        owner = f"operator:{info.account}" if info.operator else info.account
        print(f"{info.prefix}\t{for_terminal(owner)}\t{state}")
    return 0


def _revoke(client: redis.Redis, settings: Settings, given: str) -> int:
    prefix = api_keys.key_prefix(given)
    if prefix is None or not api_keys.revoke_key(client, given):
        print(f"no key with prefix {for_terminal(given)!r}", file=sys.stderr)
        return 1
    try:
        confirmed = _confirmed(client, settings, f"revocation of {prefix}", prefix)
    except StoreUnavailable as exc:
        print(
            f"relay: revocation of {prefix} not acknowledged ({exc}); run it again", file=sys.stderr
        )
        return 1
    print(f"revoked {prefix}")
    if not confirmed:
        _not_confirmed(
            settings,
            f"the revocation of {prefix}",
            f"run `relay keys revoke {prefix}` again once the replicas are back",
        )
        return NOT_CONFIRMED
    return 0


def _unblock(client: redis.Redis, address: str) -> int:
    try:
        subject = address_blocks.parse_subject(address)
    except ValueError as exc:
        print(f"relay keys unblock: {for_terminal(str(exc))}", file=sys.stderr)
        return 2
    counted = address_blocks.unblock(client, subject)
    if counted:
        print(f"unblocked {subject}: {counted} bad key(s) forgotten")
    else:
        print(f"{subject} had no bad keys counted: nothing to unblock")
    return 0
