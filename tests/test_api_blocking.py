"""The bad-key block (``relay.state.address_blocks``), over HTTP on the real app and Redis: past
``RELAY_AUTH_FAILURE_RATE_LIMIT`` bad keys from one address, every key it presents is refused
with 429 and ``Retry-After``, a valid one included, on the API, on the status endpoints' fast
path and on the console's login, until the window passes or an operator runs
``relay keys unblock`` (the real CLI, a subprocess)."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from relay.config import RateLimit
from relay.redis import keyspace
from relay.state.address_blocks import address_subject, parse_subject
from relay.state.api_keys import create_operator_key
from tests.support.api_fixtures import V1, Api, ApiFactory, api_factory_fixture  # noqa: F401
from tests.support.helpers import relay_cli

UNKNOWN_KEY = "rk_zzzzzzzz_" + "A" * 43
BAD = {"Authorization": f"Bearer {UNKNOWN_KEY}"}
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
TOO_MANY = "too many requests with a missing or invalid API key from this address"


def _bad_keys(api: Api, count: int, doc_id: str) -> None:
    """``count`` requests with a bad key, over the status fast path, authenticate() and a
    write, all answered 401 (within the limit)."""
    paths = [
        ("GET", f"{V1}/batches/b1"),
        ("GET", f"{V1}/documents/{doc_id}"),
        ("GET", f"{V1}/batches"),
        ("POST", f"{V1}/batches/b1/process"),
    ]
    for i in range(count):
        method, path = paths[i % len(paths)]
        r = api.client.request(method, path, headers=BAD)
        assert r.status_code == 401, (i, path, r.text)


def _login(client: httpx.Client, key: str) -> httpx.Response:
    form = client.get("/console/login")
    match = _CSRF.search(form.text)
    assert match is not None, form.text
    return client.post("/console/login", data={"key": key, "csrf": match.group(1)})


def _answers(api: Api, doc_id: str, operator_key: str) -> dict[str, httpx.Response]:
    """The valid key's answer on each kind of path, and the operator key's console login."""
    auth = api.auth("acme")
    out = {
        "status batch (fast path)": api.client.get(f"{V1}/batches/b1", headers=auth),
        "status document (fast path)": api.client.get(f"{V1}/documents/{doc_id}", headers=auth),
        "list batches (authenticate)": api.client.get(f"{V1}/batches", headers=auth),
        "signing (authenticate)": api.client.get(f"{V1}/webhook-signing", headers=auth),
        "upload (write round)": api.upload("acme", "b1"),
    }
    with httpx.Client(base_url=api.base_url, timeout=30) as console:
        out["console login"] = _login(console, operator_key)
    return out


def _assert_blocked(answers: dict[str, httpx.Response], limit: int) -> int:
    """Every answer is the bad-key 429; returns the largest Retry-After."""
    retry = 0
    for where, r in answers.items():
        assert r.status_code == 429, (where, r.status_code, r.text[:300])
        assert int(r.headers["ratelimit-limit"]) == limit, where
        assert r.headers["ratelimit-remaining"] == "0", where
        assert int(r.headers["retry-after"]) >= 1, where
        retry = max(retry, int(r.headers["retry-after"]))
        if where == "console login":
            assert "Too many attempts" in r.text
            assert "set-cookie" not in r.headers or "relay_console=" not in r.headers["set-cookie"]
        else:
            assert r.json()["error"]["type"] == "rate_limited", where
            assert TOO_MANY in r.json()["error"]["message"], where
    return retry


def _assert_open(answers: dict[str, httpx.Response]) -> None:
    for where, r in answers.items():
        expected = {"console login": 303, "upload (write round)": 201}.get(where, 200)
        assert r.status_code == expected, (where, r.status_code, r.text[:300])


def _setup(api: Api) -> tuple[str, str]:
    doc = api.upload_ok("acme", "b1")
    return str(doc["id"]), create_operator_key(api.redis, "ops")


def test_past_the_limit_a_valid_key_is_refused_until_the_cli_unblocks(
    api_factory: ApiFactory,
) -> None:
    api = api_factory()  # the default limit: 60 bad keys a minute
    limit = api.settings.auth_failure_rate_limit
    assert limit == RateLimit(limit=60, window_ms=60_000)
    doc_id, operator_key = _setup(api)
    _assert_open(_answers(api, doc_id, operator_key))
    prefix = api.key("acme").split("_")[1]
    status_window = keyspace.rate_window(prefix)
    uploads_window = keyspace.account_rate_window("uploads", "acme")
    admitted = (api.redis.zcard(status_window), api.redis.zcard(uploads_window))

    _bad_keys(api, 60, doc_id)
    retry_after = _assert_blocked(_answers(api, doc_id, operator_key), 60)
    assert 1 <= retry_after <= 60
    # The blocked answers counted nowhere: not as bad keys (the window holds the 60), and
    # the valid key's status request and upload gave their windows' slots back (removed
    # from the window by the next request that asks it).
    assert api.redis.zcard(keyspace.auth_failure_window("127.0.0.1")) == 60
    # A wrong key is answered exactly as the right one: nothing tells them apart.
    wrong = api.client.get(f"{V1}/batches/b1", headers=BAD)
    right = api.client.get(f"{V1}/batches/b1", headers=api.auth("acme"))
    assert (wrong.status_code, wrong.json()) == (right.status_code, right.json())
    assert wrong.headers["ratelimit-limit"] == right.headers["ratelimit-limit"]
    # Another address is not blocked.
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=api.base_url, transport=transport) as elsewhere:
        assert elsewhere.get(f"{V1}/batches/b1", headers=api.auth("acme")).status_code == 200

    done = relay_cli(api.settings.redis_url, "keys", "unblock", "127.0.0.1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "unblocked 127.0.0.1: 60 bad key(s) forgotten"
    again = relay_cli(api.settings.redis_url, "keys", "unblock", "127.0.0.1")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "127.0.0.1 had no bad keys counted: nothing to unblock"

    answers = _answers(api, doc_id, operator_key)
    _assert_open(answers)
    # Each window holds the requests it admitted: those before the block, plus this round's
    # (the status fast path twice, one upload); the refused ones' slots went back.
    assert api.redis.zcard(status_window) == admitted[0] + 2 + 1  # +1: the 127.0.0.2 one
    assert api.redis.zcard(uploads_window) == admitted[1] + 1


def test_the_block_ends_when_the_window_passes(api_factory: ApiFactory) -> None:
    window_ms = 6_000
    api = api_factory(auth_failure_rate_limit=RateLimit(limit=60, window_ms=window_ms))
    doc_id, operator_key = _setup(api)
    first = time.monotonic()
    _bad_keys(api, 60, doc_id)
    sent = time.monotonic() - first
    assert sent < window_ms / 1000 / 2, f"60 bad keys took {sent:.1f} s: too slow to test"
    retry_after = _assert_blocked(_answers(api, doc_id, operator_key), 60)
    assert 1 <= retry_after <= window_ms / 1000
    # Open again once the oldest bad key left the window, and not before.
    deadline = first + window_ms / 1000 + 5
    while True:
        r = api.client.get(f"{V1}/batches/b1", headers=api.auth("acme"))
        if r.status_code == 200:
            break
        assert r.status_code == 429, r.text
        assert time.monotonic() < deadline, "still blocked long after the window"
        time.sleep(0.2)
    assert time.monotonic() - first >= window_ms / 1000 - 0.5
    _assert_open(_answers(api, doc_id, operator_key))


def test_a_blocked_upload_stores_nothing(api_factory: ApiFactory) -> None:
    api = api_factory(auth_failure_rate_limit=RateLimit(limit=3, window_ms=60_000))
    doc_id, _ = _setup(api)
    _bad_keys(api, 3, doc_id)
    r = api.upload("acme", "b2")
    assert r.status_code == 429, r.text
    assert r.json()["error"]["type"] == "rate_limited"
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=api.base_url, transport=transport) as elsewhere:
        auth = api.auth("acme")
        assert elsewhere.get(f"{V1}/batches/b2", headers=auth).status_code == 404
        listed = elsewhere.get(f"{V1}/batches", headers=auth).json()["batches"]
    assert [b["batch_name"] for b in listed] == ["b1"]


@pytest.mark.parametrize(
    ("given", "subject"),
    [
        ("203.0.113.9", "203.0.113.9"),
        (" 203.0.113.9 ", "203.0.113.9"),
        ("::ffff:203.0.113.9", "203.0.113.9"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2::/64", "2001:db8:1:2::/64"),
        ("2001:db8:1:2::9/64", "2001:db8:1:2::/64"),
    ],
)
def test_unblock_names_the_client_as_the_api_counts_it(given: str, subject: str) -> None:
    assert parse_subject(given) == subject
    assert address_subject(given.strip().split("/")[0]) == subject


@pytest.mark.parametrize("bad", ["", "example.com", "10.0.0.0/8", "2001:db8::/48", "1.2.3"])
def test_unblock_refuses_what_is_not_a_client(bad: str, redis_url: str) -> None:
    with pytest.raises(ValueError):
        parse_subject(bad)
    if bad:
        out = relay_cli(redis_url, "keys", "unblock", bad)
        assert out.returncode == 2 and "relay keys unblock:" in out.stderr, out
