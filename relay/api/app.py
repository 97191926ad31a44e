"""The Starlette application: routes, error handlers and the per-process resources.

``create_app(settings)`` builds everything; the lifespan opens the process's
:class:`relay.api.resources.ApiResources` (the Redis clients: an asyncio one for the handlers,
a synchronous one for RQ enqueueing in a thread, the status lane) and closes it on shutdown.
Starting does not need Redis to be up: the clients connect on first use, the API answers 503
while Redis is unreachable and recovers by itself when it is back.

Three middlewares are installed: the release of a request's place among its account's
requests in flight once it is answered (``relay.api.inflight``, ``RELAY_ACCOUNT_MAX_INFLIGHT``;
the place is taken where the account is known, ``relay.api.access``), each request's deadline
on its Redis waits (``relay.redis.deadline``, ``RELAY_REQUEST_DEADLINE``), then the status
endpoints' fast path (``relay.api.fast_path``): the polled GETs are served before the router
walks the routes; everything else goes through as usual.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from relay import tracing
from relay.api import (
    batches,
    deliveries,
    documents,
    events,
    exports,
    health,
    openapi,
    pages,
    reference,
    webhooks,
)
from relay.api.errors import exception_handlers
from relay.api.fast_path import StatusFastPath
from relay.api.inflight import AccountInFlight, ReleaseInFlight
from relay.api.state import STATE_KEY, AppState
from relay.config import Settings
from relay.redis.deadline import RequestDeadline
from relay.redis.shards import Follower

API_PREFIX = "/api/v1"


def api_routes() -> list[BaseRoute]:
    """The routes under ``/api/v1`` (paths relative to it)."""
    return [
        # The polled status endpoints first: Starlette tries routes in order.
        Route("/batches/{name}", batches.get_batch, methods=["GET"]),
        Route("/documents/{id}", documents.get_document, methods=["GET"]),
        Route("/batches/{name}/results", batches.batch_results, methods=["GET"]),
        Route("/documents/{id}/tables/{n}", exports.get_table, methods=["GET"]),
        Route("/batches/{name}/export", exports.export_batch, methods=["GET"]),
        Route("/documents/{id}/pages/{n}", pages.get_page, methods=["GET"]),
        Route("/documents", documents.upload_document, methods=["POST"]),
        Route("/batches", batches.list_batches, methods=["GET"]),
        Route("/batches/{name}", batches.delete_batch, methods=["DELETE"]),
        Route("/batches/{name}/process", batches.process_batch, methods=["POST"]),
        Route("/openapi.json", openapi.openapi_json, methods=["GET"]),
        *webhooks.routes,
        *deliveries.routes,
        *events.routes,
    ]


Endpoint = Callable[[Request], Awaitable[Response]]


def _dispatcher(handlers: dict[str, Endpoint]) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        return await handlers[request.method](request)

    return endpoint


def one_route_per_path(routes: Iterable[BaseRoute], prefix: str = "") -> list[BaseRoute]:
    """``routes`` with the routes of one path merged into one, dispatching on the method.

    Starlette answers a method no route of a path serves with the ``Allow`` of the first
    route whose path matched: with one route per method, ``DELETE`` would be missing from a
    405 of ``/batches/{name}``. Merged, the 405 names every method of the path. A path keeps
    the position of its first route (the order Starlette tries them in).
    """
    handlers: dict[str, dict[str, Endpoint]] = {}
    for route in routes:
        if not isinstance(route, Route):  # pragma: no cover - the API has plain routes only
            raise TypeError(f"unexpected route {route!r}")
        methods = handlers.setdefault(prefix + route.path, {})
        for method in route.methods or {"GET", "HEAD"}:
            if method in methods:
                raise ValueError(f"two routes for {method} {prefix}{route.path}")
            methods[method] = route.endpoint
    return [
        Route(path, _dispatcher(methods), methods=sorted(methods))
        for path, methods in handlers.items()
    ]


def create_app(settings: Settings, *, extra_routes: Sequence[BaseRoute] = ()) -> Starlette:
    """The API for ``settings``, with ``extra_routes`` served beside it on the same state
    (``relay.app`` adds the console's); serve it with uvicorn (``relay serve``)."""
    inflight = AccountInFlight(settings.account_max_inflight)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        shards = Follower(settings).start()  # raises ShardCountError: RELAY_SHARDS lowered
        st = AppState.open(settings, inflight)
        resources = st.resources
        listener = asyncio.create_task(resources.waiters.run(), name="relay-event-listener")
        follower = resources.follow_primary()
        refunds = asyncio.create_task(resources.store.refunds.every(), name="relay-refunds")
        setattr(app.state, STATE_KEY, st)
        try:
            yield
        finally:
            tasks = {task for task in (listener, follower, refunds) if task is not None}
            for task in tasks:
                task.cancel()
            # Bounded: a task that does not end on its cancellation cannot hold the
            # shutdown (and the process) for good.
            await asyncio.wait(tasks, timeout=5)
            shards.stop.set()
            await resources.store.refunds.now()
            await resources.close()
            st.pages.close()
            # The spans still queued, exported now: once it has served, uvicorn raises the
            # stop signal again, which ends the process before `relay serve` could.
            await asyncio.to_thread(tracing.shutdown)

    routes: list[BaseRoute] = [
        # Full paths rather than a Mount: a Mount matches its rest with ``.*``, which stops at
        # a newline, so an id holding one would miss the route (and its JSON 404 with the
        # rate-limit headers); it also spares the status endpoints a level of routing.
        *one_route_per_path(api_routes(), API_PREFIX),
        *one_route_per_path(
            [
                Route("/openapi.json", openapi.openapi_json, methods=["GET"]),
                Route("/docs", reference.reference, methods=["GET"]),
                Route("/healthz", health.healthz, methods=["GET"]),
                Route("/readyz", health.readyz, methods=["GET"]),
                Route("/metrics", health.metrics, methods=["GET"]),
            ]
        ),
        *extra_routes,
    ]
    handlers = exception_handlers()
    fast_path = Middleware(
        StatusFastPath,
        prefix=API_PREFIX,
        batch=batches.get_batch,
        document=documents.get_document,
        handlers=handlers,
    )
    # Outermost: the fast path's Redis calls count against the request's deadline too, and a
    # request's place among its account's requests in flight lasts until it is answered.
    deadline = Middleware(RequestDeadline, seconds=settings.request_deadline)
    release = Middleware(ReleaseInFlight, inflight=inflight)
    app = Starlette(
        routes=routes,
        middleware=[release, deadline, fast_path],
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    # An API answers a stray trailing slash with a JSON 404, not a redirect.
    app.router.redirect_slashes = False
    return app
