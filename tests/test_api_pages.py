"""``pages`` on ``POST /batches/{name}/process`` over HTTP (the app on uvicorn, a real Redis):
a malformed range is 422 ``invalid_pages`` saying why and hands nothing out; a valid one is
kept, in canonical form, with each document the call hands out."""

from __future__ import annotations

from typing import Any

import pytest

from relay.redis import keyspace
from relay.state.store import BatchRef
from tests.support.api_fixtures import V1, Api, ApiFactory, api_factory_fixture, api_fixture  # noqa: F401


def _process(api: Api, body: Any, batch: str = "b1") -> Any:
    return api.client.post(f"{V1}/batches/{batch}/process", headers=api.auth("acme"), json=body)


def _pages_of(api: Api, doc_id: str, batch: str = "b1") -> bytes | None:
    shard = BatchRef("acme", batch).shard
    value: bytes | None = api.redis.hget(keyspace.doc(shard, doc_id), "pages")
    return value


@pytest.mark.parametrize(
    ("pages", "says"),
    [
        ("", "pages must name pages or ranges"),
        ("0", "page numbers start at 1"),
        ("3-1", "the range '3-1' ends before it starts"),
        ("a", "'a' is not a page number or a range like 1-3"),
        ("1,,2", "an empty item"),
        (",".join(str(n) for n in range(1, 102)), "at most 100 are allowed"),
        (12, "pages must be a string"),
        (["1-3"], "pages must be a string"),
    ],
)
def test_a_malformed_range_is_422_and_hands_nothing_out(api: Api, pages: Any, says: str) -> None:
    doc = api.upload_ok("acme", "b1")
    r = _process(api, {"pages": pages})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["type"] == "invalid_pages"
    assert says in r.json()["error"]["message"]
    batch = api.client.get(f"{V1}/batches/b1", headers=api.auth("acme")).json()
    assert batch["status"] == "queued" and _pages_of(api, doc["id"]) is None
    # Still to be handed out: the next call does.
    assert _process(api, {}).status_code == 202
    assert api.redis.llen(keyspace.batch_ready(BatchRef("acme", "b1").shard, "acme", "b1")) == 1


def test_the_bound_on_ranges_is_a_setting(api_factory: ApiFactory) -> None:
    api = api_factory(max_page_ranges=2)
    api.upload_ok("acme", "b1")
    r = _process(api, {"pages": "1,3,5"})
    assert r.status_code == 422
    assert r.json()["error"]["message"] == (
        "pages has 3 ranges; at most 2 are allowed (RELAY_MAX_PAGE_RANGES)"
    )
    assert _process(api, {"pages": "1,3-5"}).status_code == 202


def test_a_range_is_kept_with_the_documents_the_call_hands_out(api: Api) -> None:
    first = api.upload_ok("acme", "b1")
    r = _process(api, {"pages": " 12, 1-3,2 ", "fields": [{"name": "sku"}]})
    assert r.status_code == 202, r.text
    assert _pages_of(api, first["id"]) == b"1-3,12"
    # A later call hands out only its own documents, with its own pages (or none).
    second = api.upload_ok("acme", "b1")
    assert _process(api, {"pages": None}).status_code == 202
    assert _pages_of(api, first["id"]) == b"1-3,12" and _pages_of(api, second["id"]) is None
