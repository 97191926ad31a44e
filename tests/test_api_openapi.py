"""The OpenAPI document: served as JSON, and exactly the app's routes."""

from __future__ import annotations

from starlette.routing import BaseRoute, Mount, Route

from tests.api_fixtures import V1, Api, api_factory_fixture, api_fixture  # noqa: F401

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
    public = {"/healthz", "/readyz", "/metrics", "/openapi.json", f"{V1}/openapi.json"}
    status_paths = {
        f"{V1}/documents/{{id}}",
        f"{V1}/batches/{{name}}",
        f"{V1}/batches/{{name}}/results",
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
    assert fields["file"]["format"] == "binary" and "batch_name" in fields


def test_rate_limited_writes_document_their_rate_headers(api: Api) -> None:
    doc = api.client.get("/openapi.json").json()["paths"]
    for path, method, code in [
        (f"{V1}/documents", "post", "201"),
        (f"{V1}/batches/{{name}}/process", "post", "202"),
        (f"{V1}/batches/{{name}}/webhook/deliveries/{{id}}/retry", "post", "202"),
    ]:
        headers = doc[path][method]["responses"][code]["headers"]
        assert {"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} <= set(headers)
