"""relay.tracing: when tracing is on, what it costs off, and the API's server spans against a
real OTLP receiver (hostile ``traceparent`` headers included). The whole path across the
processes is tests/e2e/test_traces.py."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from relay import tracing
from relay.app import create_app
from relay.config import export_otel, load_settings
from relay.crypto import SigningMaterial
from relay.delivery.signing import build_headers
from relay.exceptions import ConfigError
from relay.redis import keyspace
from relay.state.api_keys import create_key
from tests.support.api_fixtures import CSV, V1, make_settings, serve
from tests.support.otlp import OtlpReceiver, Span

ROOT = Path(__file__).resolve().parent.parent
ENDPOINT = "http://127.0.0.1:4318"


@pytest.mark.parametrize(
    ("otel", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "relay", "OTEL_BSP_SCHEDULE_DELAY": "10"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT + "/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "otlp"}, True),
    ],
)
def test_only_an_otlp_endpoint_turns_tracing_on(otel: dict[str, str], on: bool) -> None:
    assert load_settings(otel, dotenv=None).tracing is on


@pytest.mark.parametrize(
    ("otel", "named"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "grpc://h:4317"}, "TRACES_ENDPOINT"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "TRACES_PROTOCOL"),
    ],
)
def test_what_relay_cannot_export_with_is_refused_at_start(
    otel: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        load_settings({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, **otel}, dotenv=None)


def test_the_traces_protocol_decides_over_the_general_one() -> None:
    s = load_settings(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",  # for metrics or logs, say
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        },
        dotenv=None,
    )
    assert s.tracing


def test_otel_variables_come_from_dotenv_and_env_wins_and_never_print(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://from-dotenv:4318\n"
        "OTEL_EXPORTER_OTLP_HEADERS=api-key=hush-hush\n"
        "OTEL_BSP_SCHEDULE_DELAY=250\n"
    )
    s = load_settings({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, dotenv=dotenv)
    assert s.otel_value("OTEL_EXPORTER_OTLP_ENDPOINT") == ENDPOINT
    assert s.otel_value("OTEL_BSP_SCHEDULE_DELAY") == "250"
    assert "hush-hush" not in repr(s) and "hush-hush" not in str(s)
    assert load_settings(s.to_env(), dotenv=None) == s  # children get them too
    # The SDK reads the environment only: .env's values go there, the environment's stay.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ENDPOINT)
    for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_BSP_SCHEDULE_DELAY"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    export_otel(load_settings(dotenv=dotenv))
    import os

    assert os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] == ENDPOINT
    assert os.environ["OTEL_BSP_SCHEDULE_DELAY"] == "250"


def test_off_no_tracer_provider_exporter_or_propagator_is_loaded() -> None:
    """Every process's modules loaded and set up with no endpoint: relay loads none of the
    SDK's tracing, no exporter (nor its HTTP client) and no propagator. (redis-py 8 imports
    the SDK's metrics package whenever it is installed, for an observability it leaves off
    unless asked: that import is redis-py's, not a tracer.)"""
    code = (
        "import sys\n"
        "from relay.config import load_settings\n"
        "from relay import tracing\n"
        "import relay.app, relay.cli.commands, relay.runtime.processing\n"
        "import relay.runtime.detector, relay.delivery.send, relay.delivery.engine\n"
        "assert not tracing.setup(load_settings({}, dotenv=None), 'worker')\n"
        "loaded = [m for m in sys.modules if m.startswith(('opentelemetry.sdk.trace',\n"
        "    'opentelemetry.exporter', 'opentelemetry.trace.propagation.', 'requests'))]\n"
        "trace = sys.modules.get('opentelemetry.trace')\n"
        "print(sorted(loaded), getattr(trace, '_TRACER_PROVIDER', None))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] None"


def test_off_every_call_is_a_no_op_and_no_header_is_sent() -> None:
    assert not tracing.active()
    with tracing.span("relay.extract", parent="00-" + "1" * 32 + "-" + "2" * 16 + "-01"):
        assert tracing.traceparent() == ""
        tracing.annotate({"relay.document.pages": 3})
        tracing.fail("nothing to fail")
    assert tracing.span("x") is tracing.span("y")  # one shared no-op, nothing made per call
    assert tracing.recorded("relay.batch.completed", parent="", start_ms=1) == ""
    material = SigningMaterial(b"k" * 32, b"s" * 32, 0)
    headers = build_headers("msg_1", 1_700_000_000, b"{}", [material], "relay/test")
    assert "traceparent" not in headers
    traced = build_headers("msg_1", 1_700_000_000, b"{}", [material], "relay/test", "00-a-b-01")
    assert traced["traceparent"] == "00-a-b-01"
    # The signature covers the id, timestamp and body only: the header changes nothing.
    assert traced["webhook-signature"] == headers["webhook-signature"]


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
HOSTILE = [
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # all-zero trace id
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # all-zero span id
    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # a forbidden version
    "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",  # upper case
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",  # no flags
    "x" * 8000,
    "00-" + "\u00e9" * 32 + "-b7ad6b7169203331-01",
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",  # fields only in later
]


def test_the_api_traces_uploads_and_process_calls_and_shrugs_off_hostile_traceparents(
    redis_url: str,
    otlp: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """In one API process with tracing on: an upload with a valid ``traceparent`` is its
    child, and its context is what the document keeps; malformed ones are ignored (a new
    trace, never an error, not even a log line); a refused request is a span with its 4xx
    status, not a failure; spans still queued are exported when the app stops."""
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "600000"}
    for name, value in otel.items():
        monkeypatch.setenv(name, value)  # restored after the test: setup() reads them there
    settings = make_settings(redis_url, otel=tuple(sorted(otel.items())))
    assert tracing.setup(settings, "api")
    client = redis.Redis.from_url(redis_url)
    try:
        key = create_key(client, "acme")
        auth = {"authorization": f"Bearer {key}"}
        files = {"file": ("items.csv", CSV, "text/csv")}
        with serve(create_app(settings)) as base, httpx.Client(base_url=base) as http:
            traced = http.post(
                f"{V1}/documents",
                headers={**auth, "traceparent": VALID, "tracestate": "vendor=1"},
                data={"batch_name": "b1"},
                files=files,
            )
            assert traced.status_code == 201, traced.text
            hostile = []
            for header in HOSTILE:
                r = http.post(
                    f"{V1}/documents",
                    headers=[
                        (b"authorization", f"Bearer {key}".encode()),
                        (b"traceparent", header.encode()),
                    ],
                    data={"batch_name": "b1"},
                    files=files,
                )
                assert r.status_code == 201, (header, r.text)
                hostile.append(r.json()["id"])
            refused = http.post(
                f"{V1}/documents", headers={"traceparent": VALID}, data={}, files=files
            )
            assert refused.status_code == 401
            bad = http.post(f"{V1}/batches/b1/process", headers=auth, json={"fields": 3})
            assert bad.status_code == 422
            assert otlp.posts == 0
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
        assert not tracing.active()  # the app's stop flushed and shut tracing down
        spans = otlp.spans()
        doc_id = traced.json()["id"]
        upload = _one(spans, doc_id)
        assert upload.trace_id == VALID.split("-")[1] and upload.parent_id == VALID.split("-")[2]
        assert upload.kind == "server" and upload.resource["service.name"] == "relay"
        kept = client.hget(keyspace.doc(keyspace.shard_of_id("doc", doc_id) or 0, doc_id), "trace")
        assert kept == f"00-{upload.trace_id}-{upload.span_id}-01".encode()
        for doc in hostile:
            span = _one(spans, doc)
            assert span.parent_id == "" and span.trace_id != upload.trace_id
            assert span.attributes["http.response.status_code"] == 201
        [unauthorized] = [s for s in spans if s.attributes["http.response.status_code"] == 401]
        assert unauthorized.parent_id == VALID.split("-")[2] and not unauthorized.failed
        [invalid] = [s for s in spans if s.name == "POST /api/v1/batches/{name}/process"]
        assert invalid.attributes["http.response.status_code"] == 422 and not invalid.failed
    finally:
        tracing.shutdown()
        client.close()


def _one(spans: list[Span], doc_id: str) -> Span:
    [found] = [s for s in spans if s.attributes.get("relay.document.id") == doc_id]
    assert found.name == "POST /api/v1/documents"
    return found
