"""``GET /metrics`` of a real API after a real scenario, read with prometheus_client's own
parser: every family with its type, histograms whole and in order, counters and gauges with
the values the scenario must have produced — the oldest due delivery's age (leased deliveries
not counted) and the outbox backlog included."""

from __future__ import annotations

import math
import re

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from relay.devtools.processes import Stack
from relay.redis import keyspace
from relay.state.metrics import ATTEMPT_BUCKETS, LAG_BUCKETS
from tests.e2e.client import Api
from tests.e2e.test_webhooks import settled
from tests.support.helpers import wait_until
from tests.support.receiver import Receiver, Reply

CSV = b"sku,qty\nA-1,2\nB-7,5\n"


def scrape(stack: Stack) -> tuple[str, dict[str, tuple[str, list[Sample]]]]:
    """The text and its families parsed: name -> (type, samples in file order)."""
    text = httpx.get(stack.api_url + "/metrics", timeout=5).text
    return text, {f.name: (f.type, list(f.samples)) for f in text_string_to_metric_families(text)}


def value(stack: Stack, family: str, sample: str | None = None, **labels: str) -> float:
    _, families = scrape(stack)
    (found,) = [
        s.value for s in families[family][1] if s.name == (sample or family) and s.labels == labels
    ]
    return found


def due_members(client: redis.Redis) -> int:
    return sum(client.zcard(keyspace.due(s)) for s in keyspace.all_shards())


@pytest.mark.timeout(120)
def test_metrics_after_a_real_scenario_parse_with_their_types_order_and_values(
    stack: Stack, receiver: Receiver, redis: redis.Redis
) -> None:
    stack.env["RELAY_DELIVERY_TIMEOUT"] = "6"  # an attempt held 2.5 s by the receiver is fine
    stack.api()
    stack.worker("--queues", "processing")
    api = Api(stack.api_url, stack.create_key("acme"))

    # A completion with no detector running: it waits in the outbox.
    api.upload("b1", CSV)
    assert api.register("b1", receiver.url("/b1")).status_code == 201
    api.process("b1")
    wait_until(
        lambda: (
            value(
                stack,
                "relay_documents_processed",
                "relay_documents_processed_total",
                status="succeeded",
            )
            == 1
        ),
        20,
        message="document not counted: " + stack.logs(),
    )
    assert value(stack, "relay_outbox_backlog") == 1  # no consumer group yet
    assert value(stack, "relay_oldest_due_delivery_age_seconds") == 0  # no delivery yet

    # The detector turns it into a delivery, due now, that no delivery worker takes.
    detector = stack.detector()
    wait_until(lambda: value(stack, "relay_outbox_backlog") == 0, 20, message="not acked")
    wait_until(lambda: value(stack, "relay_deliveries_due") == 1, 20, message="not due")
    age = wait_until(
        lambda: (a := value(stack, "relay_oldest_due_delivery_age_seconds")) >= 1.0 and a,
        10,
        message="the due delivery does not age",
    )
    assert age < 20

    # With the group in place, a completion the stopped detector has not read is backlog too.
    detector.stop()
    api.upload("b2", CSV)
    assert api.register("b2", receiver.url("/b2")).status_code == 201
    api.process("b2")
    wait_until(lambda: value(stack, "relay_outbox_backlog") == 1, 20, message="b2 not counted")

    # A delivery leased for its attempt (the receiver holds it) is in the due set, not due.
    receiver.script("/b1", [Reply(500, delay=2.5), Reply(200)])
    stack.worker("--queues", "delivery")
    wait_until(lambda: receiver.received("/b1"), 20, message="b1 not attempted")
    assert due_members(redis) == 1  # leased: scored at its lease expiry
    assert value(stack, "relay_deliveries_due") == 0
    assert value(stack, "relay_oldest_due_delivery_age_seconds") == 0

    stack.detector()
    wait_until(
        lambda: len(receiver.received("/b1")) == 2 and receiver.received("/b2"),
        30,
        message="deliveries did not arrive: " + stack.logs(),
    )
    wait_until(lambda: settled(redis), 20, message="not settled")
    wait_until(
        lambda: (
            value(stack, "relay_delivery_attempt_seconds", "relay_delivery_attempt_seconds_count")
            == 3
        ),
        10,
        message="attempts not flushed",
    )

    text, families = scrape(stack)
    types = {name: kind for name, (kind, _) in families.items()}
    assert types == {
        "relay_up": "gauge",
        "relay_queue_depth": "gauge",
        "relay_documents": "gauge",
        "relay_deliveries_due": "gauge",
        "relay_oldest_due_delivery_age_seconds": "gauge",
        "relay_outbox_backlog": "gauge",
        "relay_delivery_attempts": "counter",
        "relay_deliveries_succeeded": "counter",
        "relay_delivery_attempt_seconds": "histogram",
        "relay_notification_lag_seconds": "histogram",
        "relay_documents_processed": "counter",
        "relay_redis_up": "gauge",
    }
    # HELP and TYPE once per family; counters end in _total.
    type_lines = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE)
    assert len(type_lines) == len({n for n, _ in type_lines}) == len(types)
    assert len(re.findall(r"^# HELP ", text, re.MULTILINE)) == len(types)
    assert all(n.endswith("_total") for n, kind in type_lines if kind == "counter")

    for name, bounds in (
        ("relay_delivery_attempt_seconds", ATTEMPT_BUCKETS),
        ("relay_notification_lag_seconds", LAG_BUCKETS),
    ):
        samples = families[name][1]
        buckets = [s for s in samples if s.name == f"{name}_bucket"]
        les = [float(s.labels["le"]) for s in buckets]
        assert les == [*bounds, math.inf]  # every bucket, increasing, +Inf last
        counts = [s.value for s in buckets]
        assert counts == sorted(counts)  # cumulative
        assert [s.name for s in samples] == [f"{name}_bucket"] * len(les) + [
            f"{name}_sum",
            f"{name}_count",
        ]
        assert counts[-1] == samples[-1].value  # +Inf == _count

    def sample(family: str, name: str | None = None, **labels: str) -> float:
        (found,) = [
            s.value
            for s in families[family][1]
            if s.name == (name or family) and s.labels == labels
        ]
        return found

    attempts = "relay_delivery_attempts"
    assert sample(attempts, f"{attempts}_total", outcome="succeeded") == 2
    assert sample(attempts, f"{attempts}_total", outcome="retry") == 1
    assert sample(attempts, f"{attempts}_total", outcome="failed") == 0
    seconds = "relay_delivery_attempt_seconds"
    assert sample(seconds, f"{seconds}_count") == 3
    assert sample(seconds, f"{seconds}_bucket", le="1") == 2  # the two quick ones
    assert sample(seconds, f"{seconds}_bucket", le="5") == 3  # and the one held 2.5 s
    assert 2.5 <= sample(seconds, f"{seconds}_sum") < 6
    lag = "relay_notification_lag_seconds"
    assert sample(lag, f"{lag}_count") == 2
    assert sample("relay_deliveries_succeeded", "relay_deliveries_succeeded_total") == 2
    docs = "relay_documents_processed"
    assert sample(docs, f"{docs}_total", status="succeeded") == 2
    assert sample(docs, f"{docs}_total", status="failed") == 0
    assert sample("relay_oldest_due_delivery_age_seconds") == 0
    assert sample("relay_outbox_backlog") == 0
    assert sample("relay_deliveries_due") == 0
    assert sample("relay_queue_depth", queue="relay-processing") == 0
    assert sample("relay_up") == 1 and sample("relay_redis_up") == 1
    api.close()
