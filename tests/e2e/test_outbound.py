"""End to end, real processes: what the API sends out is bounded and honours the webhook's state.

- Test sends to receivers that accept and never answer hold only the test sends' own lane:
  another account's POST /process and PUT webhook stay fast, an account past its share gets
  429 concurrency_limited and a full lane 503 outbound_busy at once, and every test send
  answers by its deadline.
- A test send goes only to a webhook that could receive a notification: 409 and nothing
  sent for a pending or failed verification and for a disabled webhook.
- Registrations with verify: one that repeats the verification in progress starts nothing
  and grows nothing; new ones are counted per account and per callback host, and the
  receiver gets no more signed challenges than the limits allow.
- A signing rotation is refused while the previous one's grace period runs, and counted.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import redis

from relay.devtools.hostile_peers import Hostile
from relay.devtools.processes import Stack
from tests.e2e.client import Api
from tests.e2e.test_webhooks import CSV
from tests.support.helpers import wait_until
from tests.support.receiver import Receiver, Reply


def _timed(call: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = call()
    return response, time.perf_counter() - started


def _error(r: httpx.Response) -> str:
    kind: str = r.json()["error"]["type"]
    return kind


def test_silent_receivers_hold_only_the_test_sends_lane(stack: Stack) -> None:
    timeout = 8.0
    stack.env.update(
        RELAY_DELIVERY_TIMEOUT=str(timeout),
        RELAY_TEST_SEND_CONCURRENCY="6",
        RELAY_TEST_SEND_CONCURRENCY_PER_ACCOUNT="2",
    )
    stack.api()
    silent = Hostile("hang")  # accepts, reads the request, never answers
    try:
        senders = ["t1", "t2", "t3"]
        apis = {a: Api(stack.api_url, stack.create_key(a)) for a in [*senders, "late", "other"]}
        for account in [*senders, "late"]:
            apis[account].upload("b", CSV)
            assert apis[account].register("b", silent.url()).status_code == 201
        other = apis["other"]
        other.upload("o1", CSV)

        def test_send(account: str) -> tuple[httpx.Response, float]:
            return _timed(lambda: apis[account].http.post("/batches/b/webhook/test", timeout=30))

        with ThreadPoolExecutor(6) as pool:
            held = [pool.submit(test_send, a) for a in senders for _ in range(2)]
            wait_until(lambda: silent.accepted >= 6, 5, message="the six test sends never left")

            # An account past its share: refused at once, nothing sent.
            r, took = test_send("t1")
            assert r.status_code == 429 and _error(r) == "concurrency_limited", r.text
            assert 1 <= int(r.headers["retry-after"]) <= timeout + 1 and took < 0.5
            # Another account while the lane is full: refused at once, nothing sent.
            r, took = test_send("late")
            assert r.status_code == 503 and _error(r) == "outbound_busy", r.text
            assert 1 <= int(r.headers["retry-after"]) <= timeout + 1 and took < 0.5
            assert silent.accepted == 6

            # Another account's requests that need a thread or a wake-up are not held.
            took_process, took_put = [], []
            for i in range(5):
                other.upload("o1", CSV)  # something to hand out: every process call wakes
                r, took = _timed(lambda: other.http.post("/batches/o1/process"))
                assert r.status_code == 202, r.text
                took_process.append(took)
                hook = {"url": f"http://localhost:{silent.port}/hook{i}"}  # a name: DNS
                r, took = _timed(
                    functools.partial(other.http.put, "/batches/o1/webhook", json=hook)
                )
                assert r.status_code in (200, 201), r.text
                took_put.append(took)
            print(
                f"\nwhile 6 test sends hang: POST /process max {max(took_process):.3f} s, "
                f"PUT webhook max {max(took_put):.3f} s"
            )
            assert max(took_process) < 0.5 and max(took_put) < 0.5

            answers = [f.result() for f in held]
        for r, took in answers:
            assert r.status_code == 200, r.text
            assert r.json()["error"] == "timeout" and r.json()["status_code"] is None
            assert took < timeout + 2.5, took  # the deadline plus the margin (and a busy box)
        times = [took for _, took in answers]
        print(f"the 6 test sends answered in {min(times):.2f}-{max(times):.2f} s")
        # Their slots are free again: the next test send goes out.
        wait_until(lambda: test_send("late")[0].status_code == 200, timeout + 5, 0.5)
    finally:
        silent.close()


def test_a_test_send_goes_only_to_a_webhook_that_could_receive_a_notification(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    stack.env.update(RELAY_VERIFY_SCHEDULE="0.2,0.2")
    stack.api()
    stack.worker()
    stack.detector()
    api = Api(stack.api_url, stack.create_key("acme"))
    silent = Hostile("hang")  # a challenge to it is pending for each attempt's 2 s
    try:
        receiver.script("/fail", [Reply(200, body=b"not the challenge")])
        receiver.script("/gone", [Reply(410)])
        for batch in ("pending", "failed", "gone"):
            api.upload(batch, CSV)
        # A disabled webhook: its notification got a 410.
        assert api.register("gone", receiver.url("/gone")).status_code == 201
        api.process("gone")
        wait_until(lambda: api.webhook("gone")["disabled"], 30, message="never disabled")
        # A failed verification: no echo, three attempts.
        r = api.http.put(
            "/batches/failed/webhook", json={"url": receiver.url("/fail"), "verify": True}
        )
        assert r.status_code == 201, r.text
        failed = wait_until(
            lambda: (h := api.webhook("failed"))["disabled"] and h, 30, message="never failed"
        )
        assert failed["verification"]["status"] == "failed"
        # A pending verification: its challenge waits on a receiver that never answers.
        r = api.http.put("/batches/pending/webhook", json={"url": silent.url(), "verify": True})
        assert r.status_code == 201 and r.json()["verification"]["status"] == "pending"
        r = api.http.put("/operational-webhook", json={"url": silent.url(), "verify": True})
        assert r.status_code == 201 and r.json()["verification"]["status"] == "pending"
        wait_until(lambda: silent.accepted >= 2, 10, message="no challenge sent")

        expected = {
            "/batches/pending/webhook/test": ("webhook_not_verified", "pending"),
            "/operational-webhook/test": ("webhook_not_verified", "pending"),
            "/batches/failed/webhook/test": ("webhook_not_verified", "failed"),
            "/batches/gone/webhook/test": ("webhook_disabled", "410"),
        }
        for path, (kind, word) in expected.items():
            r = api.http.post(path)
            assert r.status_code == 409 and _error(r) == kind, (path, r.text)
            assert word in r.json()["error"]["message"], (path, r.text)
            assert "ratelimit-remaining" in r.headers  # counted like any test send
        time.sleep(0.5)  # a send would have left by now
        assert "webhook.test" not in receiver.types()
        ops = api.http.get("/operational-webhook/deliveries").json()["deliveries"]
        challenges = {d["id"] for d in api.deliveries("pending") + ops}
        assert set(silent.webhook_ids) <= challenges  # only challenges reached the silent one
    finally:
        silent.close()


def _put_all(
    base: str, key: str, calls: list[tuple[str, dict[str, Any]]], parallel: int = 10
) -> list[httpx.Response]:
    """PUT each (path, body) with ``parallel`` clients at once; the answers in order."""
    clients = [
        httpx.Client(base_url=base + "/api/v1", headers={"authorization": f"Bearer {key}"})
        for _ in range(parallel)
    ]
    try:
        with ThreadPoolExecutor(parallel) as pool:
            return list(
                pool.map(
                    lambda i: clients[i % parallel].put(calls[i][0], json=calls[i][1], timeout=30),
                    range(len(calls)),
                )
            )
    finally:
        for client in clients:
            client.close()


def _memory(client: redis.Redis) -> int:
    """Redis's memory without its clients' buffers (connections come and go with load)."""
    info = client.info("memory")
    return int(info["used_memory"]) - int(info["mem_clients_normal"])


def _delivery_keys(client: redis.Redis) -> int:
    """The deliveries in Redis (each a hash; ``:attempts`` lists not counted)."""
    found = client.scan_iter(match="*delivery:msg_*", count=1000)
    return sum(1 for key in found if not key.endswith(b":attempts"))


def test_repeating_a_pending_verification_starts_nothing_and_grows_nothing(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    stack.env.update(RELAY_VERIFY_SCHEDULE="60")  # pending for the whole test
    stack.api()
    stack.worker()
    key = stack.create_key("acme")
    api = Api(stack.api_url, key)
    receiver.script("/v", [Reply(200, body=b"hello")])  # answers, never echoes
    api.upload("b1", CSV)
    body = {"url": receiver.url("/v"), "verify": True}
    ops = api.http.put("/operational-webhook", json=body)  # one of the host's five a minute
    assert ops.status_code == 201
    wait_until(lambda: receiver.received("/v"), 20, message="no ops challenge")

    # 300 at once from nothing: the first ones race to start it; the rates bound them.
    calls = [("/batches/b1/webhook", body)] * 300
    answers = _put_all(stack.api_url, key, calls)
    codes = [r.status_code for r in answers]
    assert set(codes) <= {200, 201, 429} and codes.count(201) == 1, codes
    assert {r.json()["verification"]["status"] for r in answers if r.status_code != 429} == {
        "pending"
    }
    wait_until(lambda: len(receiver.received("/v")) >= 2, 20, message="no challenge")
    time.sleep(1.0)
    raced = _delivery_keys(redis) - 1
    print(
        f"\n300 verify PUTs of one URL from nothing: {codes.count(429)} refused 429, "
        f"{len(receiver.received('/v')) - 1} signed POSTs received, {raced} challenges made"
    )
    assert 1 <= raced <= 4  # RELAY_HOST_VERIFY_RATE_LIMIT: 5 a minute, the ops' one first
    assert 1 <= len(receiver.received("/v")) - 1 <= raced

    # Once it is pending, repeats start nothing at all (and count against no limit).
    deliveries, memory, posts = _delivery_keys(redis), _memory(redis), len(receiver.received())
    calls = [("/batches/b1/webhook", body)] * 299 + [("/operational-webhook", body)] * 50
    started = time.perf_counter()
    answers = _put_all(stack.api_url, key, calls)
    took = time.perf_counter() - started
    assert [r.status_code for r in answers] == [200] * len(calls), {r.text for r in answers}
    assert {r.json()["verification"]["status"] for r in answers} == {"pending"}
    assert len({r.json()["updated_at"] for r in answers[:299]}) == 1
    time.sleep(1.0)  # what the worker would send for a new challenge is sent by now
    grown = _memory(redis) - memory
    print(
        f"{len(calls)} repeated verify PUTs in {took:.2f} s: "
        f"{len(receiver.received()) - posts} more signed POSTs, delivery hashes "
        f"{deliveries} -> {_delivery_keys(redis)}, memory (clients aside) {grown:+d} B"
    )
    assert len(receiver.received()) == posts
    assert set(receiver.types()) == {"webhook.verify"}
    assert _delivery_keys(redis) == deliveries
    assert grown < 64 * 1024  # each new challenge used to leave ~2.5-7 KiB


def test_verifications_are_counted_per_account_and_per_callback_host(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    stack.env.update(RELAY_VERIFY_SCHEDULE="60")
    stack.api()
    stack.worker()
    keys = {a: stack.create_key(a) for a in ("acme", "globex")}
    for key in keys.values():
        api = Api(stack.api_url, key)
        for b in range(10):
            api.upload(f"b{b}", CSV)
    # 300 registrations, each with a new URL on the one host: each would start a challenge.
    answers: list[httpx.Response] = []
    on = True
    started = time.perf_counter()
    for account, key in keys.items():
        calls = [
            (f"/batches/b{i % 10}/webhook", {"url": receiver.url(f"/{account}/{i}"), "verify": on})
            for i in range(150)
        ]
        answers += _put_all(stack.api_url, key, calls)
    took = time.perf_counter() - started
    admitted = [r for r in answers if r.status_code in (200, 201)]
    refused = [r for r in answers if r.status_code == 429]
    assert len(admitted) + len(refused) == len(answers), {r.status_code for r in answers}
    assert len(admitted) == 5  # RELAY_HOST_VERIFY_RATE_LIMIT: 5/minute, every account's
    for r in refused:
        assert _error(r) == "rate_limited" and int(r.headers["retry-after"]) >= 1
    messages = {r.json()["error"]["message"].split(";")[0] for r in refused}
    assert any("callback host '127.0.0.1'" in m for m in messages), messages
    assert any("for this account" in m for m in messages), messages  # 10/minute each
    wait_until(lambda: len(receiver.received()) >= 5, 20, message="challenges not sent")
    time.sleep(1.0)
    print(
        f"\n300 verify PUTs (new URLs) in {took:.2f} s: {len(admitted)} admitted, "
        f"{len(refused)} refused 429, {len(receiver.received())} signed POSTs received, "
        f"{_delivery_keys(redis)} deliveries"
    )
    # Five challenges made; one may have been replaced by the next to the same batch before
    # it went out (superseded, never sent).
    assert _delivery_keys(redis) == 5
    assert 1 <= len(receiver.received()) <= 5
    assert set(receiver.types()) == {"webhook.verify"}


def test_a_rotation_is_refused_while_the_previous_ones_grace_runs_and_counted(
    stack: Stack,
) -> None:
    stack.env.update(RELAY_SIGNING_GRACE_SECONDS="1", RELAY_ACCOUNT_ROTATION_RATE_LIMIT="3/hour")
    stack.api()
    api = Api(stack.api_url, stack.create_key("acme"))
    original = api.signing()
    first = api.http.post("/webhook-signing/rotate")
    assert first.status_code == 200 and first.json()["previous"]["secret"] == original["secret"]
    second = api.http.post("/webhook-signing/rotate")
    assert second.status_code == 409 and _error(second) == "rotation_in_progress", second.text
    assert 1 <= int(second.headers["retry-after"]) <= 1
    assert "grace period" in second.json()["error"]["message"]
    # Nothing changed: the material a receiver may still hold alone still signs.
    now = api.signing()
    assert now["secret"] == first.json()["secret"]
    assert now["previous"]["secret"] == original["secret"]
    time.sleep(1.2)  # the grace period is over
    third = api.http.post("/webhook-signing/rotate")
    assert third.status_code == 200 and third.json()["previous"]["secret"] == now["secret"]
    # Every rotation asked counts (the 409 too): the fourth is past 3/hour.
    fourth = api.http.post("/webhook-signing/rotate")
    assert fourth.status_code == 429 and _error(fourth) == "rate_limited", fourth.text
    assert "signing rotations" in fourth.json()["error"]["message"]
    assert int(fourth.headers["retry-after"]) > 3000
