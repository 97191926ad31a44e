"""The OpenAPI document: served as JSON, and exactly the app's routes."""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from starlette.routing import BaseRoute, Mount, Route

from relay.api.reference import anchor as reference_anchor
from relay.delivery.probe import ProbeResult
from relay.devtools.sample_documents import pdf, table_ops
from relay.extract import extract_document
from relay.extract.tables import table_of_records
from relay.state.event_bodies import (
    event_body,
    notification_body,
    probe_body,
    verify_body,
    verify_challenge,
)
from relay.state.model import Batch
from relay.state.store import BatchRef, _table
from tests.support.api_fixtures import V1, Api, api_factory_fixture, api_fixture  # noqa: F401

METHODS = {"get", "put", "post", "delete", "patch"}


def app_operations(routes: list[BaseRoute], prefix: str = "") -> set[tuple[str, str]]:
    """(METHOD, path) of every API route, mounts expanded (HEAD, implied by GET, left out;
    so are the console's HTML pages, which are marked ``include_in_schema=False``)."""
    found: set[tuple[str, str]] = set()
    for route in routes:
        if isinstance(route, Mount):
            found |= app_operations(route.routes, prefix + route.path)
        elif isinstance(route, Route) and not route.include_in_schema:
            assert route.path.startswith("/console"), route.path
        elif isinstance(route, Route):
            methods = route.methods or {"GET"}
            found |= {(m, prefix + route.path) for m in methods if m != "HEAD"}
        else:  # pragma: no cover - the app has no other kind of route
            raise AssertionError(f"unexpected route {route!r}")
    return found


def test_served_as_json_at_both_paths(api: Api) -> None:
    root = api.client.get("/openapi.json")
    versioned = api.client.get(f"{V1}/openapi.json")
    assert root.status_code == versioned.status_code == 200
    assert root.headers["content-type"] == "application/json"
    assert root.json() == versioned.json()
    doc = root.json()
    assert doc["openapi"].startswith("3.")
    assert doc["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearerAuth"]["description"],
    }
    assert doc["security"] == [{"bearerAuth": []}]


def test_documents_exactly_the_apps_routes(api: Api) -> None:
    doc = api.client.get("/openapi.json").json()
    documented = {
        (method.upper(), path)
        for path, item in doc["paths"].items()
        for method in item
        if method in METHODS
    }
    served = app_operations(api.app.routes)
    assert served, "no routes found"
    assert served - documented == set(), "routes missing from the OpenAPI document"
    assert documented - served == set(), "documented operations that no route serves"


def test_every_operation_documents_its_errors(api: Api) -> None:
    doc = api.client.get("/openapi.json").json()
    public = {"/healthz", "/readyz", "/metrics", "/openapi.json", f"{V1}/openapi.json", "/docs"}
    status_paths = {
        f"{V1}/documents/{{id}}",
        f"{V1}/batches/{{name}}",
        f"{V1}/batches/{{name}}/results",
        f"{V1}/documents/{{id}}/pages/{{n}}",
    }
    for path, item in doc["paths"].items():
        for method, op in item.items():
            responses = op["responses"]
            assert op["operationId"] and op["summary"]
            if path in public:
                assert op["security"] == []
                continue
            assert "401" in responses and "503" in responses, (method, path)
            # Any call can be refused for too many bad keys from its address (or a quota).
            assert {"Retry-After", "RateLimit-Limit", "RateLimit-Remaining"} <= set(
                responses["429"]["headers"]
            ), (method, path)
            error = responses["401"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/Error"}
            if method == "get" and path in status_paths:
                for code in ("200", "404", "429"):
                    headers = responses[code]["headers"]
                    assert {"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} <= set(
                        headers
                    ), (path, code)
                assert "Retry-After" in responses["429"]["headers"]
    upload = doc["paths"][f"{V1}/documents"]["post"]["requestBody"]["content"]
    schema = upload["multipart/form-data"]["schema"]
    assert schema == {"$ref": "#/components/schemas/Upload"}
    fields = doc["components"]["schemas"]["Upload"]["properties"]
    # One part or several of the name file, each a file (RELAY_MAX_FILES_PER_UPLOAD's default).
    assert fields["file"]["items"]["format"] == "binary" and "batch_name" in fields
    assert (fields["file"]["minItems"], fields["file"]["maxItems"]) == (1, 100)


def test_rate_limited_writes_document_their_rate_headers(api: Api) -> None:
    doc = api.client.get("/openapi.json").json()["paths"]
    for path, method, code in [
        (f"{V1}/documents", "post", "201"),
        (f"{V1}/batches/{{name}}/process", "post", "202"),
        (f"{V1}/batches/{{name}}/webhook/deliveries/{{id}}/retry", "post", "202"),
    ]:
        headers = doc[path][method]["responses"][code]["headers"]
        assert {"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} <= set(headers)


def test_a_405_allows_every_documented_method_of_its_path(api: Api) -> None:
    doc = api.client.get("/openapi.json").json()
    example = {"{name}": "b1", "{id}": "doc_0aaaaaaaaaaaaaaaaaaaa"}
    checked = 0
    for template, item in doc["paths"].items():
        path = template
        for placeholder, value in example.items():
            path = path.replace(placeholder, value)
        documented = {method.upper() for method in item if method in METHODS}
        if "GET" in documented:
            documented.add("HEAD")
        for method in ("OPTIONS", "PATCH", "TRACE"):
            response = api.client.request(method, path, headers=api.auth("acme"))
            assert response.status_code == 405, (method, path)
            allowed = {m.strip() for m in response.headers["allow"].split(",")}
            assert allowed == documented, (method, path, allowed)
            assert response.json()["error"]["type"] == "method_not_allowed"
            checked += 1
    assert checked >= 3 * 14
    # The two paths the issue names (each used to answer only its first route's methods).
    allow = api.client.options(f"{V1}/batches/b1").headers["allow"]
    assert sorted(allow.split(", ")) == ["DELETE", "GET", "HEAD"]
    allow = api.client.request("PATCH", f"{V1}/batches/b1/webhook").headers["allow"]
    assert sorted(allow.split(", ")) == ["DELETE", "GET", "HEAD", "PUT"]


def test_cursors_are_taken_exactly_when_they_match_their_documented_pattern(api: Api) -> None:
    api.upload_ok("acme", "b1")
    h = api.auth("acme")
    params = {
        p["name"]: p
        for p in api.client.get("/openapi.json").json()["paths"][f"{V1}/batches"]["get"][
            "parameters"
        ]
    }
    listing = re.compile(params["cursor"]["schema"]["pattern"])
    for cursor, taken in [
        ("", True),
        ("1764530000000.b1", True),
        ("0.zz-last", True),
        ("1764530000000.", False),
        ("WyJhIiwiYiJd", False),
        ("1234567890123456.b1", False),
        ("1.-bad", False),
    ]:
        assert bool(listing.fullmatch(cursor)) is taken, cursor
        r = api.client.get(f"{V1}/batches", headers=h, params={"cursor": cursor})
        assert r.status_code == (200 if taken else 422), (cursor, r.text)
    results = api.client.get("/openapi.json").json()["paths"][f"{V1}/batches/{{name}}/results"]
    position = re.compile(
        next(p for p in results["get"]["parameters"] if p["name"] == "cursor")["schema"]["pattern"]
    )
    for cursor, taken in [("", True), ("0", True), ("999999999", True), ("1" * 10, False)]:
        assert bool(position.fullmatch(cursor)) is taken, cursor
        r = api.client.get(f"{V1}/batches/b1/results", headers=h, params={"cursor": cursor})
        assert r.status_code == (200 if taken else 422), (cursor, r.text)


def test_process_takes_no_body_or_an_object_but_not_null(api: Api) -> None:
    api.upload_ok("acme", "b1")
    h = {**api.auth("acme"), "content-type": "application/json"}
    url = f"{V1}/batches/b1/process"
    assert api.client.post(url, headers=h, content=b"null").status_code == 422
    assert api.client.post(url, headers=h, content=b'{"fields": null}').status_code == 202
    assert api.client.post(url, headers=h, content=b"").status_code == 202
    twice = b'{"fields": [{"name": "a"}, {"name": "a"}]}'
    assert api.client.post(url, headers=h, content=twice).status_code == 422
    schema = api.client.get("/openapi.json").json()["components"]["schemas"]["ProcessRequest"]
    assert schema["properties"]["fields"]["uniqueItems"] is True


def test_docs_is_a_self_contained_page_with_every_operation_and_webhook(api: Api) -> None:
    doc = api.client.get("/openapi.json").json()
    page = api.client.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'none'" in page.headers["content-security-policy"]
    html = page.text
    # Offline: no script, nothing loaded from elsewhere.
    assert "<script" not in html.lower()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    operations = [(m, p, op) for p, item in doc["paths"].items() for m, op in item.items()]
    assert len(operations) >= 20
    for method, path, op in operations:
        section = html.split(f'id="{reference_anchor(method, path)}"', 1)[1].split("</section>")[0]
        assert f"<code>{escape(path)}</code>" in section, (method, path)
        assert op["operationId"] in section and escape(op["summary"]) in section
        for param in op.get("parameters", []):
            assert f"<code>{escape(param['name'])}</code>" in section, (path, param["name"])
        for code in op["responses"]:
            assert f"<td><code>{code}</code></td>" in section, (path, code)
        for content in op.get("requestBody", {}).get("content", {}).values():
            name = content["schema"]["$ref"].rsplit("/", 1)[1]
            assert f'href="#schema-{name}"' in section, (path, name)
    for name in doc["components"]["schemas"]:
        assert f'id="schema-{name}"' in html
    # The webhooks section, with batch.completed and its signed headers.
    webhooks = html.split("<h2>Webhooks</h2>", 1)[1]
    for event in doc["webhooks"]:
        assert f"<code>{event}</code>" in webhooks
    assert "webhook-signature" in webhooks and 'href="#schema-BatchCompletedEvent"' in webhooks
    # Linked from the README.
    assert "/docs" in (Path(__file__).parent.parent / "README.md").read_text()


def test_webhooks_describe_the_batch_completed_body_relay_sends(api: Api) -> None:
    doc = api.client.get("/openapi.json").json()
    hook = doc["webhooks"]["batch.completed"]["post"]
    headers = {p["name"] for p in hook["parameters"] if p["in"] == "header"}
    assert {"webhook-id", "webhook-timestamp", "webhook-signature"} <= headers
    schema = hook["requestBody"]["content"]["application/json"]["schema"]
    validator = jsonschema_rs.validator_for({**schema, "components": doc["components"]})
    # The exact body the delivery pipeline POSTs, for a completed batch read over the API.
    api.upload_ok("acme", "b1")
    api.client.delete(f"{V1}/batches/b1", headers=api.auth("acme"))  # completes it (canceled)
    batch = Batch.from_hash(api.redis.hgetall(BatchRef("acme", "b1").key))
    assert batch.completed_at is not None
    body = json.loads(notification_body(batch, "https://relay.example"))
    validator.validate(body)
    assert body["data"]["results_url"] == "https://relay.example/api/v1/batches/b1/results"
    # Closed: a field the contract does not list fails.
    assert not validator.is_valid({**body, "data": {**body["data"], "extra": 1}})
    data = doc["components"]["schemas"]["BatchCompletedData"]["properties"]
    assert set(data) == set(doc["components"]["schemas"]["Batch"]["properties"]) | {"results_url"}


def _failed_fields(*, attempts: str, error: str, status_code: str) -> dict[str, str]:
    """A delivery.failed event's outbox fields, as the Lua script writes them."""
    return {
        "kind": "delivery.failed",
        "batch": "b1",
        "url": "https://h.example/x",
        "id": "msg_3abcdefghijklmnopqrst",
        "attempts": attempts,
        "error": error,
        "status_code": status_code,
        "at": "1764475200000",
    }


@pytest.mark.parametrize(
    ("event", "fields"),
    [
        (
            "webhook.disabled",
            {
                "kind": "webhook.disabled",
                "batch": "b1",
                "url": "https://h.example/x",
                "reason": "the receiver answered 410 Gone",
                "at": "1764475200000",
            },
        ),
        ("delivery.failed", _failed_fields(attempts="8", error="http_status", status_code="502")),
        ("delivery.failed", _failed_fields(attempts="3", error="timeout", status_code="")),
    ],
)
def test_webhooks_describe_the_operational_events_relay_sends(
    api: Api, event: str, fields: dict[str, str]
) -> None:
    doc = api.client.get("/openapi.json").json()
    hook = doc["webhooks"][event]["post"]
    schema = hook["requestBody"]["content"]["application/json"]["schema"]
    validator = jsonschema_rs.validator_for({**schema, "components": doc["components"]})
    # The exact body the detector POSTs for an outbox entry of that kind.
    body = json.loads(event_body({k.encode(): v.encode() for k, v in fields.items()}))
    assert body["type"] == event
    validator.validate(body)
    assert not validator.is_valid({**body, "data": {**body["data"], "extra": 1}})


def test_webhooks_describe_the_test_event_and_the_feed_and_test_send_answers(
    api: Api,
) -> None:
    doc = api.client.get("/openapi.json").json()

    def validator(schema: dict[str, Any]) -> Any:
        return jsonschema_rs.validator_for({**schema, "components": doc["components"]})

    hook = doc["webhooks"]["webhook.test"]["post"]
    check = validator(hook["requestBody"]["content"]["application/json"]["schema"])
    for name in ("b1", ""):
        body = json.loads(probe_body(name, "https://h.example/x", 1764475200000))
        check.validate(body)
        assert not check.is_valid({**body, "extra": 1})
    check = validator(
        doc["webhooks"]["webhook.verify"]["post"]["requestBody"]["content"]["application/json"][
            "schema"
        ]
    )
    for name in ("b1", ""):
        body = json.loads(verify_body(name, "https://h.example/x", "c-1", 1764475200000))
        check.validate(body)
        assert verify_challenge(json.dumps(body, separators=(",", ":")).encode()) == "c-1"
    answer = ProbeResult(
        "msg_3abcdefghijklmnopqrst", "https://h.example/x", 1, None, 1.5, "x", "timeout"
    )
    validator(ref_schema(doc, "TestSend")).validate(answer.to_json())
    # A feed page of each kind of event (the bodies relay sends, with their id).
    feed = validator(ref_schema(doc, "EventList"))
    api.upload_ok("acme", "b1")
    api.client.delete(f"{V1}/batches/b1", headers=api.auth("acme"))
    batch = Batch.from_hash(api.redis.hgetall(BatchRef("acme", "b1").key))
    completed = json.loads(notification_body(batch, "https://relay.example"))
    disabled = json.loads(
        event_body(
            {
                b"kind": b"webhook.disabled",
                b"batch": b"b1",
                b"url": b"u",
                b"reason": b"r",
                b"at": b"1764475200000",
            }
        )
    )
    page = {
        "events": [
            {"id": "msg_3abcdefghijklmnopqrst", **completed},
            {"id": "msg_4abcdefghijklmnopqrst", **disabled},
        ],
        "next_cursor": "msg_4abcdefghijklmnopqrst",
        "has_more": False,
    }
    feed.validate(page)
    assert not feed.is_valid({**page, "events": [completed]})  # the id is required


def ref_schema(doc: dict[str, Any], name: str) -> dict[str, Any]:
    schema: dict[str, Any] = doc["components"]["schemas"][name]
    return schema


def test_a_table_with_its_geometry_is_what_the_schema_describes(api: Api) -> None:
    """A PDF table (boxes), a CSV table (no geometry) and one stored without its cells, as
    the store reads it back, all validate against ``Table``; the schema is closed, a box is
    four numbers from 0 to 1, a span at least 1."""
    doc = api.client.get("/openapi.json").json()
    check = jsonschema_rs.validator_for(
        {**ref_schema(doc, "Table"), "components": doc["components"]}
    )
    ruled = extract_document(
        pdf([table_ops([["SKU", "Qty"], ["A1", "10"]])]),
        filename="t.pdf",
        content_type="",
        fields=[],
    ).tables[0]
    csv = table_of_records([{"sku": "A", "qty": None}])
    for table in (ruled.to_json(), csv.to_json(), _table(csv.stored_json())):
        check.validate(table)
    body = ruled.to_json()
    assert body["bbox"] is not None and body["cells"]
    assert not check.is_valid({**body, "extra": 1})
    assert not check.is_valid({**body, "bbox": [0.1, 0.2, 0.3]})
    assert not check.is_valid({**body, "bbox": [0.1, 0.2, 0.3, 1.5]})
    cell = {"row": 0, "col": 0, "row_span": 0, "col_span": 1, "bbox": None}
    assert not check.is_valid({**body, "cells": [cell]})
    properties = ref_schema(doc, "TableCell")["properties"]
    assert list(properties) == ["row", "col", "row_span", "col_span", "bbox"]


def test_a_page_image_is_documented_as_png_with_its_errors(api: Api) -> None:
    op = api.client.get("/openapi.json").json()["paths"][f"{V1}/documents/{{id}}/pages/{{n}}"]
    responses = op["get"]["responses"]
    assert set(responses["200"]["content"]) == {"image/png"}
    assert "X-Page-Count" in responses["200"]["headers"]
    for code, words in {
        "409": ("document_not_finished", "source_gone", "no_pages"),
        "422": ("page_not_renderable",),
        "503": ("render_busy",),
    }.items():
        assert all(w in responses[code]["description"] for w in words), code
    names = {p["name"] for p in op["get"]["parameters"]}
    assert names == {"id", "n", "width"}
