"""``relay deliveries list|show|retry`` and ``relay keys`` as an operator runs them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import redis
import redis.asyncio

from relay.state.api_keys import lookup_key
from relay.state.model import Attempt, DeliveryStatus
from relay.state.store import BatchRef
from relay.state.webhooks import AsyncWebhookStore, WebhookStore
from relay.timefmt import now_ms
from tests.support.helpers import relay_cli


def _failed_delivery(
    redis_url: str,
    client: redis.Redis,
    name: str,
    excerpt: str = "busy, try later",
    url: str = "https://hooks.example.com/x",
) -> str:
    ref = BatchRef("acme", name)
    client.hset(ref.key, mapping={"account": "acme", "name": name, "created_at": 1})

    async def register() -> None:
        aclient = redis.asyncio.Redis.from_url(redis_url)
        await AsyncWebhookStore(aclient).register(ref, url, "http://a")
        await aclient.aclose()

    asyncio.run(register())
    d = WebhookStore(client)
    _, ident = d.create(ref, 1, b"{}")
    (c,) = d.claim(ref.shard, limit=1, lease_ms=60_000, token="t")
    attempt = Attempt(1, now_ms(), 12.5, 503, "http_status", excerpt)
    d.record(c, "t", attempt, outcome="failed")
    return ident


def test_list_show_and_retry_one(redis_url: str, redis: redis.Redis) -> None:
    ident = _failed_delivery(redis_url, redis, "b1")
    listed = relay_cli(redis_url, "deliveries", "list", "--status", "failed")
    assert listed.returncode == 0, listed.stderr
    assert ident in listed.stdout and "acme" in listed.stdout and "failed" in listed.stdout
    assert relay_cli(redis_url, "deliveries", "list", "--status", "pending").stdout == ""
    shown = relay_cli(redis_url, "deliveries", "show", ident)
    assert shown.returncode == 0
    assert "503" in shown.stdout and "http_status" in shown.stdout and "busy" in shown.stdout
    assert shown.stdout.count("\n") >= 6  # header lines, table head, rule, one row
    retried = relay_cli(redis_url, "deliveries", "retry", ident)
    assert retried.returncode == 0, retried.stderr
    found = WebhookStore(redis).get(ident)
    assert found is not None and found.status is DeliveryStatus.PENDING
    assert redis.llen("rq:queue:relay-delivery") == 1  # its shard was woken


def test_bulk_retry_of_failed_since(redis_url: str, redis: redis.Redis) -> None:
    ids = [_failed_delivery(redis_url, redis, f"b{i}") for i in range(3)]
    done = relay_cli(redis_url, "deliveries", "retry", "--status", "failed", "--since", "2h")
    assert done.returncode == 0, done.stderr
    assert "3 delivery(ies) recovered" in done.stdout  # the older spelling of recover
    d = WebhookStore(redis)
    assert all(d.get(i).status is DeliveryStatus.PENDING for i in ids)  # type: ignore[union-attr]
    bad = relay_cli(redis_url, "deliveries", "retry", "--status", "failed", "--since", "2 hours")
    assert bad.returncode == 2 and "duration" in bad.stderr


def test_show_unknown_and_retry_without_target(redis_url: str) -> None:
    assert relay_cli(redis_url, "deliveries", "show", "msg_0nothere").returncode == 1
    assert relay_cli(redis_url, "deliveries", "retry").returncode == 2


def test_keys_create_list_revoke(redis_url: str) -> None:
    created = relay_cli(redis_url, "keys", "create", "--account", "acme")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip().splitlines()[-1]
    assert key.startswith("rk_")
    prefix = key.split("_")[1]
    listed = relay_cli(redis_url, "keys", "list")
    assert prefix in listed.stdout and "active" in listed.stdout and key not in listed.stdout
    assert relay_cli(redis_url, "keys", "revoke", prefix).returncode == 0
    assert "revoked" in relay_cli(redis_url, "keys", "list").stdout
    assert relay_cli(redis_url, "keys", "revoke", "zzzzzzzz").returncode == 1


def test_keys_create_operator(redis_url: str, redis: redis.Redis) -> None:
    created = relay_cli(redis_url, "keys", "create", "--operator", "alice")
    assert created.returncode == 0, created.stderr
    assert "operator key for alice" in created.stderr
    key = created.stdout.strip().splitlines()[-1]
    assert lookup_key(redis, key) is None  # the API refuses it
    listed = relay_cli(redis_url, "keys", "list")
    assert f"{key.split('_')[1]}\toperator:alice\tactive" in listed.stdout
    both = relay_cli(redis_url, "keys", "create", "--operator", "a", "--account", "b")
    assert both.returncode == 2
    assert relay_cli(redis_url, "keys", "create").returncode == 2
    bad = relay_cli(redis_url, "keys", "create", "--operator", "Not Valid")
    assert bad.returncode == 2 and "invalid operator name" in bad.stderr


def test_unknown_setting_stops_the_command(redis_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env["RELAY_NOT_A_SETTING"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "relay", "keys", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and "RELAY_NOT_A_SETTING" in done.stderr


def test_api_and_worker_refuse_to_start_without_an_encryption_key(redis_url: str) -> None:
    for command in (["serve", "--port", "1"], ["worker", "--burst"]):
        done = relay_cli(redis_url, *command)
        assert done.returncode == 2, done.stderr
        assert "RELAY_ENCRYPTION_KEY is not set" in done.stderr


def _show_failed(redis_url: str, redis: redis.Redis, **delivery: str) -> str:
    """What ``relay deliveries show`` prints of a failed delivery of batch b1 (``delivery``:
    its ``url`` or ``excerpt``)."""
    ident = _failed_delivery(redis_url, redis, "b1", **delivery)
    shown = relay_cli(redis_url, "deliveries", "show", ident)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_show_escapes_control_characters_from_the_receiver(
    redis_url: str, redis: redis.Redis
) -> None:
    hostile = "\x1b[2J\x1b[Hall good\r\n\x9b31m\u202eevil\x07"
    shown = _show_failed(redis_url, redis, excerpt=hostile)
    assert "\x1b" not in shown and "\x9b" not in shown and "\u202e" not in shown
    assert "\x07" not in shown and "\r" not in shown
    assert "\\x1b[2J\\x1b[Hall good\\r\\n\\x9b31m\\u202eevil\\x07" in shown


def test_show_masks_the_query_values_of_the_callback_url(
    redis_url: str, redis: redis.Redis
) -> None:
    url = "https://hooks.example.com/in?token=SECRET-123&v=2"
    shown = _show_failed(redis_url, redis, url=url)
    assert "SECRET-123" not in shown
    assert "url https://hooks.example.com/in?token=…&v=…" in shown
