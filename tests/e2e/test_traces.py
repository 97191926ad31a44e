"""End to end: OpenTelemetry traces from real API, worker and detector processes, collected by
a real OTLP/HTTP receiver, and the ``traceparent`` a real webhook receiver gets
(``relay.tracing``; docs/deploy.md, "Tracing")."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
import redis

from relay.devtools.processes import Stack
from relay.devtools.sample_documents import pdf, table_ops
from relay.redis import keyspace
from tests.e2e.client import Api
from tests.support.helpers import wait_until
from tests.support.otlp import OtlpReceiver, Span
from tests.support.receiver import Receiver

CSV = b"sku,qty\nA-1,2\nB-7,5\n"
UPLOAD = "POST /api/v1/documents"
PROCESS = "POST /api/v1/batches/{name}/process"


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


def start(stack: Stack, **otel: str) -> Api:
    stack.env.update(otel)
    stack.api()
    stack.worker()
    stack.detector()
    return Api(stack.api_url, stack.create_key("acme"))


def one(spans: list[Span], name: str, **attributes: object) -> Span:
    found = [
        s
        for s in spans
        if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, (name, attributes, [(s.name, s.attributes) for s in spans])
    return found[0]


def traceparent_of(received_headers: dict[str, str]) -> tuple[str, str, str]:
    version, trace_id, span_id, flags = received_headers["traceparent"].split("-")
    assert version == "00" and len(trace_id) == 32 and len(span_id) == 16
    return trace_id, span_id, flags


def test_one_trace_follows_a_document_from_the_clients_upload_to_the_callback(
    stack: Stack, otlp: OtlpReceiver, receiver: Receiver
) -> None:
    """A client that sends its ``traceparent`` on the upload and the process call gets one
    trace: upload, process, each document's extraction (its pages counted), the completion
    and the delivery attempt, whose context the webhook request carries."""
    api = start(
        stack,
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    trace_id = secrets.token_hex(16)
    uploaded_by, processed_by = secrets.token_hex(8), secrets.token_hex(8)
    api.http.headers["traceparent"] = f"00-{trace_id}-{uploaded_by}-01"
    two_pages = pdf([table_ops([["sku", "qty"], ["A-1", "2"]]), table_ops([["sku"], ["B-7"]])])
    csv_doc = api.upload("b1", CSV)
    pdf_doc = api.upload("b1", two_pages, "scan.pdf")
    assert api.register("b1", receiver.url()).status_code == 201
    api.http.headers["traceparent"] = f"00-{trace_id}-{processed_by}-01"
    api.process("b1")
    [delivered] = wait_until(receiver.received, 30, message="no delivery arrived")
    header_trace, header_span, flags = traceparent_of(delivered.headers)
    assert (header_trace, flags) == (trace_id, "01")

    attempt = wait_until(
        lambda: otlp.spans(lambda s: s.span_id == header_span),
        15,
        message="the attempt's span was not exported",
    )[0]
    wait_until(lambda: len(otlp.spans(lambda s: s.trace_id == trace_id)) >= 7, 15)
    spans = otlp.spans(lambda s: s.trace_id == trace_id)

    uploads = [one(spans, UPLOAD, **{"relay.document.id": d["id"]}) for d in (csv_doc, pdf_doc)]
    for u in uploads:
        assert u.kind == "server" and u.parent_id == uploaded_by
        assert u.attributes["http.response.status_code"] == 201
        assert u.attributes["relay.batch"] == "b1" and u.resource["relay.process"] == "api"
    process = one(spans, PROCESS)
    assert process.kind == "server" and process.parent_id == processed_by
    assert process.attributes["http.response.status_code"] == 202
    assert process.attributes["relay.handed"] == 2

    for doc, upload in zip((csv_doc, pdf_doc), uploads, strict=True):
        extract = one(spans, "relay.extract", **{"relay.document.id": doc["id"]})
        assert extract.kind == "consumer" and extract.resource["relay.process"] == "worker"
        assert extract.parent_id == upload.span_id  # the document's own upload
        assert (trace_id, process.span_id) in extract.links  # handed out by this call
        assert extract.attributes["relay.document.status"] == "succeeded"
        assert extract.start_ns >= upload.end_ns
    pdf_extract = one(spans, "relay.extract", **{"relay.document.id": pdf_doc["id"]})
    assert pdf_extract.attributes["relay.document.pages"] == 2

    completed = one(spans, "relay.batch.completed")
    assert completed.parent_id == process.span_id
    assert completed.resource["relay.process"] == "detector"
    assert attempt.trace_id == trace_id and attempt.parent_id == completed.span_id
    assert attempt.kind == "client" and attempt.name == "POST" and not attempt.failed
    assert attempt.attributes["http.response.status_code"] == 200
    assert attempt.attributes["relay.delivery.outcome"] == "succeeded"
    assert attempt.attributes["relay.delivery.id"] == delivered.headers["webhook-id"]
    assert attempt.attributes["server.address"] == "127.0.0.1"
    assert attempt.resource["relay.process"] == "worker"


def test_without_a_client_traceparent_the_batch_has_one_trace_and_spans_flush_at_stop(
    stack: Stack, otlp: OtlpReceiver, receiver: Receiver
) -> None:
    """No ``traceparent`` from the client: the batch's first upload starts the trace, the
    process call joins it, its delivery continues it; a later upload is a trace of its own,
    whose extraction links to the process call. Nothing is exported before the processes
    stop (a schedule delay of ten minutes): what arrives was flushed at shutdown."""
    api = start(
        stack,
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="600000",
        OTEL_SERVICE_NAME="relay-test",
    )
    first = api.upload("b2", CSV)
    second = api.upload("b2", CSV)
    assert api.register("b2", receiver.url()).status_code == 201
    api.process("b2")
    [delivered] = wait_until(receiver.received, 30, message="no delivery arrived")
    header_trace, header_span, _ = traceparent_of(delivered.headers)
    assert otlp.posts == 0  # nothing exported yet: all of it waits in the processes

    stack.close()  # SIGTERM: each process exports what it holds before it exits
    spans = otlp.spans()
    assert {s.resource["service.name"] for s in spans} == {"relay-test"}
    u1 = one(spans, UPLOAD, **{"relay.document.id": first["id"]})
    u2 = one(spans, UPLOAD, **{"relay.document.id": second["id"]})
    assert u1.parent_id == "" and u2.parent_id == "" and u1.trace_id != u2.trace_id
    process = one(spans, PROCESS)
    assert (process.trace_id, process.parent_id) == (u1.trace_id, u1.span_id)
    e1 = one(spans, "relay.extract", **{"relay.document.id": first["id"]})
    e2 = one(spans, "relay.extract", **{"relay.document.id": second["id"]})
    assert (e1.trace_id, e1.parent_id) == (u1.trace_id, u1.span_id)
    assert (e2.trace_id, e2.parent_id) == (u2.trace_id, u2.span_id)
    assert (process.trace_id, process.span_id) in e2.links
    completed = one(spans, "relay.batch.completed")
    assert (completed.trace_id, completed.parent_id) == (u1.trace_id, process.span_id)
    attempt = one(spans, "POST")
    assert (attempt.trace_id, attempt.span_id) == (header_trace, header_span)
    assert header_trace == u1.trace_id and attempt.parent_id == completed.span_id


def test_tracing_off_sends_no_traceparent_and_keeps_no_context(
    stack: Stack, receiver: Receiver
) -> None:
    """No endpoint: other OTEL_* variables alone turn nothing on; the webhook request has no
    ``traceparent`` (even when the client sent one), and nothing is kept in Redis for it."""
    api = start(stack, OTEL_SERVICE_NAME="relay-off", OTEL_BSP_SCHEDULE_DELAY="50")
    api.http.headers["traceparent"] = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
    doc = api.upload("b3", CSV)
    assert api.register("b3", receiver.url()).status_code == 201
    api.process("b3")
    [delivered] = wait_until(receiver.received, 30, message="no delivery arrived")
    assert "traceparent" not in delivered.headers
    assert "webhook-signature" in delivered.headers
    client = redis.Redis.from_url(stack.redis_url)
    try:
        shard = keyspace.shard_of_id("doc", doc["id"])
        assert shard is not None
        assert client.hget(keyspace.doc(shard, doc["id"]), "trace") is None
        ref_shard = keyspace.shard_for_batch("acme", "b3")
        assert client.hget(keyspace.batch(ref_shard, "acme", "b3"), "trace") is None
        delivery_id = delivered.headers["webhook-id"]
        assert client.hget(keyspace.delivery(ref_shard, delivery_id), "trace") is None
        assert client.hexists(keyspace.delivery(ref_shard, delivery_id), "body")
    finally:
        client.close()
    assert "tracing on" not in stack.logs()
