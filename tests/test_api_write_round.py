"""A write's first round trip (``relay.api.access.admit_write``): the key record, the
account's window and an upload's hold on the pending total in one pipeline, over HTTP on the
real app and Redis. What it must keep: a revoked key writes nothing and holds nothing, the
window counts every admitted write and no refused one, the total ends at the exact bytes
held in Redis whatever the request's fate, and the quota stays exact at its edge."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any, cast

import pytest
import redis

from relay.api.state import STATE_KEY, AppState
from relay.config import RateLimit
from relay.redis import keyspace
from relay.state.api_keys import revoke_key
from tests.support.api_fixtures import V1, Api, ApiFactory, api_factory_fixture  # noqa: F401
from tests.support.helpers import wait_until

CSV = b"sku,qty\nA-1,2\nB-2,5\n"


def held(api: Api, account: str = "acme") -> int:
    """The account's pending total as it is now."""
    return int(api.redis.get(keyspace.account_pending_total(account)) or 0)


def total(api: Api, account: str = "acme") -> int:
    """The total once the process has given back what its uploads held beyond their files
    (within about a second: relay.state.store.PendingRefunds)."""
    refunds = cast(AppState, getattr(api.app.state, STATE_KEY)).store.refunds
    wait_until(lambda: refunds.outstanding == 0, 5)
    return held(api, account)


def window(api: Api, kind: str = "uploads", account: str = "acme") -> int:
    return int(api.redis.zcard(keyspace.account_rate_window(kind, account)))


def documents(api: Api, batch: str, account: str = "acme") -> int:
    ref_key = next(iter(api.redis.scan_iter(f"relay:*:batch:{account}:{batch}")))
    return int(api.redis.hget(ref_key, "total") or 0)


def monitored(api: Api, action: Callable[[], object]) -> list[dict[str, Any]]:
    """What Redis ran while ``action`` ran, as MONITOR shows it (each connection's commands
    in the order Redis ran them; a script's own commands have ``client_address`` "lua")."""
    seen: list[dict[str, Any]] = []
    ready = threading.Event()

    def watch() -> None:
        with redis.Redis.from_url(api.settings.redis_url).monitor() as m:
            ready.set()
            for command in m.listen():
                seen.append(command)
                if command["command"] == "ECHO done":
                    return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    ready.wait(5)
    wait_until(lambda: api.redis.echo("warm") is not None, 5)
    seen.clear()
    action()
    api.redis.echo("done")
    thread.join(10)
    return [c for c in seen if not c["command"].startswith("ECHO")]


def test_a_revoked_key_writes_nothing_and_is_counted_once(api_factory: ApiFactory) -> None:
    api = api_factory(account_upload_rate_limit=RateLimit(limit=10, window_ms=60_000))
    for _ in range(2):  # the second upload finds the key in the process's cache
        api.upload_ok("acme", "b1", content=CSV)
    assert (total(api), window(api), documents(api, "b1")) == (2 * len(CSV), 2, 2)
    assert revoke_key(api.redis, api.key("acme")) is True
    refused = api.upload("acme", "b1", content=CSV)
    assert refused.status_code == 401, refused.text
    assert "ratelimit-limit" not in refused.headers
    # Nothing written, the hold given back; the round trip counted this request once...
    assert (total(api), window(api), documents(api, "b1")) == (2 * len(CSV), 3, 2)
    # ...and the next ones are looked up first (the cache dropped the key): not counted.
    for _ in range(3):
        assert api.upload("acme", "b1", content=CSV).status_code == 401
        assert api.client.post(f"{V1}/batches/b1/process", headers=api.auth("acme")).status_code
    assert (total(api), window(api), window(api, "process")) == (2 * len(CSV), 3, 0)


@pytest.mark.parametrize(
    ("case", "status"),
    [("bad_name", 422), ("no_file", 422), ("too_large", 413), ("rate", 429)],
)
def test_a_refused_upload_leaves_the_total_as_it_was(
    api_factory: ApiFactory, case: str, status: int
) -> None:
    api = api_factory(
        account_upload_rate_limit=RateLimit(limit=2, window_ms=60_000),
        max_upload_bytes=1000,
    )
    api.upload_ok("acme", "b1", content=CSV)
    before = total(api)
    assert before == len(CSV)
    auth = api.auth("acme")
    if case == "bad_name":
        response = api.upload("acme", "-bad", content=CSV)
    elif case == "no_file":
        response = api.client.post(
            f"{V1}/documents", headers=auth, data={"batch_name": "b1"}, files={"x": ("a", b"1")}
        )
    elif case == "too_large":
        response = api.upload("acme", "b1", content=b"x" * 1001)
    else:
        api.upload_ok("acme", "b1", content=CSV)
        before = total(api)
        response = api.upload("acme", "b1", content=CSV)
    assert response.status_code == status, response.text
    assert total(api) == before


def test_the_total_is_the_files_bytes_not_the_bodies(api_factory: ApiFactory) -> None:
    api = api_factory()
    sizes = [len(CSV), 1, 0, 5000]
    for i, size in enumerate(sizes):
        api.upload_ok("acme", f"b{i % 2}", content=CSV[:size] if size <= len(CSV) else b"y" * size)
    assert total(api) == sum(sizes)
    per_shard = [
        int(api.redis.get(keyspace.account_pending_bytes(s, "acme")) or 0) for s in range(16)
    ]
    assert sum(per_shard) == total(api)


def test_the_quota_is_exact_although_the_body_declares_more(api_factory: ApiFactory) -> None:
    # The hold is the body's declared size, some hundred bytes more than the file: a file that
    # fills the quota exactly must still pass (the exact recount decides at the edge).
    api = api_factory(account_max_pending_bytes=10_000)
    api.upload_ok("acme", "b1", content=b"a" * 6_000)
    filled = api.upload("acme", "b1", content=b"b" * 4_000)
    assert filled.status_code == 201, filled.text
    assert total(api) == 10_000
    over = api.upload("acme", "b1", content=b"c")
    assert over.status_code == 429 and over.json()["error"]["type"] == "quota_exceeded"
    assert over.headers["ratelimit-remaining"] == "0"
    assert total(api) == 10_000
    assert documents(api, "b1") == 2


def test_an_upload_is_two_round_trips(api_factory: ApiFactory) -> None:
    """With the key cached: one pipeline of key record, window and hold; then the upload
    script. What the hold took beyond the file's bytes goes back later, in the next hold's
    INCRBY or in the process's DECRBY each second (left out)."""
    api = api_factory()
    api.upload_ok("acme", "b1", content=CSV)  # caches the key
    seen = monitored(api, lambda: api.upload_ok("acme", "b1", content=CSV))
    sent = [
        (c["client_port"], c["command"].split(" ", 2)[:2])
        for c in seen
        if c.get("client_address") != "lua" and not c["command"].startswith("DECRBY")
    ]
    names = [name for _, (name, *_) in sent]
    # The first round trip also reads the client address's count of bad keys (ZCARD: is it
    # blocked?).
    assert names == ["HMGET", "ZCARD", "EVALSHA", "INCRBY", "EVALSHA"], sent
    # The first round trip is one connection's consecutive commands.
    assert sent[0][0] == sent[1][0] == sent[2][0] == sent[3][0]


def test_what_an_upload_held_beyond_its_file_goes_back_with_the_next_hold(
    api_factory: ApiFactory,
) -> None:
    """The total is never below the files' bytes, is back at them within about a second of
    the last upload, and the next upload's hold carries what the last one owes: its INCRBY
    is its body's size less that (or, when the second passed in between, the DECRBY came)."""
    api = api_factory()
    api.upload_ok("acme", "b1", content=CSV)  # caches the key
    assert total(api) == len(CSV)

    def three() -> None:
        for n in range(2, 5):
            api.upload_ok("acme", "b1", content=CSV)
            assert held(api) >= n * len(CSV)  # never below the files' bytes
        assert total(api) == 4 * len(CSV)

    seen = monitored(api, three)
    moves = [
        c["command"].split(" ")
        for c in seen
        if c.get("client_address") != "lua" and c["command"].startswith(("INCRBY", "DECRBY"))
    ]
    holds = [int(n) for name, _, n in moves if name == "INCRBY"]
    gives = [int(n) for name, _, n in moves if name == "DECRBY"]
    body = holds[0]  # nothing owed then: the whole body held
    assert len(holds) == 3 and body > len(CSV), moves
    assert sum(holds) - sum(gives) == 3 * len(CSV), moves
    # An INCRBY with no DECRBY since the last one holds its body less the last's excess
    # (body - len(CSV)): the file's size.
    for before, after in itertools.pairwise(moves):
        if before[0] == after[0] == "INCRBY":
            assert int(after[2]) == len(CSV), moves


def test_after_redis_forgot_its_scripts_a_write_is_counted_and_held_once(
    api_factory: ApiFactory,
) -> None:
    # A new or restarted Redis answers the window's EVALSHA with NOSCRIPT after the hold ran:
    # the window is loaded and counted on its own, the hold is not sent again.
    api = api_factory()
    api.upload_ok("acme", "b1", content=CSV)  # caches the key
    api.redis.script_flush()
    api.upload_ok("acme", "b1", content=CSV)
    assert (total(api), window(api), documents(api, "b1")) == (2 * len(CSV), 2, 2)
    api.redis.script_flush()
    auth = api.auth("acme")
    assert api.client.post(f"{V1}/batches/b1/process", headers=auth).status_code == 202
    assert window(api, "process") == 1


def test_a_busy_account_writes_from_leased_slots_and_a_revoked_key_stops_at_once(
    api_factory: ApiFactory,
) -> None:
    # Leases of 2: an account is busy at 2 writes within a second, on any machine.
    api = api_factory(
        account_upload_rate_limit=RateLimit(limit=1000, window_ms=60_000), write_lease_slots=2
    )
    for _ in range(12):
        api.upload_ok("acme", "b1", content=CSV)
    # The first upload asked one slot; once two came within a second, each ask took a lease
    # of 2 and the next upload came from it without the window's script. Every slot in the
    # window admitted one of the 12 uploads, but for at most one the process still holds.
    window_key = keyspace.account_rate_window("uploads", "acme")
    members = [m.decode() for m in api.redis.zrange(window_key, 0, -1)]
    assert 12 <= len(members) <= 13
    leased = sum(m.count(":") == 2 for m in members)  # <token>:<n>:<slot>
    assert leased >= 8, members  # on this machine: 12 (all but the first)
    assert documents(api, "b1") == 12
    assert total(api) == 12 * len(CSV)
    # A leased slot never skips the key: revoked, the next upload is refused and writes nothing.
    assert revoke_key(api.redis, api.key("acme")) is True
    refused = api.upload("acme", "b1", content=CSV)
    assert refused.status_code == 401, refused.text
    assert (documents(api, "b1"), total(api)) == (12, 12 * len(CSV))


def test_a_webhook_registration_is_two_round_trips_and_answers_what_it_wrote(
    api_factory: ApiFactory,
) -> None:
    """The key's round trip, then the registration script, which checks that the batch
    exists and answers the webhook as it left it (no existence check or read back of its
    own)."""
    api = api_factory(allow_http_targets=True, allow_private_targets=True)
    for name in ("b0", "b1"):
        api.upload_ok("acme", name, content=CSV)  # the batches, and the key cached
    hook = {"url": "http://127.0.0.1:9/a"}
    # The script loaded (a Redis that has not run it answers NOSCRIPT once).
    assert api.client.put(
        f"{V1}/batches/b0/webhook", headers=api.auth("acme"), json=hook
    ).is_success
    url = f"{V1}/batches/b1/webhook"
    replies: list[Any] = []

    def register() -> None:
        r = api.client.put(url, headers=api.auth("acme"), json=hook)
        replies.append(r)

    seen = monitored(api, register)
    sent = [c["command"].split(" ", 1)[0] for c in seen if c.get("client_address") != "lua"]
    assert sent == ["HMGET", "ZCARD", "EVALSHA"], sent  # the key's round trip: HMGET, ZCARD
    (r,) = replies
    assert r.status_code == 201
    assert r.json() == api.client.get(url, headers=api.auth("acme")).json()
    assert r.json()["url"] == "http://127.0.0.1:9/a" and r.json()["disabled"] is False
    assert r.json()["verification"] == {"status": "none", "verified_at": None}
