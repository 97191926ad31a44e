"""Metadata over HTTP (the app on uvicorn, a real Redis): a document's ``metadata`` and a
batch's ``batch_metadata`` ride on the upload, come back in every read of them, are set
once per batch, and anything outside the rules is 422 with nothing created."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.api_fixtures import (  # noqa: F401
    CSV,
    V1,
    Api,
    ApiFactory,
    api_factory_fixture,
    api_fixture,
)


def _upload(api: Api, batch: str | None = "b1", **fields: Any) -> httpx.Response:
    data = {k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()}
    if batch is not None:
        data["batch_name"] = batch
    return api.client.post(
        f"{V1}/documents",
        headers=api.auth("acme"),
        data=data,
        files={"file": ("items.csv", CSV, "text/csv")},
    )


def _get(api: Api, path: str) -> Any:
    r = api.client.get(f"{V1}{path}", headers=api.auth("acme"))
    assert r.status_code == 200, r.text
    return r.json()


def test_metadata_comes_back_in_every_read(api: Api) -> None:
    doc_meta = {"invoice": "INV-7", "amount": 12.5, "paid": False, "note": None, "n": 3}
    batch_meta = {"customer": "ACME Ltd", "run": 42}
    r = _upload(api, metadata=doc_meta, batch_metadata=batch_meta)
    assert r.status_code == 201, r.text
    doc = r.json()
    assert doc["metadata"] == doc_meta
    assert _get(api, f"/documents/{doc['id']}")["metadata"] == doc_meta
    assert _get(api, "/batches/b1")["metadata"] == batch_meta
    results = _get(api, "/batches/b1/results")
    assert results["metadata"] == batch_meta
    assert [d["metadata"] for d in results["documents"]] == [doc_meta]
    assert [b["metadata"] for b in _get(api, "/batches")["batches"]] == [batch_meta]
    # Keys come back sorted (the canonical form), whatever order they were sent in.
    assert list(_get(api, f"/documents/{doc['id']}")["metadata"]) == sorted(doc_meta)
    # The process answer is the batch too.
    r = api.client.post(f"{V1}/batches/b1/process", headers=api.auth("acme"))
    assert r.status_code == 202 and r.json()["metadata"] == batch_meta


def test_without_metadata_it_is_the_empty_object(api: Api) -> None:
    doc = api.upload_ok("acme", "b1")
    assert doc["metadata"] == {}
    assert _get(api, "/batches/b1")["metadata"] == {}
    # {} given is no metadata either.
    assert _upload(api, metadata={}, batch_metadata={}).json()["metadata"] == {}
    assert _get(api, "/batches/b1")["metadata"] == {}


def test_a_batch_s_metadata_is_set_once(api: Api) -> None:
    # A batch made without metadata takes the first upload's that gives one.
    assert _upload(api).status_code == 201
    assert _upload(api, batch_metadata={"a": 1, "b": "x"}).status_code == 201
    assert _get(api, "/batches/b1")["metadata"] == {"a": 1, "b": "x"}
    # The same again (any key order, any spacing) or none at all: accepted.
    assert _upload(api, batch_metadata='{ "b" : "x", "a" : 1 }').status_code == 201
    assert _upload(api).status_code == 201
    # Another: 409, and nothing is created.
    r = _upload(api, batch_metadata={"a": 2, "b": "x"})
    assert r.status_code == 409, r.text
    assert r.json()["error"]["type"] == "batch_metadata_conflict"
    assert "already has other metadata" in r.json()["error"]["message"]
    batch = _get(api, "/batches/b1")
    assert batch["document_count"] == 4 and batch["metadata"] == {"a": 1, "b": "x"}


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"metadata": "not json"}, "metadata is not valid JSON"),
        ({"metadata": [1, 2]}, "metadata must be a JSON object"),
        ({"metadata": {"a": {"nested": 1}}}, "is an object"),
        ({"batch_metadata": {"a": [1]}}, "batch_metadata['a'] is an array"),
        ({"metadata": '{"a": 1, "a": 2}'}, "given twice"),
        ({"metadata": '{"a": NaN}'}, "not valid JSON"),
        ({"metadata": '{"a": "\\ud800"}'}, "unpaired surrogate"),
        ({"batch_metadata": ""}, "batch_metadata is not valid JSON"),
    ],
)
def test_invalid_metadata_is_422_and_creates_nothing(
    api: Api, fields: dict[str, Any], says: str
) -> None:
    r = _upload(api, "fresh", **fields)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["type"] == "invalid_metadata"
    assert says in r.json()["error"]["message"]
    assert api.client.get(f"{V1}/batches/fresh", headers=api.auth("acme")).status_code == 404
    assert _get(api, "/batches")["batches"] == []


def test_a_file_part_is_not_metadata(api: Api) -> None:
    r = api.client.post(
        f"{V1}/documents",
        headers=api.auth("acme"),
        files={"file": ("a.csv", CSV, "text/csv"), "metadata": ("m.json", b"{}")},
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["type"] == "invalid_metadata"


def test_the_bounds_are_settings(api_factory: ApiFactory) -> None:
    api = api_factory(metadata_max_keys=3, metadata_max_bytes=64)
    assert _upload(api, metadata={"a": 1, "b": 2, "c": 3}).status_code == 201
    r = _upload(api, "b2", metadata={"a": 1, "b": 2, "c": 3, "d": 4})
    assert r.status_code == 422 and r.json()["error"] == {
        "type": "invalid_metadata",
        "message": "metadata has 4 keys; at most 3 are allowed",
    }
    # 64 bytes of canonical JSON pass, 65 do not, for the batch's as for the document's.
    exact = {"k": "x" * 56}
    assert len(json.dumps(exact, separators=(",", ":"))) == 64
    assert _upload(api, "b3", batch_metadata=exact).status_code == 201
    r = _upload(api, "b4", batch_metadata={"k": "x" * 57})
    assert r.status_code == 422 and r.json()["error"] == {
        "type": "invalid_metadata",
        "message": "batch_metadata is 65 bytes as compact JSON; at most 64 are allowed",
    }
    listed = {b["batch_name"] for b in _get(api, "/batches")["batches"]}
    assert listed == {"b1", "b3"}


def test_an_idempotent_retry_answers_the_first_document_with_its_metadata(api: Api) -> None:
    headers = [(k.encode(), v.encode()) for k, v in api.auth("acme").items()]
    headers.append((b"Idempotency-Key", b"k-1"))
    sent = {"batch_name": "b1", "metadata": json.dumps({"try": 1})}
    files = {"file": ("items.csv", CSV, "text/csv")}
    first = api.client.post(f"{V1}/documents", headers=headers, data=sent, files=files)
    again = api.client.post(f"{V1}/documents", headers=headers, data=sent, files=files)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.json()["metadata"] == {"try": 1}
