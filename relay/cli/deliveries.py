"""``relay deliveries list|show|retry|recover``: the operator's view of webhook deliveries.

``list`` and ``recover`` run the state layer's indexed query (``WebhookStore.search`` and
``.recover``, ``relay.state.delivery_search``), the same as the API's ``GET /deliveries`` and
``POST /deliveries/recover``, over every account or one (``--account``).

Every string that came from a tenant or a receiver goes through ``for_terminal`` (``_t``)
before it is printed: a response excerpt holding ANSI escapes must not rewrite the screen.
"""

from __future__ import annotations

import argparse
import sys

from redis import Redis

from relay.config import Settings
from relay.exceptions import StateError
from relay.logs import mask_query
from relay.redis.clients import RedisTarget, sync_client
from relay.redis.keyspace import shard_of_id
from relay.redis.shards import Follower
from relay.state import job_queues
from relay.state.delivery_search import RECOVERABLE, Recovery
from relay.state.model import Delivery, DeliveryStatus
from relay.state.webhooks import WebhookStore
from relay.text import for_terminal as _t
from relay.timefmt import parse_duration, parse_rfc3339, rfc3339

MAX_LIST = 1000


def _line(d: Delivery) -> str:
    nxt = rfc3339(d.next_attempt_at) or "-"
    return (
        f"{_t(d.id)}  {_t(d.account):<12} {_t(d.batch_name):<24} {_t(d.type):<18} "
        f"{d.status.value:<10} attempts={d.attempt_count:<2} next={nxt}"
        + (f" document={_t(d.document_id)}" if d.document_id else "")
    )


def _table(d: Delivery) -> str:
    of = f"document {_t(d.document_id)}" if d.document_id else f"completion_seq {d.completion_seq}"
    head = (
        f"delivery {_t(d.id)}  {_t(d.type)}\n"
        f"  account {_t(d.account)}  batch {_t(d.batch_name)}  {of}\n"
        f"  url {_t(mask_query(d.url))}\n"
        f"  status {d.status.value}  "
        f"created {rfc3339(d.created_at)}  next attempt {rfc3339(d.next_attempt_at) or '-'}\n"
    )
    rows = [("#", "at", "ms", "status", "error", "response")]
    for a in d.attempts:
        rows.append(
            (
                str(a.number),
                rfc3339(a.at) or "",
                f"{a.duration_ms:.0f}",
                str(a.status_code or "-"),
                _t(a.error or "-"),
                _t(a.response_excerpt[:60]),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return head + "\n".join(lines) + ("\n  (no attempts yet)" if not d.attempts else "")


def _when(text: str | None, now: int) -> int | None:
    """An RFC 3339 time, or a duration back from now (``90s``, ``15m``, ``6h``, ``7d``)."""
    if text is None:
        return None
    at = parse_rfc3339(text)
    if at is not None:
        return at
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise _Usage(f"expected an RFC 3339 time or a duration like 6h, got {_t(text)!r}") from None
    return now - round(seconds * 1000)


class _Usage(Exception):
    """A bad option value: one line on stderr, exit code 2."""


def _status(text: str | None, allowed: tuple[DeliveryStatus, ...]) -> DeliveryStatus | None:
    if text is None:
        return None
    if text not in {s.value for s in allowed}:
        raise _Usage(f"--status must be one of {', '.join(s.value for s in allowed)}")
    return DeliveryStatus(text)


def _list(store: WebhookStore, args: argparse.Namespace, now: int) -> int:
    if args.batch and not args.account:
        raise _Usage("--batch needs --account (batch names are per account)")
    if not 1 <= args.limit <= MAX_LIST:
        raise _Usage(f"--limit must be from 1 to {MAX_LIST}")
    found, after = store.search(
        account=args.account,
        status=_status(args.status, tuple(DeliveryStatus)),
        batch=args.batch,
        since_ms=_when(args.since, now),
        until_ms=_when(args.until, now),
        limit=args.limit,
        cursor=args.cursor,
    )
    for d in found:
        print(_line(d))
    if after is not None:
        print(f"next cursor: {after}  (--cursor {after})", file=sys.stderr)
    return 0


def _recover(
    settings: Settings, client: Redis, store: WebhookStore, args: argparse.Namespace, now: int
) -> int:
    status = _status(args.status, RECOVERABLE) or DeliveryStatus.FAILED
    since = _when(args.since, now)
    who = f"account {_t(args.account)}" if args.account else "every account"
    client.ping()  # an unreachable Redis is one line from the caller, before any progress
    print(f"recovering {status.value} deliveries of {who}...", file=sys.stderr)

    def progress(r: Recovery) -> None:
        print(f"  {r.recovered} recovered, {r.skipped} skipped so far", file=sys.stderr)

    result = store.recover(
        status=status,
        since_ms=since or 0,
        until_ms=_when(args.until, now),
        account=args.account,
        progress=progress,
    )
    for shard in sorted(result.shards):
        job_queues.wake(sync_client(RedisTarget.queues_from_settings(settings)), shard, settings)
    print(
        f"{result.recovered} delivery(ies) recovered, {result.skipped} skipped "
        "(webhook removed or disabled)"
    )
    return 0


def run(settings: Settings, args: argparse.Namespace) -> int:
    client = sync_client(RedisTarget.from_settings(settings))
    Follower(settings, client).first(unreachable_ok=False)  # the shards in use, no thread
    store = WebhookStore(client)
    cmd = args.deliveries_cmd
    now = store.clock()
    try:
        if cmd == "list":
            return _list(store, args, now)
        if cmd == "recover" or (cmd == "retry" and not args.id):
            # `retry --status/--since` is the older spelling of recover.
            if cmd == "retry" and not (args.status or args.since):
                raise _Usage("give a delivery id, or use `relay deliveries recover --since D`")
            return _recover(settings, client, store, args, now)
    except _Usage as exc:
        print(f"relay deliveries {cmd}: {exc}", file=sys.stderr)
        return 2
    if cmd == "show":
        found = store.get(args.id)
        if found is None:
            print(f"no delivery {_t(args.id)!r}", file=sys.stderr)
            return 1
        print(_table(found))
        return 0
    # retry ID
    try:
        d = store.retry(args.id)
    except StateError as exc:
        print(f"{_t(args.id)}: not retried: {_t(exc.message)}", file=sys.stderr)
        return 1
    shard = shard_of_id("msg", args.id)
    if shard is not None:
        job_queues.wake(sync_client(RedisTarget.queues_from_settings(settings)), shard, settings)
    print(f"{_t(d.id)}: pending again (due now)")
    return 0
