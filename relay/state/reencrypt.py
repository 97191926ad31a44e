"""``relay reencrypt``: re-encrypt every stored secret under the first ``RELAY_ENCRYPTION_KEY``.

After a key rotation (``RELAY_ENCRYPTION_KEY=NEW,OLD`` on every process) the old key still
decrypts what it encrypted. This walks every encrypted value with ``SCAN`` over the known key
patterns (:data:`ENCRYPTED`), in batches, and rewrites each value that the first key cannot
open with ``MultiFernet.rotate``; then ``OLD`` can be dropped. Idempotent: a value already
under the first key is left as it is, so a second run rewrites nothing.

Each batch is one round trip to read and one to write; a write is a compare-and-set
(``relay/state/lua/reencrypt_signing.lua``), so a signing rotation racing the command is never
overwritten: that value is counted as changed meanwhile, and another run takes it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import redis

from relay.crypto import Encryptor
from relay.exceptions import ConfigError
from relay.redis import keyspace as keys
from relay.redis.clients import is_cluster
from relay.state.scripts import source

# Every key pattern holding encrypted values, with the hash fields that hold them.
ENCRYPTED: tuple[tuple[str, tuple[str, ...]], ...] = ((keys.signing("*"), ("current", "previous")),)


@dataclass
class Report:
    """What a run did, in values (hash fields), not keys."""

    keys: int = 0
    reencrypted: int = 0
    already_current: int = 0
    changed_meanwhile: int = 0
    unreadable: list[str] = field(default_factory=list)  # "key field": no configured key opens it

    def summary(self) -> str:
        text = (
            f"{self.reencrypted} value(s) re-encrypted with the first key, "
            f"{self.already_current} already under it, in {self.keys} key(s)"
        )
        if self.changed_meanwhile:
            text += f"; {self.changed_meanwhile} changed meanwhile (run again)"
        if self.unreadable:
            text += f"; {len(self.unreadable)} unreadable with the configured keys"
        return text


def _scan(client: redis.Redis, pattern: str, batch: int) -> Iterator[list[bytes]]:
    if is_cluster(client):  # SCAN walks one node: redis-py walks every primary in turn
        chunk: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=batch):
            chunk.append(key)
            if len(chunk) >= batch:
                yield chunk
                chunk = []
        if chunk:
            yield chunk
        return
    cursor = 0
    while True:
        cursor, found = client.scan(cursor, match=pattern, count=batch)
        if found:
            yield list(found)
        if int(cursor) == 0:
            return


def reencrypt(
    client: redis.Redis,
    encryptor: Encryptor,
    *,
    batch: int = 500,
    progress: Callable[[Report], None] | None = None,
) -> Report:
    """Rewrite every encrypted value the first key cannot open; see the module docstring."""
    if not encryptor.configured:
        encryptor.encrypt(b"")  # raises the ConfigError that says how to make a key
    cas = client.register_script(source("reencrypt_signing"))
    report = Report()
    for pattern, fields in ENCRYPTED:
        for found in _scan(client, pattern, batch):
            with client.pipeline(transaction=False) as pipe:
                for key in found:
                    pipe.hmget(key, list(fields))
                values = pipe.execute()
            writes: list[tuple[bytes, list[bytes]]] = []
            for key, tokens in zip(found, values, strict=True):
                report.keys += 1
                args: list[bytes] = []
                for name, token in zip(fields, tokens, strict=True):
                    if token is None:
                        continue
                    if encryptor.is_current(token):
                        report.already_current += 1
                        continue
                    try:
                        rotated = encryptor.rotate(token)
                    except ConfigError:
                        report.unreadable.append(f"{key.decode(errors='replace')} {name}")
                        continue
                    args += [name.encode(), token, rotated]
                if args:
                    writes.append((key, args))
            if writes and is_cluster(client):
                # One call each: a cluster pipeline does not load the script on a node
                # that lacks it (relay.state.webhooks_core, _cluster_round).
                replaced = [cas(keys=[key], args=args) for key, args in writes]
            elif writes:
                with client.pipeline(transaction=False) as pipe:
                    for key, args in writes:
                        cas(keys=[key], args=args, client=pipe)
                    replaced = pipe.execute()
            if writes:
                for (_, args), n in zip(writes, replaced, strict=True):
                    report.reencrypted += int(n)
                    report.changed_meanwhile += len(args) // 3 - int(n)
            if progress is not None:
                progress(report)
    return report


def run(client: redis.Redis, encryptor: Encryptor, batch: int) -> int:
    """The command: progress on stderr, the count on stdout; 1 if anything was unreadable."""

    def progress(r: Report) -> None:
        print(f"  {r.keys} key(s) scanned, {r.reencrypted} re-encrypted", file=sys.stderr)

    report = reencrypt(client, encryptor, batch=batch, progress=progress)
    for where in report.unreadable:
        print(f"unreadable: {where}", file=sys.stderr)
    print(report.summary())
    return 1 if report.unreadable else 0
