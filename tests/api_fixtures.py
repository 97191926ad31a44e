"""Fixtures for the HTTP API tests: the real app (lifespan and all) on the test's real Redis.

Import the fixtures a test module uses (``from tests.api_fixtures import api, api_factory``);
``Api`` bundles a Starlette ``TestClient``, a sync Redis client for setup and inspection, and
helpers to make API keys and upload documents.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import redis
from starlette.testclient import TestClient

from relay.api.app import create_app
from relay.auth import create_key
from relay.config import Settings, load_settings

V1 = "/api/v1"
CSV = b"sku,qty\nA-1,2\nB-2,5\n"
# Small enough that the 413 tests stay fast; large enough for every other upload.
TEST_MAX_UPLOAD = 100_000


def make_settings(redis_url: str, **overrides: Any) -> Settings:
    """Settings from defaults only (the machine's RELAY_ variables and .env are ignored)."""
    overrides.setdefault("max_upload_bytes", TEST_MAX_UPLOAD)
    return load_settings(environ={}, dotenv=None, redis_url=redis_url, **overrides)


@dataclass
class Api:
    client: TestClient
    redis: redis.Redis
    settings: Settings
    _keys: dict[str, str] = field(default_factory=dict)

    def auth(self, account: str) -> dict[str, str]:
        """``Authorization`` headers for ``account`` (one key per account, made on first use)."""
        if account not in self._keys:
            self._keys[account] = create_key(self.redis, account)
        return {"Authorization": f"Bearer {self._keys[account]}"}

    def key(self, account: str) -> str:
        self.auth(account)
        return self._keys[account]

    def upload(
        self,
        account: str,
        batch_name: str | None = "b1",
        *,
        content: bytes = CSV,
        filename: str = "items.csv",
        content_type: str | None = "text/csv",
    ) -> httpx.Response:
        data = {} if batch_name is None else {"batch_name": batch_name}
        file: Any = (filename, content) if content_type is None else (filename, content, content_type)
        return self.client.post(
            f"{V1}/documents", headers=self.auth(account), data=data, files={"file": file}
        )

    def upload_ok(self, account: str, batch_name: str = "b1", **kwargs: Any) -> dict[str, Any]:
        response = self.upload(account, batch_name, **kwargs)
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body


ApiFactory = Callable[..., Api]


@pytest.fixture
def api_factory(redis_url: str) -> Iterator[ApiFactory]:
    """``api_factory(**settings_overrides)``: a started app on the test's Redis."""
    opened: list[tuple[TestClient, redis.Redis]] = []

    def make(**overrides: Any) -> Api:
        settings = make_settings(overrides.pop("redis_url", redis_url), **overrides)
        client = TestClient(create_app(settings))
        client.__enter__()  # runs the lifespan
        sync = redis.Redis.from_url(settings.redis_url)
        opened.append((client, sync))
        return Api(client, sync, settings)

    yield make
    for client, sync in opened:
        client.__exit__(None, None, None)
        sync.close()


@pytest.fixture
def api(api_factory: ApiFactory) -> Api:
    """The app with the default settings (upload limit ``TEST_MAX_UPLOAD``)."""
    return api_factory()
