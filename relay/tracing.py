"""OpenTelemetry traces: one trace follows a document from its upload to its callback.

Off unless an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; ``Settings.tracing``). Off, nothing of OpenTelemetry
is imported, no tracer provider is installed, every function here returns after reading one
module global, nothing is stored with a document and no ``traceparent`` header is sent. On,
:func:`setup` installs the SDK's tracer provider with a batching OTLP/HTTP exporter, configured
by the SDK's own ``OTEL_*`` variables (sampler, batch delays, headers, resource), and
:func:`shutdown` flushes what is queued when the process stops.

The spans, and how they hang together across processes (docs/deploy.md, "Tracing"):

- ``POST /api/v1/documents`` (server): a child of the client's ``traceparent`` when it sent
  one, else a new trace. Its context is stored with the document (``trace`` in the document's
  hash, by the upload's own script) and, when the upload creates the batch, as the batch's
  trace.
- ``POST /api/v1/batches/{name}/process`` (server): a child of the client's ``traceparent``,
  else of the batch's trace (the process call joins the trace of the upload that created the
  batch). Its context becomes the batch's trace when it hands documents out.
- ``relay.extract`` (consumer, in the worker): a child of the document's upload span, linked
  to the batch's trace when claimed (the process call that handed it out); the document's
  pages, outcome and error code as attributes.
- ``relay.batch.completed`` (in the detector): a child of the batch's trace, from the batch's
  completion to its delivery's creation; its context is stored with the delivery.
- ``POST`` (client, per delivery attempt): a child of its delivery's context; the webhook
  request carries this span's context as ``traceparent``.

A context travels between processes as the W3C ``traceparent`` text
(``00-<trace id>-<span id>-<flags>``), stored in Redis beside what it belongs to.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from relay.config import Settings, export_otel

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Tracer

log = logging.getLogger("relay.tracing")

SERVER, CLIENT, CONSUMER, INTERNAL = "server", "client", "consumer", "internal"
TRACEPARENT = "traceparent"

Attributes = Mapping[str, str | int | float | bool]

_tracer: Tracer | None = None  # None: tracing is off in this process
_provider: TracerProvider | None = None
_kinds: dict[str, SpanKind] = {}
_OFF: contextlib.nullcontext[None] = contextlib.nullcontext()


def active() -> bool:
    """Whether this process records spans (:func:`setup` found an endpoint)."""
    return _tracer is not None


def setup(settings: Settings, process: str) -> bool:
    """Install the SDK's tracer provider for this process when ``settings`` turn tracing on
    (``Settings.tracing``); ``process`` (api, worker, detector) becomes the resource's
    ``relay.process``. The resource's ``service.name`` is ``relay`` unless
    ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` names it. Returns whether it did."""
    global _tracer, _provider
    if not settings.tracing or _tracer is not None:
        return _tracer is not None
    export_otel(settings)  # the SDK reads its variables from the environment only
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import SpanKind

    from relay import __version__

    attributes: dict[str, str] = {"service.version": __version__, "relay.process": process}
    named = settings.otel_value("OTEL_SERVICE_NAME") or "service.name=" in settings.otel_value(
        "OTEL_RESOURCE_ATTRIBUTES"
    )
    if not named:
        attributes["service.name"] = "relay"
    # The sampler (OTEL_TRACES_SAMPLER, default parentbased_always_on), the batch processor
    # (OTEL_BSP_*) and the exporter (OTEL_EXPORTER_OTLP_*) read their variables themselves.
    # No shutdown at exit of its own: the commands call shutdown(), after their work.
    provider = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _kinds.update(
        {
            SERVER: SpanKind.SERVER,
            CLIENT: SpanKind.CLIENT,
            CONSUMER: SpanKind.CONSUMER,
            INTERNAL: SpanKind.INTERNAL,
        }
    )
    _provider = provider
    _tracer = provider.get_tracer("relay", __version__)
    log.info("tracing on: spans exported over OTLP/HTTP")
    return True


def shutdown() -> None:
    """Export the spans still queued (within ``OTEL_BSP_EXPORT_TIMEOUT``) and stop tracing in
    this process; nothing when tracing is off."""
    global _tracer, _provider
    provider, _tracer, _provider = _provider, None, None
    if provider is not None:
        provider.shutdown()


# -- contexts as text ---------------------------------------------------------------------

# W3C Trace Context, level 1: version-traceid-parentid-flags, lower-case hex; a later version
# may append fields. Parsed here rather than by the SDK's propagator, which logs a warning for
# some malformed headers: a client could fill the logs. The client's `tracestate` is not taken
# (relay keeps only the traceparent between its processes).
_TRACEPARENT_RE = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_MAX_TRACEPARENT = 512


def _parse(text: str) -> tuple[int, int, int] | None:
    """(trace id, span id, flags) of a well-formed ``traceparent``, else None."""
    if not text or len(text) > _MAX_TRACEPARENT:
        return None
    m = _TRACEPARENT_RE.fullmatch(text.strip())
    if m is None:
        return None
    version, trace_id, span_id, flags, rest = m.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return int(trace_id, 16), int(span_id, 16), int(flags, 16)


def _span_context(traceparent: str) -> SpanContext | None:
    parsed = _parse(traceparent)
    if parsed is None:
        return None
    from opentelemetry.trace import SpanContext, TraceFlags

    trace_id, span_id, flags = parsed
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags & 0x01))


def _parent(traceparent: str) -> Context | None:
    """The context of the span a ``traceparent`` names (None when empty or malformed)."""
    remote = _span_context(traceparent)
    if remote is None:
        return None
    from opentelemetry.trace import NonRecordingSpan, set_span_in_context

    return set_span_in_context(NonRecordingSpan(remote))


def _format(span: Span) -> str:
    c = span.get_span_context()
    if not c.is_valid:
        return ""
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"


def _links(traceparents: Iterable[str]) -> list[Link]:
    from opentelemetry.trace import Link

    contexts = (_span_context(text) for text in traceparents)
    return [Link(c) for c in contexts if c is not None]


def incoming(headers: Mapping[str, str]) -> str:
    """The request's ``traceparent`` when it is well formed, else ''."""
    text = headers.get(TRACEPARENT, "")
    return text.strip() if _parse(text) is not None else ""


# -- spans in a worker, a detector, a delivery attempt -------------------------------------


def span(
    name: str,
    *,
    parent: str = "",
    kind: str = INTERNAL,
    links: Iterable[str] = (),
    attributes: Attributes | None = None,
) -> contextlib.AbstractContextManager[None]:
    """A span around the block, current within it (:func:`traceparent`, :func:`annotate`
    see it): a child of ``parent`` (a ``traceparent``; a new trace when empty), linked to
    ``links``. An exception out of the block is recorded and marks it failed. Off: a shared
    no-op."""
    if _tracer is None:
        return _OFF
    return _span(_tracer, name, parent, kind, links, attributes)


@contextlib.contextmanager
def _span(
    tracer: Tracer,
    name: str,
    parent: str,
    kind: str,
    links: Iterable[str],
    attributes: Attributes | None,
) -> Iterator[None]:
    from opentelemetry.trace import use_span

    s = tracer.start_span(
        name,
        context=_parent(parent),
        kind=_kinds[kind],
        links=_links(links),
        attributes=attributes,
    )
    with use_span(s, end_on_exit=True):
        yield


def recorded(name: str, *, parent: str, start_ms: int, attributes: Attributes | None = None) -> str:
    """A span from ``start_ms`` (ms since the epoch) to now, ended at once: its
    ``traceparent`` ('' when off), for work that happened before it was seen (a batch's
    completion, found by the detector)."""
    if _tracer is None:
        return ""
    now_ns = time.time_ns()
    start_ns = min(start_ms * 1_000_000, now_ns) if start_ms > 0 else now_ns
    s = _tracer.start_span(
        name, context=_parent(parent), attributes=attributes, start_time=start_ns
    )
    s.end(now_ns)
    return _format(s)


def traceparent(fallback: str = "") -> str:
    """The current span's ``traceparent``: the API request's (begun now, a child of
    ``fallback`` when the client sent none: :class:`_Request`), or the span of the enclosing
    :func:`span` block; '' when off or outside any."""
    if _tracer is None:
        return ""
    request = _REQUEST.get()
    if request is not None:
        return _format(request.begin(fallback))
    from opentelemetry.trace import get_current_span

    return _format(get_current_span())


def annotate(attributes: Attributes) -> None:
    """Set attributes on the current span (as :func:`traceparent` finds it)."""
    if _tracer is None:
        return
    request = _REQUEST.get()
    if request is not None:
        target = request.begin()
    else:
        from opentelemetry.trace import get_current_span

        target = get_current_span()
    if target.is_recording():
        target.set_attributes(attributes)


def fail(description: str) -> None:
    """Mark the current span failed (an outcome that is a failure without an exception: a
    document that failed, an attempt the receiver refused)."""
    if _tracer is None:
        return
    from opentelemetry.trace import Status, StatusCode, get_current_span

    get_current_span().set_status(Status(StatusCode.ERROR, description))


# -- the API's server spans ----------------------------------------------------------------


class _Request:
    """The server span of one API request, begun when first needed: a handler may give the
    parent to use when the client sent no ``traceparent`` (the batch's trace, read from Redis
    once the request is authenticated), so the span starts at the request's arrival but is
    created later, with that start time."""

    __slots__ = ("attributes", "incoming", "name", "span", "start_ns", "tracer")

    def __init__(
        self, tracer: Tracer, name: str, incoming: str, attributes: dict[str, Any]
    ) -> None:
        self.tracer, self.name, self.incoming, self.attributes = tracer, name, incoming, attributes
        self.start_ns = time.time_ns()
        self.span: Span | None = None

    def begin(self, fallback: str = "") -> Span:
        if self.span is None:
            self.span = self.tracer.start_span(
                self.name,
                context=_parent(self.incoming or fallback),
                kind=_kinds[SERVER],
                attributes=self.attributes,
                start_time=self.start_ns,
            )
        return self.span


_REQUEST: contextvars.ContextVar[_Request | None] = contextvars.ContextVar(
    "relay_traced_request", default=None
)


def wants_parent() -> bool:
    """Whether the API request being served would take a parent from the handler: tracing
    is on, the request is traced, its span not yet begun, and the client sent no
    ``traceparent``. The handler reads the parent (a round trip) only then."""
    if _tracer is None:
        return False
    request = _REQUEST.get()
    return request is not None and request.span is None and not request.incoming


R = TypeVar("R")


def server(
    route: str, status_of: Callable[[BaseException], int]
) -> Callable[[Callable[[Any], Awaitable[R]]], Callable[[Any], Awaitable[R]]]:
    """Decorate an API handler (``request -> response``) so each request is a server span
    named ``POST <route>``: a child of the request's ``traceparent`` when well formed, with
    the response's status (``status_of`` maps an exception to the status it is answered
    with; 5xx marks the span failed). Off: the handler is called as it is."""
    method, _, path = route.partition(" ")

    def decorate(handler: Callable[[Any], Awaitable[R]]) -> Callable[[Any], Awaitable[R]]:
        @functools.wraps(handler)
        async def traced(request: Any) -> R:
            if _tracer is None:
                return await handler(request)
            attributes = {"http.request.method": method, "http.route": path}
            r = _Request(_tracer, route, incoming(request.headers), attributes)
            token = _REQUEST.set(r)
            status = 500
            try:
                response = await handler(request)
                status = int(getattr(response, "status_code", 200))
                return response
            except BaseException as exc:
                status = status_of(exc)
                if status >= 500:
                    r.begin().record_exception(exc)
                raise
            finally:
                _REQUEST.reset(token)
                _end_request(r.begin(), status)

        return traced

    return decorate


def _end_request(s: Span, status: int) -> None:
    from opentelemetry.trace import Status, StatusCode

    s.set_attribute("http.response.status_code", status)
    if status >= 500:
        s.set_status(Status(StatusCode.ERROR))
    s.end()
