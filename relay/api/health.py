"""``/healthz``, ``/readyz`` and ``/metrics`` (no authentication).

``/metrics`` renders a small registry of gauges in the Prometheus text format, followed by the
counters and histograms that workers flush to Redis (``relay.state.metrics``). Each gauge costs one
pipelined round trip. A gauge is an async function of the app state returning samples; add one with
:func:`gauge`. A gauge that cannot reach Redis is left out of that scrape and ``relay_redis_up``
reads 0, so the scrape itself still succeeds while Redis is down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from relay.api.bodies import json_response
from relay.api.state import AppState, state
from relay.extract.ocr_models import ProviderChoice, probe_provider
from relay.redis.clients import UNREACHABLE
from relay.state import metrics as counters
from relay.timefmt import now_ms

# (labels, value) pairs of one gauge.
Samples = list[tuple[dict[str, str], float]]


@dataclass(frozen=True)
class Gauge:
    name: str
    help: str
    collect: Callable[[AppState], Awaitable[Samples]]


REGISTRY: list[Gauge] = []


def gauge(
    name: str, help: str
) -> Callable[[Callable[[AppState], Awaitable[Samples]]], Callable[[AppState], Awaitable[Samples]]]:
    """Register ``collect`` as the gauge ``name`` (decorator)."""

    def register(
        collect: Callable[[AppState], Awaitable[Samples]],
    ) -> Callable[[AppState], Awaitable[Samples]]:
        REGISTRY.append(Gauge(name, help, collect))
        return collect

    return register


@gauge("relay_up", "1 while the API process runs")
async def _up(st: AppState) -> Samples:
    return [({}, 1.0)]


@gauge("relay_queue_depth", "Jobs waiting in each RQ queue")
async def _queue_depth(st: AppState) -> Samples:
    depths = await st.resources.all_shards.queue_depths()
    return [({"queue": name}, float(n)) for name, n in depths.items()]


@gauge("relay_documents", "Documents waiting for a worker (queued, handed out) or processing")
async def _documents(st: AppState) -> Samples:
    # Terminal documents are counted as they finish (relay_documents_processed_total).
    queued, processing = await st.resources.all_shards.documents()
    return [({"status": "queued"}, float(queued)), ({"status": "processing"}, float(processing))]


@gauge("relay_deliveries_due", "Pending deliveries whose next attempt time has come")
async def _due(st: AppState) -> Samples:
    return [({}, float(await st.resources.all_shards.due(now_ms())))]


@gauge(
    "relay_oldest_due_delivery_age_seconds",
    "Seconds since the oldest due delivery (its next attempt time passed, not leased) came due",
)
async def _oldest_due(st: AppState) -> Samples:
    now = now_ms()
    oldest = await st.resources.all_shards.oldest_due(now)
    return [({}, max(0.0, (now - oldest) / 1000) if oldest is not None else 0.0)]


@gauge(
    "relay_outbox_backlog",
    "Batch completions in the outboxes not yet acknowledged by the detectors",
)
async def _outbox_backlog(st: AppState) -> Samples:
    return [({}, float(await st.resources.all_shards.outbox_backlog()))]


def _number(value: float) -> str:
    """Exact for integers of any size (``:g`` would print 1234567 as 1.23457e+06)."""
    return str(int(value)) if value.is_integer() else repr(value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _line(name: str, labels: dict[str, str], value: float) -> str:
    text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return f"{name}{{{text}}} {_number(value)}" if text else f"{name} {_number(value)}"


async def render_metrics(st: AppState) -> str:
    """The registry as Prometheus text (version 0.0.4)."""
    lines: list[str] = []
    redis_up = 1.0
    for g in REGISTRY:
        try:
            samples = await g.collect(st)
        except UNREACHABLE:
            redis_up = 0.0
            continue
        lines += [f"# HELP {g.name} {g.help}", f"# TYPE {g.name} gauge"]
        lines += [_line(g.name, labels, value) for labels, value in samples]
    try:
        lines.append(counters.render(await st.resources.all_shards.counters()).rstrip("\n"))
    except UNREACHABLE:
        redis_up = 0.0
    lines += [
        "# HELP relay_redis_up 1 when every gauge could read Redis in this scrape",
        "# TYPE relay_redis_up gauge",
        _line("relay_redis_up", {}, redis_up),
    ]
    return "\n".join(lines) + "\n"


async def healthz(request: Request) -> Response:
    """The process is up (no Redis access)."""
    return json_response({"status": "ok"})


# RELAY_OCR_PROVIDER as this process finds it, looked up once (a child Python for any
# provider but the CPU: relay.extract.ocr_models.probe_provider).
_providers: dict[str, ProviderChoice] = {}


async def ocr_provider(asked: str) -> ProviderChoice:
    if asked not in _providers:
        _providers[asked] = await asyncio.to_thread(probe_provider, asked)
    return _providers[asked]


async def readyz(request: Request) -> Response:
    """Redis answers PING (otherwise the 503 ``store_unavailable`` error); with the
    execution provider the OCR models run on (RELAY_OCR_PROVIDER, or the CPU it fell back
    to, and why)."""
    st = state(request)
    await st.resources.ping()
    choice = await ocr_provider(st.settings.ocr_provider)
    return json_response({"status": "ready", "ocr_provider": choice.as_json()})


async def metrics(request: Request) -> Response:
    return Response(
        await render_metrics(state(request)),
        media_type="text/plain; version=0.0.4; charset=utf-8",
    )
