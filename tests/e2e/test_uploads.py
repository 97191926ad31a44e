"""End to end, real processes (API, worker): one upload request of many files.

The most files a request may carry (``RELAY_MAX_FILES_PER_UPLOAD``, 100 by default) make a
document each, which a real worker processes; one file more is refused whole, nothing made
and nothing charged; a retry of the request with its Idempotency-Key answers the same
documents as they are now, and the key with other files is refused.
"""

from __future__ import annotations

from typing import Any

import httpx
import redis

from relay.devtools.processes import Stack
from relay.redis import keyspace
from tests.e2e.client import Api
from tests.e2e.test_webhooks import start
from tests.support.helpers import wait_until

MOST = 100  # RELAY_MAX_FILES_PER_UPLOAD's default


def _files(n: int, tag: str = "") -> list[tuple[str, tuple[str, bytes, str]]]:
    return [
        ("file", (f"doc-{i:03}.csv", f"sku,qty\nA-{i}{tag},{i}\n".encode(), "text/csv"))
        for i in range(n)
    ]


def _post(api: Api, n: int, key: str | None = None, tag: str = "") -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return api.http.post(
        "/documents",
        files=_files(n, tag),
        data={"batch_name": "many", "metadata": '{"order": "PO-7"}'},
        headers=headers,
    )


def _pending(redis: redis.Redis, account: str) -> tuple[int, bytes | None]:
    """The account's bytes awaiting processing, summed over the shards' counters, and its
    total (the fast path's counter)."""
    shards = sum(
        int(redis.get(keyspace.account_pending_bytes(s, account)) or 0)
        for s in keyspace.all_shards()
    )
    return shards, redis.get(keyspace.account_pending_total(account))


def test_a_hundred_files_in_one_upload_are_a_hundred_processed_documents(
    stack: Stack, redis: redis.Redis
) -> None:
    api = start(stack, detectors=0)
    # One file more than the limit: refused whole, before anything is stored or charged.
    over = _post(api, MOST + 1, key="k-over")
    assert over.status_code == 422, over.text
    assert over.json()["error"]["type"] == "too_many_files"
    assert "100" in over.json()["error"]["message"]
    assert api.http.get("/batches").json()["batches"] == []
    # Its hold on the account's total went back (the key may stay, at 0).
    assert _pending(redis, "acme") in ((0, None), (0, b"0"))

    made = _post(api, MOST, key="k-100")
    assert made.status_code == 201, made.text
    assert "location" not in made.headers
    docs: list[dict[str, Any]] = made.json()["documents"]
    assert [d["filename"] for d in docs] == [f"doc-{i:03}.csv" for i in range(MOST)]
    assert {d["status"] for d in docs} == {"queued"}
    assert all(d["metadata"] == {"order": "PO-7"} for d in docs)
    assert len({d["id"] for d in docs}) == MOST
    assert _pending(redis, "acme")[0] == sum(d["size"] for d in docs)
    assert api.batch("many")["document_count"] == MOST

    api.process("many")
    done = wait_until(
        lambda: (b := api.batch("many"))["all_done"] and b, 60, message="batch not done"
    )
    assert done["counts"]["succeeded"] == MOST, done["counts"]
    results = api.http.get("/batches/many/results", params={"limit": MOST}).json()
    rows = {d["filename"]: d["line_items"] for d in results["documents"]}
    assert rows == {f"doc-{i:03}.csv": [{"sku": f"A-{i}", "qty": str(i)}] for i in range(MOST)}

    # The request again with its key: the same documents, as they are now; nothing new.
    again = _post(api, MOST, key="k-100")
    assert again.status_code == 201, again.text
    replayed = again.json()["documents"]
    assert [d["id"] for d in replayed] == [d["id"] for d in docs]
    assert {d["status"] for d in replayed} == {"succeeded"}
    # The key with other files (the same names, other bytes): refused, nothing made.
    other = _post(api, MOST, key="k-100", tag="x")
    assert other.status_code == 409, other.text
    assert other.json()["error"]["type"] == "idempotency_key_reused"
    assert api.batch("many")["document_count"] == MOST
    api.close()
