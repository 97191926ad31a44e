"""The API process's resources: built once by the app's lifespan, closed by it."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from relay.api.inflight import AccountInFlight
from relay.api.page_images import PageRenderer
from relay.api.resources import ApiResources
from relay.api.throttles import Limits
from relay.config import Settings
from relay.delivery.addresses import TargetPolicy
from relay.state.api_keys import KeyCache
from relay.state.event_feed import AsyncEventLog, FeedWaiters
from relay.state.store import AsyncStore
from relay.state.webhooks import AsyncWebhookStore

STATE_KEY = "relay"


class ExportSlots:
    """The exports this process builds at once (``RELAY_EXPORT_CONCURRENCY``): each builds
    in a thread and takes a core meanwhile. Taken and given back on the event loop only."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.busy = 0

    def take(self) -> bool:
        """Take a slot; False when all are taken."""
        if self.busy >= self.size:
            return False
        self.busy += 1
        return True

    def refunds(self) -> None:
        self.busy -= 1


@dataclass
class AppState:
    """Per-process resources of the API: the Redis side (:class:`ApiResources`) and what the
    process keeps in memory. Built once by :meth:`open` (the app's lifespan), closed by it."""

    settings: Settings
    resources: ApiResources  # everything the routes ask of Redis (relay.api.resources)
    key_cache: KeyCache
    limits: Limits  # per-account write rates, bad keys per client address
    exports: ExportSlots  # the exports being built (relay.api.exports)
    inflight: AccountInFlight  # each account's requests in flight here, capped
    pages: PageRenderer  # page images, rendered in bounded children

    @classmethod
    def open(cls, settings: Settings, inflight: AccountInFlight) -> AppState:
        resources = ApiResources.open(settings)
        return cls(
            settings,
            resources,
            KeyCache(),
            Limits(resources),
            ExportSlots(settings.export_concurrency),
            inflight,
            PageRenderer.from_settings(settings),
        )

    # The resources' parts the routes use most, by their plain names.
    @property
    def store(self) -> AsyncStore:
        return self.resources.store

    @property
    def webhooks(self) -> AsyncWebhookStore:
        return self.resources.webhooks

    @property
    def policy(self) -> TargetPolicy:
        return self.resources.policy

    @property
    def events(self) -> AsyncEventLog:
        return self.resources.events

    @property
    def waiters(self) -> FeedWaiters:
        return self.resources.waiters


def state(request: Request) -> AppState:
    """The app's state (set by the lifespan; a RuntimeError when the lifespan never ran)."""
    st = getattr(request.app.state, STATE_KEY, None)
    if not isinstance(st, AppState):
        raise RuntimeError("relay app state missing: was the app started with its lifespan?")
    return st
