"""A real OTLP/HTTP trace receiver on 127.0.0.1: ``POST /v1/traces`` with a protobuf
``ExportTraceServiceRequest`` (gzip or not), decoded with ``opentelemetry-proto``; every span
kept as a :class:`Span` with its resource's attributes."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto
from opentelemetry.proto.trace.v1.trace_pb2 import Status

_SCALARS = ("string_value", "bool_value", "int_value", "double_value")


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind in _SCALARS else None


def _attributes(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kv: KeyValue
    for kv in kvs:
        out[kv.key] = _value(kv.value)
    return out


_KINDS = {
    SpanProto.SPAN_KIND_INTERNAL: "internal",
    SpanProto.SPAN_KIND_SERVER: "server",
    SpanProto.SPAN_KIND_CLIENT: "client",
    SpanProto.SPAN_KIND_PRODUCER: "producer",
    SpanProto.SPAN_KIND_CONSUMER: "consumer",
}


@dataclass(frozen=True)
class Span:
    name: str
    kind: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_id: str  # '' for a root
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    links: list[tuple[str, str]]  # (trace id, span id)
    failed: bool
    resource: dict[str, Any]


class OtlpReceiver:
    """Collects spans; :meth:`spans` returns what arrived so far."""

    def __init__(self) -> None:
        self._spans: list[Span] = []
        self.posts = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                if self.headers.get("content-encoding", "") == "gzip":
                    body = gzip.decompress(body)
                ok = self.path == "/v1/traces"
                if ok:
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    receiver._add(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if ok else 404)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _add(self, request: ExportTraceServiceRequest) -> None:
        found: list[Span] = []
        for rs in request.resource_spans:
            resource = _attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    found.append(
                        Span(
                            name=s.name,
                            kind=_KINDS.get(s.kind, "unspecified"),
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            attributes=_attributes(s.attributes),
                            links=[(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                            failed=s.status.code == Status.STATUS_CODE_ERROR,
                            resource=resource,
                        )
                    )
        with self._lock:
            self.posts += 1
            self._spans.extend(found)

    @property
    def endpoint(self) -> str:
        """The value of ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter adds ``/v1/traces``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def spans(self, where: Callable[[Span], bool] = lambda s: True) -> list[Span]:
        with self._lock:
            return [s for s in self._spans if where(s)]

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
