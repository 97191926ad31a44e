"""End to end, real processes: the event feed lets a receiver that was down catch up, in
order, once each; paging while completions arrive loses nothing; long polling returns the
moment an event is recorded."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeAlias
from urllib.parse import urlsplit

import httpx
import pytest
import redis
import redis.cluster

from relay.devtools.processes import Stack
from relay.redis import keyspace
from relay.state.event_feed import FALLBACK_S
from tests.e2e.client import Api
from tests.e2e.test_webhooks import CSV
from tests.support.helpers import free_port, wait_until
from tests.support.receiver import Receiver

# The state's Redis: one server, or a Redis Cluster (its outboxes on three primaries).
State: TypeAlias = "redis.Redis | redis.cluster.RedisCluster"


def _state(stack: Stack, request: pytest.FixtureRequest) -> tuple[State, list[redis.Redis]]:
    """A client of the stack's state and one of each primary (to hold its writes)."""
    nodes = stack.env.get("RELAY_REDIS_CLUSTER_NODES")
    if not nodes:
        client: redis.Redis = request.getfixturevalue("redis")
        return client, [client]
    host, port = nodes.split(",")[0].rsplit(":", 1)
    password = urlsplit(stack.redis_url).password
    cluster = redis.cluster.RedisCluster(host=host, port=int(port), password=password)
    primaries = [
        redis.Redis(host=node.host, port=node.port, password=password)
        for node in cluster.get_primaries()
    ]
    # The queues' Redis too, as on one server: workers held at their dequeue as well.
    primaries.append(redis.Redis.from_url(stack.env["RELAY_QUEUE_REDIS_URL"]))
    for client_ in (cluster, *primaries):
        request.addfinalizer(client_.close)
    return cluster, primaries


def _start(stack: Stack, workers: int = 1, **detector: str) -> Api:
    stack.api()
    for _ in range(workers):
        stack.worker()
    stack.detector(**detector)
    return Api(stack.api_url, stack.create_key("acme"))


def _page(api: Api, after: str | None, limit: int = 50, **params: Any) -> dict[str, Any]:
    query: dict[str, Any] = {"limit": limit, **params}
    if after is not None:
        query["after"] = after
    r = api.http.get("/events", params=query, timeout=40)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _read_all(api: Api, after: str | None, limit: int) -> tuple[list[dict[str, Any]], str | None]:
    events: list[dict[str, Any]] = []
    while True:
        page = _page(api, after, limit)
        events += page["events"]
        after = page["next_cursor"]
        if not page["has_more"]:
            return events, after


def _recorded_ms(state: State, event: dict[str, Any]) -> int:
    """When relay recorded the completion: the time of its outbox entry (Redis time; the
    detector's sweep, which trims the outbox, is held off in the test that reads it)."""
    data = event["data"]
    shard = keyspace.shard_for_batch("acme", data["batch_name"])
    for entry_id, fields in state.xrange(keyspace.outbox(shard)):
        if fields[b"batch"].decode() == data["batch_name"] and int(fields[b"seq"]) == int(
            data["completion_seq"]
        ):
            return int(entry_id.decode().partition("-")[0])
    raise AssertionError(f"no outbox entry for {data['batch_name']} #{data['completion_seq']}")


@contextmanager
def _writes_held_now_and_then(primaries: list[redis.Redis], hold_ms: int = 300) -> Iterator[None]:
    """Holds every write to the state's Redis for ``hold_ms`` (CLIENT PAUSE WRITE on each
    primary), over and over: the workers' finish scripts queue behind the pause and run back
    to back when it ends, so completions in different shards are recorded in the same
    millisecond (what a cursor made of timestamps, or a merge of the shards by time, would
    get wrong)."""
    stop = threading.Event()

    def hold() -> None:
        while not stop.is_set():
            for primary in primaries:
                primary.client_pause(hold_ms, all=False)
            stop.wait(hold_ms / 1000 + 0.15)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)
        for primary in primaries:
            primary.client_unpause()


def _same_instant_across_shards(state: State, events: list[dict[str, Any]]) -> int:
    """How many events share their recorded millisecond with an event of another shard."""
    shards: defaultdict[int, set[int]] = defaultdict(set)
    at = [
        (_recorded_ms(state, e), keyspace.shard_for_batch("acme", e["data"]["batch_name"]))
        for e in events
    ]
    for ms, shard in at:
        shards[ms].add(shard)
    return sum(1 for ms, _ in at if len(shards[ms]) > 1)


def _names(events: list[dict[str, Any]]) -> list[str]:
    return [e["data"]["batch_name"] for e in events]


# How far out of completion order a Cluster's feed may record two completions: its
# detector reads the outboxes in one round trip per primary, not at one instant, so a
# completion on a primary read a moment earlier is recorded in the next read, after one
# made a few ms later on a primary read later (docs/decisions.md, "Order"). On one Redis a
# read takes every outbox at once: no slack.
CLUSTER_ORDER_SLACK_MS = 2_000


def _in_completion_order(state: State, events: list[dict[str, Any]]) -> None:
    times = [_recorded_ms(state, e) for e in events]
    if not isinstance(state, redis.cluster.RedisCluster):
        assert times == sorted(times), "the feed is not in completion order"
        return
    latest = max(times[0], 0)
    for t in times:
        assert t > latest - CLUSTER_ORDER_SLACK_MS, (
            f"recorded {latest - t} ms out of completion order: {times}"
        )
        latest = max(latest, t)


def test_a_receiver_down_catches_up_from_its_last_id_and_paging_loses_nothing(
    any_stack: Stack, receiver: Receiver, request: pytest.FixtureRequest
) -> None:
    """On one Redis, and on a Redis Cluster (the shards' outboxes on three primaries, the
    account's feed on one of them)."""
    stack = any_stack
    state, primaries = _state(stack, request)
    # No detector sweep (it would trim the outboxes this test reads the completion times
    # from; nothing here needs a retry, a lease or a purge).
    api = _start(stack, workers=4, RELAY_SWEEP_INTERVAL="600")
    # Up: two completions delivered; the receiver keeps the id of the last one it processed.
    for name in ("first-1", "first-2"):
        api.upload(name, CSV)
        assert api.register(name, receiver.url()).status_code == 201
        api.process(name)
        wait_until(lambda: receiver.accepted(), 20, message="no delivery")
        wait_until(
            lambda n=name: any(  # type: ignore[misc]
                json.loads(r.body)["data"]["batch_name"] == n for r in receiver.accepted()
            ),
            20,
            message=f"{name} not delivered",
        )
    last = receiver.accepted()[-1]
    last_id = last.headers["webhook-id"]

    # Down (nothing listens on its port): 50 batches across the shards complete, four
    # workers finishing them as fast as they can, Redis's writes held now and then so that
    # some finish in the same millisecond in different shards.
    down = f"http://127.0.0.1:{free_port()}/hook"
    names = [f"down-{i:02d}" for i in range(50)]
    for name in names:
        api.upload(name, CSV)
        assert api.register(name, down).status_code == 201
    assert len({keyspace.shard_for_batch("acme", n) for n in names}) == keyspace.DEFAULT_SHARDS
    with _writes_held_now_and_then(primaries):
        for name in names:
            api.process(name)
        wait_until(
            lambda: all(api.batch(n)["all_done"] for n in names), 90, message="batches not done"
        )
    wait_until(lambda: len(_read_all(api, None, 200)[0]) == 52, 30, message="feed incomplete")

    # Back: from its last id, in pages of 7.
    events, cursor = _read_all(api, last_id, 7)
    assert len(events) == 50 and len({e["id"] for e in events}) == 50  # no duplicate
    assert sorted(_names(events)) == names  # all 50 (no gap), nothing else
    _in_completion_order(state, events)
    same_instant = _same_instant_across_shards(state, events)
    print(f"completions sharing a millisecond with one of another shard: {same_instant}")
    if isinstance(state, redis.Redis):  # one server
        assert same_instant >= 2
    # On a Cluster the shards' finishes run on three primaries in parallel, a few ms apart
    # on a 2-core machine even when released together (0 to 2 pairs in a run): the count
    # is printed, not asserted; the feed's properties above are asserted all the same.
    # Each event is its webhook: same id as the batch's delivery, the same body.
    for event in events[:10]:
        (delivery,) = api.deliveries(event["data"]["batch_name"])
        assert delivery["id"] == event["id"]
    before = _read_all(api, None, 200)[0]
    assert json.loads(last.body) == {k: v for k, v in before[1].items() if k != "id"}
    assert before[1]["id"] == last_id
    # Pages of 7 from the last id are exactly the feed after it read in one go.
    assert before[2:] == events

    # Paging with `after` while 30 more batches complete (no webhook: in the feed anyway).
    late = [f"late-{i:02d}" for i in range(30)]
    for name in late:
        api.upload(name, CSV)
    producer = Api(stack.api_url, api.http.headers["authorization"].split()[-1])

    def complete_late() -> None:
        for name in late:
            producer.process(name)
            time.sleep(0.02)

    thread = threading.Thread(target=complete_late)
    thread.start()
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + 90
    while len(seen) < 30 and time.monotonic() < deadline:
        page = _page(api, cursor, 3)
        seen += page["events"]
        cursor = page["next_cursor"]
        if not page["events"]:
            time.sleep(0.05)
    thread.join(30)
    time.sleep(0.5)
    rest, _ = _read_all(api, cursor, 50)
    assert rest == []  # nothing after the last one
    assert sorted(_names(seen)) == late and len(seen) == 30
    _in_completion_order(state, seen)
    everything, _ = _read_all(api, None, 200)
    assert len(everything) == 82 and len({e["id"] for e in everything}) == 82
    _in_completion_order(state, everything)
    producer.close()
    api.close()


def test_long_polling_returns_when_a_batch_completes(any_stack: Stack) -> None:
    """p50 of (return of a waiting ?wait=25, minus the batch's completed_at) over 30 (on a
    Cluster too: the API's listener subscribes on one node, the scripts publish on others)."""
    stack = any_stack
    api = _start(stack)
    rounds = 30
    for i in range(rounds):
        api.upload(f"lp-{i:02d}", CSV)
    cursor: str | None = None
    lags: list[float] = []
    base = stack.api_url + "/api/v1/events"
    headers = {"authorization": api.http.headers["authorization"]}
    with httpx.Client(timeout=40, headers=headers) as poller:
        for i in range(rounds):
            result: dict[str, Any] = {}

            def wait(after: str | None = cursor, result: dict[str, Any] = result) -> None:
                params = {"wait": "25", **({"after": after} if after else {})}
                r = poller.get(base, params=params)
                result["at"] = time.time()
                result["response"] = r

            thread = threading.Thread(target=wait)
            thread.start()
            time.sleep(0.3)  # the request is waiting
            assert thread.is_alive()
            api.process(f"lp-{i:02d}")
            thread.join(30)
            r = result["response"]
            assert r.status_code == 200, r.text
            (event,) = r.json()["events"]
            assert event["data"]["batch_name"] == f"lp-{i:02d}"
            cursor = event["id"]
            completed_ms = api.batch(f"lp-{i:02d}")["completed_at"]
            lag = result["at"] * 1000 - _ms(completed_ms)
            lags.append(lag)
        p50 = statistics.median(lags)
        print(f"long poll: p50 {p50:.1f} ms, max {max(lags):.1f} ms over {rounds}")
        # Each returned on its event, not at the end of its 25 s wait; and mostly on the
        # wake-up the append publishes, not on the read a waiter makes every FALLBACK_S
        # anyway. How fast is measured in bench (`python -m bench feed`), not asserted here.
        assert max(lags) < 20_000
        assert p50 < FALLBACK_S * 1000
        # Nothing new: empty after the wait.
        t0 = time.monotonic()
        r = poller.get(base, params={"wait": "2", "after": cursor})
        took = time.monotonic() - t0
        assert r.status_code == 200 and r.json()["events"] == []
        assert r.json()["next_cursor"] == cursor
        assert 1.9 <= took < 10
    api.close()


def _ms(rfc3339: str) -> float:
    from relay.timefmt import parse_rfc3339

    at = parse_rfc3339(rfc3339)
    assert at is not None
    return float(at)
