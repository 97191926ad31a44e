"""Counters and histograms (relay.state.metrics): counted in memory by several processes' Metrics,
flushed to one Redis hash, rendered as Prometheus text that a Prometheus parser reads back."""

from __future__ import annotations

import threading

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from relay.redis import keyspace
from relay.state.metrics import ATTEMPT_BUCKETS, LAG_BUCKETS, Metrics, render


def stored(client: redis.Redis) -> dict[bytes, bytes]:
    return {bytes(k): bytes(v) for k, v in client.hgetall(keyspace.metrics()).items()}


def families(client: redis.Redis) -> dict[str, tuple[str, list[Sample]]]:
    """The rendered text parsed back: family name -> (type, samples)."""
    parsed = text_string_to_metric_families(render(stored(client)))
    return {f.name: (f.type, list(f.samples)) for f in parsed}


def value(samples: list[Sample], name: str, **labels: str) -> float:
    (found,) = [s.value for s in samples if s.name == name and s.labels == labels]
    return found


def test_flushes_of_several_processes_add_up(redis: redis.Redis) -> None:
    workers = [Metrics() for _ in range(3)]
    for m in workers:
        m.attempted("succeeded", 20)
        m.document("succeeded")
    workers[0].attempted("retry", 3_000)
    workers[1].document("failed")
    workers[2].delivered(completed_ms=1_000, accepted_ms=1_250)
    for m in workers:
        m.flush(redis)
        m.flush(redis)  # a flush moves the counts out: the second adds nothing
    fields = stored(redis)
    assert fields[b"relay_delivery_attempts_total|outcome=succeeded"] == b"3"
    assert fields[b"relay_delivery_attempts_total|outcome=retry"] == b"1"
    assert fields[b"relay_documents_processed_total|status=succeeded"] == b"3"
    assert fields[b"relay_documents_processed_total|status=failed"] == b"1"
    assert fields[b"relay_deliveries_succeeded_total|"] == b"1"
    assert fields[b"relay_delivery_attempt_seconds_count|"] == b"4"
    assert float(fields[b"relay_delivery_attempt_seconds_sum|"]) == pytest.approx(3.06)
    assert fields[b"relay_delivery_attempt_seconds_bucket|le=0.025"] == b"3"  # the 20 ms ones
    assert fields[b"relay_delivery_attempt_seconds_bucket|le=2.5"] == b"3"
    assert fields[b"relay_delivery_attempt_seconds_bucket|le=5"] == b"4"  # and the 3 s one
    assert fields[b"relay_delivery_attempt_seconds_bucket|le=+Inf"] == b"4"
    assert b"relay_delivery_attempt_seconds_bucket|le=0.01" not in fields  # none that fast
    assert float(fields[b"relay_notification_lag_seconds_sum|"]) == pytest.approx(0.25)


def test_counting_from_many_threads_loses_nothing(redis: redis.Redis) -> None:
    metrics = Metrics()

    def count() -> None:
        for _ in range(500):
            metrics.attempted("succeeded", 1)
            metrics.document("succeeded")

    threads = [threading.Thread(target=count) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    metrics.flush(redis)
    fields = stored(redis)
    assert fields[b"relay_delivery_attempts_total|outcome=succeeded"] == b"2000"
    assert fields[b"relay_documents_processed_total|status=succeeded"] == b"2000"
    assert fields[b"relay_delivery_attempt_seconds_bucket|le=0.005"] == b"2000"


def test_an_unknown_completion_time_counts_the_delivery_but_no_lag(redis: redis.Redis) -> None:
    m = Metrics()
    m.delivered(completed_ms=0, accepted_ms=5_000)
    m.delivered(completed_ms=6_000, accepted_ms=5_000)  # clocks apart: no negative lag
    m.flush(redis)
    fields = stored(redis)
    assert fields[b"relay_deliveries_succeeded_total|"] == b"2"
    assert fields[b"relay_notification_lag_seconds_count|"] == b"1"
    assert float(fields[b"relay_notification_lag_seconds_sum|"]) == 0.0


def test_nothing_counted_flushes_nothing_and_renders_every_series_at_zero(
    redis: redis.Redis,
) -> None:
    Metrics().flush(redis)
    assert redis.exists(keyspace.metrics()) == 0
    found = {f.name: f for f in text_string_to_metric_families(render({}))}
    assert {name: f.type for name, f in found.items()} == {
        "relay_delivery_attempts": "counter",
        "relay_deliveries_succeeded": "counter",
        "relay_delivery_attempt_seconds": "histogram",
        "relay_notification_lag_seconds": "histogram",
        "relay_documents_processed": "counter",
    }
    for name, buckets in (
        ("relay_delivery_attempt_seconds", ATTEMPT_BUCKETS),
        ("relay_notification_lag_seconds", LAG_BUCKETS),
    ):
        samples = found[name].samples
        assert [s.labels.get("le") for s in samples] == [
            *(f"{b:g}" for b in buckets),
            "+Inf",
            None,
            None,
        ]
        assert [s.name for s in samples[-2:]] == [f"{name}_sum", f"{name}_count"]
        assert all(s.value == 0 for s in samples)
    outcomes = {s.labels["outcome"]: s.value for s in found["relay_delivery_attempts"].samples}
    assert outcomes == {"succeeded": 0, "retry": 0, "failed": 0, "gone": 0}


def test_render_is_prometheus_text_with_names_types_and_values(redis: redis.Redis) -> None:
    m = Metrics()
    m.attempted("succeeded", 40)
    m.attempted("failed", 12_000)
    m.delivered(completed_ms=10_000, accepted_ms=10_300)
    m.document("succeeded")
    m.document("succeeded")
    m.flush(redis)
    redis.hset(keyspace.metrics(), "relay_something_new|", "7")  # a field from a newer version
    found = families(redis)
    assert {name: kind for name, (kind, _) in found.items()} == {
        "relay_delivery_attempts": "counter",
        "relay_deliveries_succeeded": "counter",
        "relay_delivery_attempt_seconds": "histogram",
        "relay_notification_lag_seconds": "histogram",
        "relay_documents_processed": "counter",
        "relay_something_new": "unknown",
    }
    attempts = found["relay_delivery_attempts"][1]
    assert value(attempts, "relay_delivery_attempts_total", outcome="succeeded") == 1
    assert value(attempts, "relay_delivery_attempts_total", outcome="failed") == 1
    assert value(attempts, "relay_delivery_attempts_total", outcome="retry") == 0
    docs = found["relay_documents_processed"][1]
    assert value(docs, "relay_documents_processed_total", status="succeeded") == 2
    assert value(found["relay_deliveries_succeeded"][1], "relay_deliveries_succeeded_total") == 1
    assert value(found["relay_something_new"][1], "relay_something_new") == 7

    durations = found["relay_delivery_attempt_seconds"][1]
    name = "relay_delivery_attempt_seconds"
    # Every bucket is rendered, those nothing fell into at 0 (a fixed set per series).
    assert [s.labels["le"] for s in durations if s.name == f"{name}_bucket"] == [
        *(f"{b:g}" for b in ATTEMPT_BUCKETS),
        "+Inf",
    ]
    assert value(durations, f"{name}_bucket", le="0.025") == 0
    assert value(durations, f"{name}_bucket", le="0.05") == 1
    assert value(durations, f"{name}_bucket", le="10") == 1
    assert value(durations, f"{name}_bucket", le="30") == 2
    assert value(durations, f"{name}_bucket", le="+Inf") == 2
    assert value(durations, f"{name}_count") == 2
    assert value(durations, f"{name}_sum") == pytest.approx(12.04)
    lag = found["relay_notification_lag_seconds"][1]
    assert value(lag, "relay_notification_lag_seconds_bucket", le="0.25") == 0
    assert value(lag, "relay_notification_lag_seconds_bucket", le="0.5") == 1
    assert value(lag, "relay_notification_lag_seconds_sum") == pytest.approx(0.3)


def test_histogram_samples_are_in_prometheus_order(redis: redis.Redis) -> None:
    """Buckets by numeric ``le`` with +Inf last (not as text: "+Inf" < "10" < "2.5"), then
    _sum, then _count, each histogram right under its HELP and TYPE lines."""
    m = Metrics()
    m.attempted("succeeded", 7)
    m.attempted("succeeded", 700)
    m.delivered(completed_ms=1_000, accepted_ms=1_700)
    m.flush(redis)
    lines = render(stored(redis)).splitlines()
    for name, buckets in (
        ("relay_delivery_attempt_seconds", ATTEMPT_BUCKETS),
        ("relay_notification_lag_seconds", LAG_BUCKETS),
    ):
        start = lines.index(f"# TYPE {name} histogram")
        assert lines[start - 1].startswith(f"# HELP {name} ")
        series = [line.split(" ")[0] for line in lines[start + 1 :]]
        expected = [f'{name}_bucket{{le="{b:g}"}}' for b in buckets]
        expected += [f'{name}_bucket{{le="+Inf"}}', f"{name}_sum", f"{name}_count"]
        assert expected != sorted(expected)  # text order would differ
        assert series[: len(expected)] == expected
    # The text parser takes it, bucket counts never fall as le grows.
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        counts = [s.value for s in family.samples if s.name.endswith("_bucket")]
        assert counts == sorted(counts)
