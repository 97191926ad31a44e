"""A thin API client for end-to-end tests (httpx, one per test)."""

from __future__ import annotations

import mimetypes
from typing import Any

import httpx

OPEN: list[Api] = []  # closed by the e2e fixtures' teardown, also when a test fails


class Api:
    def __init__(self, base_url: str, key: str) -> None:
        self.http = httpx.Client(
            base_url=base_url + "/api/v1", headers={"authorization": f"Bearer {key}"}, timeout=10
        )
        OPEN.append(self)

    def upload(self, batch: str, content: bytes, filename: str = "doc.csv") -> dict[str, Any]:
        content_type = mimetypes.guess_type(filename)[0] or "application/octet-stream"
        r = self.http.post(
            "/documents",
            files={"file": (filename, content, content_type)},
            data={"batch_name": batch},
        )
        assert r.status_code == 201, r.text
        body: dict[str, Any] = r.json()
        return body

    def process(self, batch: str, fields: list[str] | None = None) -> dict[str, Any]:
        payload = {"fields": [{"name": f} for f in fields]} if fields else None
        r = self.http.post(f"/batches/{batch}/process", json=payload)
        assert r.status_code == 202, r.text
        body: dict[str, Any] = r.json()
        return body

    def batch(self, batch: str) -> dict[str, Any]:
        r = self.http.get(f"/batches/{batch}")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def webhook(self, batch: str) -> dict[str, Any]:
        """The batch's webhook registration (GET /batches/{name}/webhook)."""
        r = self.http.get(f"/batches/{batch}/webhook")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def register(self, batch: str, url: str) -> httpx.Response:
        return self.http.put(f"/batches/{batch}/webhook", json={"url": url})

    def deliveries(self, batch: str) -> list[dict[str, Any]]:
        r = self.http.get(f"/batches/{batch}/webhook/deliveries")
        assert r.status_code == 200, r.text
        found: list[dict[str, Any]] = r.json()["deliveries"]
        return found

    def signing(self) -> dict[str, Any]:
        r = self.http.get("/webhook-signing")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def close(self) -> None:
        self.http.close()


def close_all() -> None:
    while OPEN:
        OPEN.pop().close()
