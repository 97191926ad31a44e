"""``relay deliveries list|show|retry``: the operator's view of webhook deliveries.

Every string that came from a tenant or a receiver goes through ``for_terminal`` (``_t``)
before it is printed: a response excerpt holding ANSI escapes must not rewrite the screen.
"""

from __future__ import annotations

import argparse
import sys
import time

from relay import queues
from relay.config import Settings
from relay.exceptions import StateError
from relay.keys import shard_of_id
from relay.model import Delivery
from relay.redis_conn import RedisTarget, sync_client
from relay.text import for_terminal as _t
from relay.timefmt import rfc3339
from relay.webhook_store import WebhookStore

RETRYABLE = {"failed", "canceled", "succeeded"}


def _line(d: Delivery) -> str:
    nxt = rfc3339(d.next_attempt_at) or "-"
    return (
        f"{_t(d.id)}  {_t(d.account):<12} {_t(d.batch_name):<24} {d.status.value:<10} "
        f"attempts={d.attempt_count:<2} next={nxt}"
    )


def _table(d: Delivery) -> str:
    head = (
        f"delivery {_t(d.id)}\n  account {_t(d.account)}  batch {_t(d.batch_name)}  "
        f"completion_seq {d.completion_seq}\n  url {_t(d.url)}\n  status {d.status.value}  "
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


def _select(store: WebhookStore, args: argparse.Namespace, *, limit: int) -> list[Delivery]:
    since_ms = int((time.time() - args.since) * 1000) if args.since else 0
    out = []
    for d in store.list(limit=limit, since_ms=since_ms):
        if args.status and d.status.value != args.status:
            continue
        if args.account and d.account != args.account:
            continue
        if args.batch and d.batch_name != args.batch:
            continue
        out.append(d)
    return out


def run(settings: Settings, args: argparse.Namespace) -> int:
    client = sync_client(RedisTarget.from_settings(settings))
    store = WebhookStore(client)
    cmd = args.deliveries_cmd
    if cmd == "list":
        for d in _select(store, args, limit=args.limit):
            print(_line(d))
        return 0
    if cmd == "show":
        found = store.get(args.id)
        if found is None:
            print(f"no delivery {args.id!r}", file=sys.stderr)
            return 1
        print(_table(found))
        return 0
    # retry: one id, or every delivery matching --status/--since/--account/--batch
    if args.id:
        targets = [args.id]
    elif args.status or args.since:
        if args.status and args.status not in RETRYABLE:
            print(f"--status must be one of {sorted(RETRYABLE)}", file=sys.stderr)
            return 2
        targets = [d.id for d in _select(store, args, limit=100_000) if d.status.value in RETRYABLE]
    else:
        print("give a delivery id, or --status and/or --since for bulk recovery", file=sys.stderr)
        return 2
    failures = 0
    shards = set()
    for ident in targets:
        try:
            d = store.retry(ident)
        except StateError as exc:
            print(f"{_t(ident)}: not retried: {_t(exc.message)}", file=sys.stderr)
            failures += 1
            continue
        shard = shard_of_id("msg", ident)
        if shard is not None:
            shards.add(shard)
        print(f"{_t(d.id)}: pending again (due now)")
    for shard in shards:
        queues.wake(client, shard, settings)
    print(f"{len(targets) - failures} delivery(ies) retried, {failures} not retryable")
    return 1 if failures and len(targets) == failures else 0
