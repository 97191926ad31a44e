"""Per-process resources of workers and sweepers, built once from the settings.

RQ imports job functions by name, so a job finds its process's resources here rather than in
its arguments. ``configure`` is called by ``relay worker`` / ``relay detector`` at start;
a job in a process that was not configured builds them from the environment on first use.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property, partial

import httpx
import redis

from relay import __version__
from relay.blobs import BlobStore
from relay.config import Settings, load_settings
from relay.crypto import Encryptor
from relay.deliveries import Deliveries
from relay.delivery.ssrf import TargetPolicy, make_client
from relay.extract import extract
from relay.extract.loader import Extractor, load_extractor
from relay.metrics import Metrics
from relay.redis_conn import sync_client
from relay.signing_keys import SigningKeys
from relay.store import Store

USER_AGENT = f"relay/{__version__}"


@dataclass
class Runtime:
    settings: Settings

    @cached_property
    def redis(self) -> redis.Redis:
        return sync_client(self.settings.redis_url)

    @cached_property
    def store(self) -> Store:
        return Store(self.redis, BlobStore(self.settings.blob_dir))

    @cached_property
    def metrics(self) -> Metrics:
        return Metrics()

    @cached_property
    def deliveries(self) -> Deliveries:
        return Deliveries(self.redis)

    @cached_property
    def policy(self) -> TargetPolicy:
        return TargetPolicy(
            allow_http=self.settings.allow_http_targets,
            allow_private=self.settings.allow_private_targets,
        )

    @cached_property
    def http(self) -> httpx.Client:
        """One client per process: its SSL context costs ~25 ms and its pool is reused."""
        return make_client(
            self.policy,
            self.settings.delivery_timeout,
            max_connections=self.settings.delivery_concurrency * 2,
            user_agent=USER_AGENT,
        )

    @cached_property
    def signing(self) -> SigningKeys:
        return SigningKeys(Encryptor.from_setting(self.settings.encryption_key))

    @cached_property
    def executor(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(self.settings.delivery_concurrency, "delivery")

    @cached_property
    def extractor(self) -> Extractor:
        loaded = load_extractor(self.settings.extractor)
        if loaded is extract:  # the default takes the image bound from the settings
            return partial(extract, max_image_pixels=self.settings.max_image_pixels)
        return loaded


_current: Runtime | None = None


def configure(settings: Settings) -> Runtime:
    global _current
    _current = Runtime(settings)
    return _current


def current() -> Runtime:
    global _current
    if _current is None:
        _current = Runtime(load_settings())
    return _current
