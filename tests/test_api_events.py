"""GET /events and GET /operational-events over HTTP (the app on uvicorn, the detector in the
test's process): the account sees its own events only, bad parameters are 4xx, long polls
wake on an append, are bounded, and outlive the listener's connection."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import redis

from relay.redis import keyspace
from relay.runtime.context import WorkerContext
from relay.runtime.detector import Detector, ensure_groups
from relay.state.event_bodies import event_body
from relay.state.event_feed import FeedWaiters
from relay.state.store import BatchRef
from tests.support.api_fixtures import V1, Api, ApiFactory, api_factory_fixture, api_fixture  # noqa: F401
from tests.support.helpers import relay_cli, wait_until


def complete_in_process(api: Api, account: str, name: str) -> None:
    """Upload one document, process it in this process (claim and finish), detect it."""
    api.upload_ok(account, name)
    r = api.client.post(f"{V1}/batches/{name}/process", headers=api.auth(account))
    assert r.status_code == 202, r.text
    ctx = WorkerContext(api.settings)
    ensure_groups(ctx.redis)
    store = ctx.store
    ref = BatchRef(account, name)
    for doc_id in store.redis.lrange(keyspace.batch_docs(ref.shard, account, name), 0, -1):
        claim = store.claim(ref, doc_id.decode(), "t", 60_000)
        if claim is not None:
            store.finish(claim, line_items=[], error=None)
    Detector(ctx, "d1").read_once(10)
    ctx.redis.close()


def _get(api: Api, account: str, path: str = "/events", **params: Any) -> Any:
    return api.client.get(f"{V1}{path}", params=params, headers=api.auth(account))


def test_an_account_reads_its_own_feed_only(api: Api) -> None:
    complete_in_process(api, "acme", "b1")
    complete_in_process(api, "globex", "g1")
    mine = _get(api, "acme").json()
    assert [e["data"]["batch_name"] for e in mine["events"]] == ["b1"]
    assert mine["next_cursor"] == mine["events"][0]["id"] and mine["has_more"] is False
    theirs = _get(api, "globex").json()["events"]
    assert [e["data"]["batch_name"] for e in theirs] == ["g1"]
    # Another account's event id is not a position in mine; its batch filter finds nothing.
    r = _get(api, "acme", after=theirs[0]["id"])
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    assert _get(api, "acme", batch_name="g1").json()["events"] == []
    assert _get(api, "acme", batch_name="b1").json()["events"] == mine["events"]
    # Nothing after the last one: an empty page that keeps the cursor.
    empty = _get(api, "acme", after=mine["next_cursor"]).json()
    assert empty == {"events": [], "next_cursor": mine["next_cursor"], "has_more": False}
    assert _get(api, "acme", path="/operational-events").json()["events"] == []
    assert _get(api, "nobody-yet").json() == {"events": [], "next_cursor": None, "has_more": False}


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"after": "nope"}, "invalid_cursor"),
        ({"limit": "0"}, "validation_error"),
        ({"limit": "201"}, "validation_error"),
        ({"type": "webhook.disabled"}, "validation_error"),
        ({"batch_name": "~ops"}, "validation_error"),
        ({"wait": "31"}, "validation_error"),
        ({"wait": "-1"}, "validation_error"),
        ({"wait": "soon"}, "validation_error"),
        ({"wait": "1e3"}, "validation_error"),
    ],
)
def test_bad_parameters_are_422(api: Api, params: dict[str, str], error: str) -> None:
    r = _get(api, "acme", **params)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["type"] == error


@pytest.mark.parametrize("path", ["/events", "/operational-events"])
@pytest.mark.parametrize(
    ("param", "error"),
    [
        ("batch_name", "validation_error"),
        ("after", "invalid_cursor"),
        ("type", "validation_error"),
        ("wait", "validation_error"),
    ],
)
def test_a_parameter_given_empty_is_422_not_absent(
    api: Api, path: str, param: str, error: str
) -> None:
    """`batch_name=` (or `after=`, `type=`, `wait=`) matches none of the published schemas:
    422 like any malformed value, on both feeds, not read as "no filter"; the feed itself
    answers without it."""
    complete_in_process(api, "acme", "b1")
    r = _get(api, "acme", path=path, **{param: ""})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["type"] == error
    if param == "batch_name":
        assert r.json()["error"]["message"] == "batch_name is not a valid batch name"
    assert _get(api, "acme", path=path).status_code == 200


def test_an_unknown_event_id_is_404_and_any_number_of_seconds_is_a_wait(api: Api) -> None:
    r = _get(api, "acme", after="msg_0aaaaaaaaaaaaaaaaaaaa")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    for wait in ("0", "0.3333333333333333", "1e-2", "0.05"):
        r = _get(api, "acme", wait=wait)
        assert r.status_code == 200 and r.json()["events"] == [], wait


def test_the_feed_needs_a_key(api: Api) -> None:
    assert api.client.get(f"{V1}/events").status_code == 401
    assert api.client.get(f"{V1}/operational-events").status_code == 401


def test_operational_events_feed(api: Api, redis: redis.Redis) -> None:
    """An operational event raised in a batch's shard lands in the operator's feed of the
    account whether or not an operational webhook exists, with the id its delivery gets."""
    fields = {
        "kind": "webhook.disabled",
        "account": "acme",
        "batch": "b1",
        "url": "https://x.example/h",
        "reason": "gone",
        "at": "1700000000000",
    }
    ctx = WorkerContext(api.settings)
    ensure_groups(ctx.redis)
    redis.xadd(keyspace.outbox(5), fields)
    assert Detector(ctx, "d1").read_once(10) == 1
    ctx.redis.close()
    (event,) = _get(api, "acme", path="/operational-events").json()["events"]
    body = event_body({k.encode(): v.encode() for k, v in fields.items()})
    assert {k: v for k, v in event.items() if k != "id"} == json.loads(body)
    assert keyspace.shard_of_id("msg", event["id"]) == keyspace.shard_for_batch(
        "acme", keyspace.OPERATIONAL_BATCH
    )
    assert _get(api, "acme").json()["events"] == []  # not in the account's batch feed
    r = _get(api, "acme", path="/operational-events", type="batch.completed")
    assert r.status_code == 422


def _poll(api: Api, account: str, out: dict[str, Any], **params: Any) -> threading.Thread:
    def run() -> None:
        out["response"] = _get(api, account, **params)
        out["at"] = time.monotonic()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _waiting(api: Api, n: int) -> None:
    waiters = api.app.state.relay.waiters
    wait_until(lambda: waiters._total == n, 10, message=f"{n} waiting requests")


def test_a_long_poll_wakes_on_an_event_and_an_idle_one_ends_after_its_wait(api: Api) -> None:
    _waiting(api, 0)
    out: dict[str, Any] = {}
    thread = _poll(api, "acme", out, wait="25")
    _waiting(api, 1)
    complete_in_process(api, "globex", "g1")  # another account's event wakes nothing of acme's
    time.sleep(0.3)
    assert thread.is_alive()
    t0 = time.monotonic()
    complete_in_process(api, "acme", "b1")
    thread.join(20)
    assert out["at"] - t0 < 5  # the wait was 25 s
    (event,) = out["response"].json()["events"]
    assert event["data"]["batch_name"] == "b1"
    t0 = time.monotonic()
    r = _get(api, "acme", after=event["id"], wait="1.5")
    assert r.json()["events"] == [] and 1.4 <= time.monotonic() - t0 < 10
    _waiting(api, 0)


def test_waiting_requests_are_bounded_per_account(api_factory: ApiFactory) -> None:
    api = api_factory(events_max_waiters_per_account=2, events_max_waiters=3)
    outs: list[dict[str, Any]] = [{}, {}]
    threads = [_poll(api, "acme", o, wait="20") for o in outs]
    _waiting(api, 2)
    r = _get(api, "acme", wait="5")
    assert r.status_code == 429 and r.json()["error"]["type"] == "too_many_waiters"
    assert r.headers["retry-after"] == "1"
    assert r.headers["ratelimit-limit"] == "2" and r.headers["ratelimit-remaining"] == "0"
    assert _get(api, "acme").status_code == 200  # not waiting: not bounded
    other: dict[str, Any] = {}
    third = _poll(api, "globex", other, wait="20")
    _waiting(api, 3)
    r = _get(api, "initech", wait="5")  # the process's bound
    assert r.status_code == 429 and r.json()["error"]["type"] == "too_many_waiters"
    assert r.headers["ratelimit-limit"] == "3"
    complete_in_process(api, "acme", "b1")
    complete_in_process(api, "globex", "g1")
    for t in [*threads, third]:
        t.join(20)
    assert all(len(o["response"].json()["events"]) == 1 for o in [*outs, other])


def test_a_long_poll_outlives_the_listener_connection(api: Api, redis: redis.Redis) -> None:
    """The listener's connection is killed: it reconnects and the waiting request still
    returns when the event comes."""
    waiters: FeedWaiters = api.app.state.relay.waiters
    wait_until(lambda: waiters.connected, 10, message="listener connected")
    before = waiters.reconnects
    out: dict[str, Any] = {}
    thread = _poll(api, "acme", out, wait="25")
    _waiting(api, 1)
    redis.client_kill_filter(_type="pubsub")
    wait_until(lambda: waiters.reconnects > before and waiters.connected, 15, message="reconnect")
    complete_in_process(api, "acme", "b1")
    thread.join(20)
    assert len(out["response"].json()["events"]) == 1


def test_relay_events_prints_the_feed(api: Api) -> None:
    """``relay events``: the operator reads any account's feed from the terminal."""
    complete_in_process(api, "acme", "b1")
    complete_in_process(api, "acme", "b2")
    events = _get(api, "acme").json()["events"]
    done = relay_cli(api.settings.redis_url, "events", "--account", "acme")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == events
    assert f"last id: {events[-1]['id']}" in done.stderr
    done = relay_cli(
        api.settings.redis_url, "events", "--account", "acme", "--after", events[0]["id"]
    )
    assert [json.loads(line) for line in done.stdout.splitlines()] == events[1:]
    bad = relay_cli(api.settings.redis_url, "events", "--account", "acme", "--after", "msg_x")
    assert bad.returncode == 1 and "no event" in bad.stderr
    ops = relay_cli(api.settings.redis_url, "events", "--account", "acme", "--operational")
    assert ops.returncode == 0 and ops.stdout == ""
    # Bad input is a clear error, never a loop (a limit under 1 once read the same page
    # for good) nor a silently empty feed.
    for args, error in [
        (("--limit", "0"), "--limit: '0' is not a whole number from 1 to 200"),
        (("--limit", "-3"), "--limit: '-3' is not a whole number from 1 to 200"),
        (("--limit", "201"), "--limit: '201' is not a whole number from 1 to 200"),
        (("--type", "nope"), "--type must be one of batch.completed"),
        (("--type", "webhook.disabled"), "--type must be one of batch.completed"),
        (("--batch", "~x"), "--batch: '~x' is not a batch name"),
    ]:
        bad = relay_cli(api.settings.redis_url, "events", "--account", "acme", *args, timeout=10)
        assert bad.returncode == 2 and error in bad.stderr, (args, bad.stderr)
        assert bad.stdout == ""
    one = relay_cli(
        api.settings.redis_url, "events", "--account", "acme", "--limit", "1", "--batch", "b2"
    )
    assert [json.loads(line) for line in one.stdout.splitlines()] == events[1:]
