"""End to end: completion -> detector -> RQ delivery -> a real receiver, with real processes."""

from __future__ import annotations

import itertools
import time

import pytest
import redis
from rq.registry import StartedJobRegistry

from relay.devtools.processes import Stack
from relay.redis import keyspace
from relay.runtime.detector import GROUP
from relay.state.job_queues import DELIVERY, queue_key
from tests.e2e.client import Api
from tests.e2e.verify import verify_both, verify_v1, verify_v1a
from tests.support.helpers import free_port, wait_until
from tests.support.receiver import Receiver, Reply

CSV = b"sku,qty\nA-1,2\nB-7,5\n"


def settled(client: redis.Redis) -> bool:
    """Whether relay has nothing left to send: no delivery due, no delivery job waiting or
    running, no completion read by a detector and not yet turned into its delivery. What a
    receiver holds then is final, without waiting to see whether more arrives."""
    for s in keyspace.all_shards():
        if client.zcard(keyspace.due(s)) or client.xpending(keyspace.outbox(s), GROUP)["pending"]:
            return False
    running = StartedJobRegistry(DELIVERY, connection=client).count
    return not client.llen(queue_key(DELIVERY)) and not running


def delivered_once(api: Api, client: redis.Redis, batch: str) -> list[dict[str, object]]:
    """Once relay has ``settled``: the batch's deliveries, each asserted succeeded at its first
    attempt and with nothing to come."""
    wait_until(lambda: settled(client), 10, message="deliveries still in flight")
    deliveries = api.deliveries(batch)
    for d in deliveries:
        assert d["status"] == "succeeded" and d["next_attempt_at"] is None, d
        assert len(d["attempts"]) == 1, d
    return deliveries


def start(stack: Stack, workers: int = 1, detectors: int = 1, **settings: str) -> Api:
    """Start the API, ``workers`` workers and ``detectors`` detectors with ``settings`` in their
    environment; an API client of a new account's key."""
    stack.env.update(settings)
    stack.api()
    for _ in range(workers):
        stack.worker()
    for _ in range(detectors):
        stack.detector()
    return Api(stack.api_url, stack.create_key("acme"))


def test_completion_is_delivered_signed_and_verifiable(
    any_stack: Stack, receiver: Receiver
) -> None:
    stack = any_stack
    api = start(stack)
    api.upload("b1", CSV)
    api.upload("b1", CSV)
    assert api.register("b1", receiver.url()).status_code == 201
    api.process("b1")
    got = wait_until(receiver.received, 20, message="no delivery arrived")
    assert len(got) == 1
    signing = api.signing()
    payload = verify_both(got[0], signing)
    assert payload["type"] == "batch.completed"
    data = payload["data"]
    assert data["batch_name"] == "b1" and data["all_done"] is True
    assert data["completion_seq"] == 1 and data["counts"]["succeeded"] == 2
    assert data["results_url"].endswith("/api/v1/batches/b1/results")
    assert got[0].headers["webhook-id"].startswith("msg_")
    assert got[0].headers["user-agent"].startswith("relay/")
    assert got[0].headers["content-type"] == "application/json"
    # The delivery is recorded with its attempt.
    deliveries = wait_until(
        lambda: [d for d in api.deliveries("b1") if d["status"] == "succeeded"], 5
    )
    assert deliveries[0]["id"] == got[0].headers["webhook-id"]
    assert deliveries[0]["attempts"][0]["status_code"] == 200
    # Ops see it in the metrics: outcome, latency, lag, documents.
    expected = [
        "relay_deliveries_succeeded_total 1",
        'relay_delivery_attempts_total{outcome="succeeded"} 1',
        "relay_notification_lag_seconds_count 1",
        'relay_documents_processed_total{status="succeeded"} 2',
        "relay_delivery_attempt_seconds_count 1",
    ]

    def metrics_show_it() -> bool:
        text = api.http.get(stack.api_url + "/metrics").text.splitlines()
        return all(line in text for line in expected)

    wait_until(metrics_show_it, 5, message="metrics did not count the delivery")
    api.close()


def test_renotification_after_more_uploads(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    api = start(stack)
    api.upload("b2", CSV)
    api.register("b2", receiver.url())
    api.process("b2")
    first = wait_until(receiver.received, 20, message="first delivery")
    api.upload("b2", CSV)
    assert api.batch("b2")["all_done"] is False
    api.process("b2")
    wait_until(lambda: len(receiver.received()) >= 2, 20, message="second delivery")
    both = receiver.received()
    signing = api.signing()
    p1, p2 = (verify_both(r, signing) for r in both[:2])
    assert p1["data"]["completion_seq"] == 1 and p2["data"]["completion_seq"] == 2
    assert p2["data"]["document_count"] == 2
    assert first[0].headers["webhook-id"] != both[1].headers["webhook-id"]
    assert len(delivered_once(api, redis, "b2")) == 2
    assert len(receiver.received()) == 2
    api.close()


def test_registering_on_a_done_batch_delivers_its_completion(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    api = start(stack)
    api.upload("b3", CSV)
    api.process("b3")
    wait_until(lambda: api.batch("b3")["all_done"], 20, message="batch not done")
    assert api.register("b3", receiver.url()).status_code == 201
    got = wait_until(receiver.received, 20, message="late registration not delivered")
    assert verify_both(got[0], api.signing())["data"]["completion_seq"] == 1
    # Registering again (same URL) does not deliver the same completion twice.
    assert api.register("b3", receiver.url()).status_code == 200
    assert len(delivered_once(api, redis, "b3")) == 1
    assert len(receiver.received()) == 1
    api.close()


def test_rotation_signs_with_both_materials(stack: Stack, receiver: Receiver) -> None:
    api = start(stack)
    old = api.signing()
    rotated = api.http.post("/webhook-signing/rotate").json()
    assert rotated["secret"] != old["secret"]
    assert rotated["previous"]["secret"] == old["secret"]
    api.upload("b4", CSV)
    api.register("b4", receiver.url())
    api.process("b4")
    got = wait_until(receiver.received, 20, message="no delivery")
    verify_both(got[0], rotated)
    assert verify_v1(got[0], old["secret"])["data"]["batch_name"] == "b4"
    assert verify_v1a(got[0], old["public_key"])
    assert len(got[0].headers["webhook-signature"].split()) == 4
    api.close()


def test_one_delivery_per_completion_with_three_detectors(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    api = start(stack, workers=2, detectors=3)
    names = [f"m{i}" for i in range(20)]
    for name in names:
        api.upload(name, CSV)
        api.register(name, receiver.url(f"/{name}"))
    for name in names:
        api.process(name)
    wait_until(lambda: len(receiver.received()) >= len(names), 30, message="missing deliveries")
    for name in names:
        assert len(delivered_once(api, redis, name)) == 1
    ids = [r.headers["webhook-id"] for r in receiver.received()]
    assert len(ids) == len(names) == len(set(ids))
    api.close()


@pytest.mark.parametrize(
    ("replies", "final", "codes"),
    [
        ([Reply(500), Reply(500), Reply(200)], "succeeded", [500, 500, 200]),
        ([Reply(410)], "failed", [410]),
        ([Reply(302, {"location": "https://example.com/"})], "failed", [302, 302, 302, 302]),
        ([Reply(404)], "failed", [404, 404, 404, 404]),
    ],
    ids=["500-500-200", "410", "redirect", "404-exhausted"],
)
def test_receiver_answers(
    stack: Stack, receiver: Receiver, replies: list[Reply], final: str, codes: list[int]
) -> None:
    api = start(stack)
    receiver.script("/r", replies)
    api.upload("r1", CSV)
    api.register("r1", receiver.url("/r"))
    api.process("r1")
    done = wait_until(
        lambda: [d for d in api.deliveries("r1") if d["status"] == final],
        30,
        message=f"delivery never {final}",
    )
    attempts = done[0]["attempts"]
    assert [a["status_code"] for a in attempts] == codes
    assert all(a["error"] == "http_status" for a in attempts if a["status_code"] != 200)
    assert len(receiver.received("/r")) == len(codes)
    if codes == [410]:
        hook = api.http.get("/batches/r1/webhook").json()
        assert hook["disabled"] is True and "410" in hook["disabled_reason"]
    api.close()


def test_retry_after_is_honoured(stack: Stack, receiver: Receiver) -> None:
    api = start(stack)
    receiver.script("/ra", [Reply(429, {"retry-after": "1"}), Reply(200)])
    api.upload("ra", CSV)
    api.register("ra", receiver.url("/ra"))
    api.process("ra")
    wait_until(lambda: len(receiver.received("/ra")) >= 2, 20, message="no second attempt")
    first, second = receiver.received("/ra")[:2]
    # The schedule says 0.2 s; Retry-After says 1 s (capped at 10 x 0.2 s = 2 s).
    assert second.at - first.at >= 0.95
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    api.close()


def test_a_unicode_digit_retry_after_is_ignored_and_every_attempt_recorded(
    stack: Stack, receiver: Receiver
) -> None:
    # "²".isdigit() is true but float("²") raises: the attempt used to be lost and retried
    # every ~20 s forever, past the attempt cap. Its body also tries to clear the screen.
    api = start(stack)
    excerpt = b"\x1b[2J\x1b[Hbusy"
    receiver.script("/sq", [Reply(503, {"retry-after": "\u00b2"}, body=excerpt)])
    api.upload("sq", CSV)
    api.register("sq", receiver.url("/sq"))
    api.process("sq")
    # RELAY_RETRY_SCHEDULE=0.2,0.2,0.2: four attempts, then failed.
    (delivery,) = wait_until(
        lambda: [d for d in api.deliveries("sq") if d["status"] == "failed"],
        20,
        message="the delivery never failed",
    )
    got = receiver.received("/sq")
    assert len(got) == 4
    assert [a["number"] for a in delivery["attempts"]] == [1, 2, 3, 4]
    assert all(a["status_code"] == 503 for a in delivery["attempts"])
    # The schedule (0.2 s), not a Retry-After of 2 s (which the cap of 10 x 0.2 s would allow).
    gaps = [b.at - a.at for a, b in itertools.pairwise(got)]
    assert all(0.15 <= gap < 1.5 for gap in gaps), gaps
    assert len({r.headers["webhook-id"] for r in got}) == 1
    time.sleep(1.0)
    assert len(receiver.received("/sq")) == 4  # the cap holds
    # The operator's view shows the receiver's escape sequences, never sends them raw.
    shown = stack.cli("deliveries", "show", delivery["id"])
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout
    assert "\\x1b[2J\\x1b[Hbusy" in shown.stdout
    api.close()


def test_timeout_and_refused_connection_are_retried(stack: Stack, receiver: Receiver) -> None:
    api = start(stack)
    receiver.script("/slow", [Reply(200, delay=3.0), Reply(200)])
    api.upload("t1", CSV)
    api.register("t1", receiver.url("/slow"))
    closed = f"http://127.0.0.1:{free_port()}/nobody"
    api.upload("t2", CSV)
    api.register("t2", closed)
    api.process("t1")
    api.process("t2")
    slow = wait_until(lambda: [d for d in api.deliveries("t1") if d["status"] == "succeeded"], 30)
    assert slow[0]["attempts"][0]["error"] == "timeout"
    assert slow[0]["attempts"][1]["status_code"] == 200
    refused = wait_until(lambda: [d for d in api.deliveries("t2") if d["status"] == "failed"], 30)
    assert [a["error"] for a in refused[0]["attempts"]] == ["connection"] * 4
    api.close()


def test_attempt_time_ssrf_check_blocks_a_private_address(stack: Stack, receiver: Receiver) -> None:
    # The API may register a loopback URL (as if DNS said "public" then), but the worker
    # vets the address again at the attempt and refuses it: no request reaches the receiver.
    stack.api()
    stack.worker(RELAY_ALLOW_PRIVATE_TARGETS="false")
    stack.detector()
    api = Api(stack.api_url, stack.create_key("acme"))
    api.upload("s1", CSV)
    assert api.register("s1", f"http://localhost:{receiver.port}/hook").status_code == 201
    api.process("s1")
    failed = wait_until(lambda: [d for d in api.deliveries("s1") if d["status"] == "failed"], 30)
    assert {a["error"] for a in failed[0]["attempts"]} == {"blocked_destination"}
    assert receiver.received() == []
    api.close()


def test_worker_killed_mid_attempt_delivery_is_made_again(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    stack.api()
    victim = stack.worker()
    stack.detector()
    api = Api(stack.api_url, stack.create_key("acme"))
    receiver.script("/k", [Reply(200, delay=1.5), Reply(200)])
    api.upload("k1", CSV)
    api.register("k1", receiver.url("/k"))
    api.process("k1")
    wait_until(lambda: receiver.received("/k"), 20, message="first attempt never started")
    victim.kill()
    stack.worker()
    wait_until(lambda: len(receiver.received("/k")) >= 2, 30, message="no second attempt")
    got = receiver.received("/k")
    assert got[0].headers["webhook-id"] == got[1].headers["webhook-id"]
    done = wait_until(lambda: [d for d in api.deliveries("k1") if d["status"] == "succeeded"], 10)
    assert done
    api.close()
