"""What a worker or detector process works with, built once at its start and passed in.

``relay worker`` builds one :class:`WorkerContext` and binds it to the RQ worker
(``relay.runtime.worker``), which hands it to every job as its first argument, as arq's ``ctx``
does; ``relay detector`` and ``relay deliveries`` build their own. Nothing here is global:
a test or benchmark builds a context from its own settings. Each resource is made on first
use, so a process pays only for what it uses; the context owns what it made, and
:meth:`WorkerContext.close` ends it all once, in order (the documents in the background, the
delivery engine's attempts, the extraction child, the HTTP client, the Redis connections).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import httpx
import redis
from redis import Redis

from relay.config import Settings
from relay.crypto import Encryptor
from relay.delivery.engine import Engine
from relay.delivery.ssrf import TargetPolicy, make_client
from relay.delivery.transport import USER_AGENT
from relay.redis.clients import RedisTarget, sync_client
from relay.runtime.background import Background
from relay.runtime.sandbox import ExtractorHost, SandboxConfig
from relay.state.blobs import BlobStore
from relay.state.claims import Store
from relay.state.event_feed import EventLog
from relay.state.metrics import Metrics
from relay.state.retention import Retention
from relay.state.signing_material import SigningKeys
from relay.state.webhooks import WebhookStore
from relay.timefmt import now_ms


@dataclass
class WorkerContext:
    settings: Settings
    # ms since the epoch, for the stores and the signing keys; tests pass a clock they move.
    clock: Callable[[], int] = now_ms
    # What the context started and must end (made on first use, by the properties below).
    _engine: Engine | None = field(default=None, init=False, repr=False)
    _extraction: ExtractorHost | None = field(default=None, init=False, repr=False)
    _background: Background | None = field(default=None, init=False, repr=False)
    _closers: list[Callable[[], object]] = field(default_factory=list, init=False, repr=False)

    @cached_property
    def redis(self) -> redis.Redis:
        client = sync_client(RedisTarget.from_settings(self.settings))
        self._closers.append(client.close)
        return client

    @cached_property
    def queue_redis(self) -> Redis:
        """RQ's Redis: the wake-up markers and the jobs (``RELAY_QUEUE_REDIS_URL``; the
        state's Redis when that is empty)."""
        target = RedisTarget.queues_from_settings(self.settings)
        if target == RedisTarget.from_settings(self.settings):
            return self.redis
        client = sync_client(target)
        self._closers.append(client.close)
        return client

    @cached_property
    def blobs(self) -> BlobStore:
        """Where uploaded bytes are (RELAY_BLOB_URL): S3's client is made here, once."""
        blobs = BlobStore.from_settings(self.settings)
        self._closers.append(blobs.close)
        return blobs

    @cached_property
    def store(self) -> Store:
        return Store(
            self.redis,
            self.blobs,
            self.clock,
            keep_sources=self.settings.keep_sources,
        )

    @cached_property
    def webhooks(self) -> WebhookStore:
        return WebhookStore(
            self.redis,
            self.clock,
            max_attempts=self.settings.max_stored_attempts,
            disable_after_ms=round(self.settings.disable_after * 1000),
            document_events_wait_ms=round(self.settings.document_events_wait * 1000),
        )

    @cached_property
    def events(self) -> EventLog:
        return EventLog(self.redis, round(self.settings.retention * 1000), self.clock)

    @cached_property
    def retention(self) -> Retention:
        return Retention(
            self.redis,
            self.blobs,
            retention_ms=int(self.settings.retention * 1000),
        )

    @cached_property
    def metrics(self) -> Metrics:
        return Metrics()

    @cached_property
    def policy(self) -> TargetPolicy:
        return TargetPolicy.from_settings(self.settings)

    @cached_property
    def http(self) -> httpx.Client:
        """One client per process: its SSL context costs ~25 ms and its pool is reused."""
        client = make_client(
            self.policy,
            self.settings.delivery_timeout,
            max_connections=self.settings.delivery_concurrency * 2,
            user_agent=USER_AGENT,
        )
        self._closers.append(client.close)
        return client

    @cached_property
    def signing(self) -> SigningKeys:
        return SigningKeys(Encryptor.from_setting(self.settings.encryption_key), self.clock)

    @property
    def engine(self) -> Engine:
        """The delivery engine of this process, started on first use."""
        if self._engine is None:
            self._engine = Engine(self)
            self._engine.start()
        return self._engine

    @property
    def extraction(self) -> ExtractorHost:
        """The bounded child that runs this process's extractor (``relay.runtime.sandbox``);
        replaced when its document is moved to the background (:meth:`hand_over_extraction`)."""
        if self._extraction is None:
            self._extraction = ExtractorHost(sandbox_config(self.settings))
        return self._extraction

    def hand_over_extraction(self) -> None:
        """The current extraction child now belongs to the background (which closes it when
        its document ends); the next document takes a fresh one."""
        self._extraction = None

    @cached_property
    def stopping(self) -> threading.Event:
        """Set when the process is asked to stop (``relay worker``'s warm shutdown): a job
        waiting for work (``relay.runtime.processing.linger_for_wakeups``) ends instead."""
        return threading.Event()

    @property
    def background(self) -> Background:
        """The documents this process extracts in the background (``relay.runtime.processing``)."""
        if self._background is None:
            self._background = Background(self.settings.background_extractions)
        return self._background

    def close(self, *, send_due: bool = False) -> None:
        """End what this context started, once, in order: the documents in the background
        (each within ``RELAY_EXTRACT_TIMEOUT``), then the delivery engine's attempts in
        flight (each within ``RELAY_DELIVERY_TIMEOUT``; with ``send_due``, as for
        ``relay worker --burst``, first what is due now), the extraction child, the HTTP
        client and the Redis connections."""
        self.stopping.set()
        if self._background is not None:
            self._background.join(self.settings.extract_timeout + 5)
        if self._engine is not None:
            engine, self._engine = self._engine, None
            limit = time.monotonic() + self.settings.delivery_timeout * 4 + 5
            while send_due and time.monotonic() < limit:
                if engine.idle() and not self.webhooks.due_shards():
                    break
                time.sleep(0.05)
            engine.close(timeout=self.settings.delivery_timeout + 1)
        if self._extraction is not None:
            self._extraction.close(wait=0)  # nothing extracts any more: no need to wait
            self._extraction = None
        # The last made first: the HTTP client before the connections, on a thread of their
        # own that the stop does not wait for: a connection another thread still holds (RQ's
        # listener) must not hold the process, whose exit closes what is left.
        closers, self._closers = self._closers[::-1], []
        if closers:
            threading.Thread(
                target=lambda: [close() for close in closers], name="context-close", daemon=True
            ).start()


def sandbox_config(settings: Settings) -> SandboxConfig:
    """The extraction child's bounds from the settings (relay.extract knows no settings)."""
    return SandboxConfig(
        extractor=settings.extractor,
        timeout=settings.extract_timeout,
        memory=settings.extract_memory,
        max_result_bytes=settings.max_result_bytes,
        max_depth=settings.extract_max_depth,
        max_image_pixels=settings.max_image_pixels,
        max_pages=settings.max_pages,
        max_cells=settings.extract_max_cells,
        max_unzipped_bytes=settings.extract_max_unzipped_bytes,
        max_zip_entries=settings.extract_max_zip_entries,
        page_seconds=settings.extract_page_seconds,
        wall_factor=settings.extract_wall_factor,
        ocr_provider=settings.ocr_provider,
    )
