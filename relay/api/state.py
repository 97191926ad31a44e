"""The API process's resources: built once by the app's lifespan, closed by it."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from relay.api.resources import ApiResources
from relay.api.throttles import Limits
from relay.config import Settings
from relay.delivery.addresses import TargetPolicy
from relay.state.api_keys import KeyCache
from relay.state.event_feed import AsyncEventLog, FeedWaiters
from relay.state.store import AsyncStore
from relay.state.webhooks import AsyncWebhookStore

STATE_KEY = "relay"


@dataclass
class AppState:
    """Per-process resources of the API (``relay.api.app.create_app`` builds them)."""

    settings: Settings
    resources: ApiResources  # everything the routes ask of Redis (relay.api.resources)
    store: AsyncStore  # the edge's stores, as the routes use them
    webhooks: AsyncWebhookStore
    policy: TargetPolicy  # callback URLs checked at registration
    key_cache: KeyCache
    limits: Limits  # per-account write rates, bad keys per client address
    events: AsyncEventLog  # the event feeds (GET /events)
    waiters: FeedWaiters  # the long polls of this process and their one listener


def state(request: Request) -> AppState:
    """The app's state (set by the lifespan; a RuntimeError when the lifespan never ran)."""
    st = getattr(request.app.state, STATE_KEY, None)
    if not isinstance(st, AppState):
        raise RuntimeError("relay app state missing: was the app started with its lifespan?")
    return st
