from __future__ import annotations
from tests.api_fixtures import Api, api, api_factory  # noqa: F401

def test_smoke(api: Api) -> None:
    d = api.upload_ok("acme")
    print(d)
    r = api.client.get(f"/api/v1/documents/{d['id']}", headers=api.auth("acme"))
    print(r.status_code, r.headers, r.json())
    r = api.client.get(f"/api/v1/batches/b1", headers=api.auth("acme"))
    print(r.status_code, r.headers, r.json())
    r = api.client.post(f"/api/v1/batches/b1/process", headers=api.auth("acme"))
    print(r.status_code, r.headers, r.json())
    r = api.client.get(f"/api/v1/batches/b1/results", headers=api.auth("acme"))
    print(r.status_code, r.json())
    r = api.client.get(f"/api/v1/batches", headers=api.auth("acme"))
    print(r.status_code, r.json())
    r = api.client.delete(f"/api/v1/batches/b1", headers=api.auth("acme"))
    print(r.status_code, r.json())
    r = api.client.get(f"/metrics")
    print(r.status_code, r.text)
    r = api.client.get(f"/nope")
    print(r.status_code, r.text)
    r = api.client.put(f"/healthz")
    print(r.status_code, r.headers, r.text)
