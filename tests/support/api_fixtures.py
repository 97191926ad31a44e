"""Fixtures for the HTTP API tests: the real app served by uvicorn on the test's real Redis.

A test module imports both fixture functions (``from tests.support.api_fixtures import
api_factory_fixture, api_fixture  # noqa: F401``): pytest registers imported fixtures under
their ``name`` (``api_factory``, ``api``), and the distinct function names keep the test
parameters from shadowing the imports. ``Api`` bundles an ``httpx.Client`` pointed at a
uvicorn server running the app (lifespan and all) in a thread, a sync Redis client for setup
and inspection, and helpers to make API keys and upload documents. Starlette's
``TestClient`` is not used: with httpx it warns (deprecated in favour of ``httpx2``), and a
real server also exercises real ``Content-Length`` and chunked bodies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import redis
import uvicorn
from cryptography.fernet import Fernet
from starlette.applications import Starlette

from relay.api.app import create_app
from relay.api.server import uvicorn_options
from relay.config import Secret, Settings, load_settings
from relay.state.api_keys import create_key
from tests.support.helpers import free_port, wait_until

V1 = "/api/v1"
CSV = b"sku,qty\nA-1,2\nB-2,5\n"
# Small enough that the 413 tests stay fast; large enough for every other upload.
TEST_MAX_UPLOAD = 100_000


def make_settings(redis_url: str, **overrides: Any) -> Settings:
    """Settings from defaults only (the machine's RELAY_ variables and .env are ignored)."""
    overrides.setdefault("max_upload_bytes", TEST_MAX_UPLOAD)
    overrides.setdefault("encryption_key", Secret(Fernet.generate_key().decode()))
    return load_settings(environ={}, dotenv=None, redis_url=redis_url, **overrides)


@contextmanager
def serve(app: Starlette, **options: Any) -> Iterator[str]:
    """Run ``app`` on uvicorn in a thread; yields its base URL; stops it (lifespan shutdown).
    ``options``: more of uvicorn's, such as ``relay.api.server.uvicorn_options``."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=free_port(), log_level="warning", lifespan="on", **options
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), 10, message="uvicorn start")
        if not server.started:
            raise RuntimeError("uvicorn did not start")
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        thread.join(10)


@dataclass
class Api:
    client: httpx.Client
    redis: redis.Redis
    settings: Settings
    base_url: str
    app: Starlette
    _keys: dict[str, str] = field(default_factory=dict)

    def flush(self) -> None:
        """Empty the Redis and forget the keys made so far (the next ``key`` makes new ones)."""
        self.redis.flushdb()
        self._keys.clear()

    def key(self, account: str) -> str:
        """The API key of ``account`` (one per account, made on first use)."""
        if account not in self._keys:
            self._keys[account] = create_key(self.redis, account)
        return self._keys[account]

    def auth(self, account: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key(account)}"}

    def upload(
        self,
        account: str,
        batch_name: str | None = "b1",
        *,
        content: bytes = CSV,
        filename: str = "items.csv",
        content_type: str | None = "text/csv",
        headers: Sequence[tuple[bytes, bytes]] = (),
    ) -> httpx.Response:
        """``POST /documents`` as ``account``, with any more ``headers`` (raw, each sent as
        given, a name possibly twice)."""
        data = {} if batch_name is None else {"batch_name": batch_name}
        file: Any = (
            (filename, content) if content_type is None else (filename, content, content_type)
        )
        sent = [(k.encode(), v.encode()) for k, v in self.auth(account).items()] + list(headers)
        return self.client.post(f"{V1}/documents", headers=sent, data=data, files={"file": file})

    def upload_ok(self, account: str, batch_name: str = "b1", **kwargs: Any) -> dict[str, Any]:
        response = self.upload(account, batch_name, **kwargs)
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body


ApiFactory = Callable[..., Api]


@pytest.fixture(name="api_factory")
def api_factory_fixture(redis_url: str) -> Iterator[ApiFactory]:
    """``api_factory(**settings_overrides)``: the app served on the test's Redis."""
    with ExitStack() as stack:

        def make(**overrides: Any) -> Api:
            settings = make_settings(overrides.pop("redis_url", redis_url), **overrides)
            app = create_app(settings)
            # Served as `relay serve` serves it: httptools with the HTTP bounds.
            base_url = stack.enter_context(serve(app, **uvicorn_options(settings)))
            client = stack.enter_context(httpx.Client(base_url=base_url, timeout=30))
            sync = redis.Redis.from_url(settings.redis_url)
            stack.callback(sync.close)
            return Api(client, sync, settings, base_url, app)

        yield make


@pytest.fixture(name="api")
def api_fixture(api_factory: ApiFactory) -> Api:
    """The app with the default settings (upload limit ``TEST_MAX_UPLOAD``)."""
    return api_factory()
