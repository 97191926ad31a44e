"""Prometheus metrics shared by every process through Redis.

Workers count in memory and flush to one Redis hash (``keyspace.metrics()``) at the end of each job,
one pipelined round trip, so counting costs no Redis call per delivery. ``GET /metrics``
renders the hash plus live gauges (queue depths, due deliveries). Histograms use fixed
buckets, all of them rendered (0 until counted); field names are ``name|labels``.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict

import redis

from relay.redis import keyspace

ATTEMPT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LAG_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 300.0, 3600.0)

HELP = {
    "relay_delivery_attempts_total": ("counter", "Delivery attempts by outcome"),
    "relay_deliveries_succeeded_total": ("counter", "Deliveries accepted by their receiver"),
    "relay_delivery_attempt_seconds": ("histogram", "Duration of one delivery attempt"),
    "relay_notification_lag_seconds": (
        "histogram",
        "From a batch's completed_at to its receiver accepting the notification",
    ),
    "relay_documents_processed_total": ("counter", "Documents finished by workers, by status"),
    "relay_replica_waits_total": (
        "counter",
        "Acknowledged writes (API, relay keys) that waited for RELAY_REDIS_WAIT_REPLICAS replicas",
    ),
    "relay_replica_wait_timeouts_total": (
        "counter",
        "Of those, answered before enough replicas had them (the wait timed out)",
    ),
}


class Metrics:
    """In-process counters; thread-safe; ``flush`` moves them to Redis."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._sums: defaultdict[str, float] = defaultdict(float)

    def _observe(self, name: str, buckets: tuple[float, ...], seconds: float) -> None:
        for le in buckets:
            if seconds <= le:
                self._counts[f"{name}_bucket|le={le:g}"] += 1
        self._counts[f"{name}_bucket|le=+Inf"] += 1
        self._counts[f"{name}_count|"] += 1
        self._sums[f"{name}_sum|"] += seconds

    def attempted(self, outcome: str, duration_ms: float) -> None:
        with self._lock:
            self._counts[f"relay_delivery_attempts_total|outcome={outcome}"] += 1
            self._observe("relay_delivery_attempt_seconds", ATTEMPT_BUCKETS, duration_ms / 1000)

    def delivered(self, completed_ms: int, accepted_ms: int) -> None:
        """A receiver accepted a notification; its lag runs from the batch's completed_at
        (``completed_ms``; 0 when unknown)."""
        with self._lock:
            self._counts["relay_deliveries_succeeded_total|"] += 1
            if completed_ms:
                lag = max(0.0, (accepted_ms - completed_ms) / 1000)
                self._observe("relay_notification_lag_seconds", LAG_BUCKETS, lag)

    def document(self, status: str) -> None:
        with self._lock:
            self._counts[f"relay_documents_processed_total|status={status}"] += 1

    def flush(self, client: redis.Redis) -> None:
        with self._lock:
            counts, sums = self._counts, self._sums
            self._counts, self._sums = Counter(), defaultdict(float)
        if not counts and not sums:
            return
        key = keyspace.metrics()
        with client.pipeline(transaction=False) as pipe:
            for field, n in counts.items():
                pipe.hincrby(key, field, n)
            for field, total in sums.items():
                pipe.hincrbyfloat(key, field, total)
            pipe.execute()


# Label values shown at 0 before anything is counted (an alert on "failed" needs a series).
ATTEMPT_OUTCOMES = ("succeeded", "retry", "failed", "gone")
DOCUMENT_STATUSES = ("succeeded", "failed")

BUCKETS = {
    "relay_delivery_attempt_seconds": ATTEMPT_BUCKETS,
    "relay_notification_lag_seconds": LAG_BUCKETS,
}


def _sample_order(base: str, series: str, labels: str) -> tuple[int, float, str]:
    """Where a sample stands in its family, as Prometheus expects it: the buckets by their
    numeric ``le`` (``+Inf`` last; as text, ``+Inf`` and ``10`` would sort before ``2.5``),
    then ``_sum``, then ``_count``; other series by their labels."""
    suffix = series.removeprefix(base)
    if suffix == "_bucket":
        return 0, float(labels.partition("=")[2]), labels  # float("+Inf") is infinity
    return {"_sum": 1, "_count": 2}.get(suffix, 0), 0.0, labels


def _with_every_series(stored: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """The stored fields plus a zero for each series that nothing was counted into yet: a
    histogram always shows its whole bucket set (Prometheus expects a fixed set per series,
    and a bucket missing from one scrape and present in the next breaks rate()), and the
    counters show 0 for their known labels from the start."""
    out: dict[bytes, bytes] = {}
    for name, buckets in BUCKETS.items():
        for le in (*(f"{b:g}" for b in buckets), "+Inf"):
            out[f"{name}_bucket|le={le}".encode()] = b"0"
        out[f"{name}_sum|".encode()] = b"0"
        out[f"{name}_count|".encode()] = b"0"
    out[b"relay_deliveries_succeeded_total|"] = b"0"
    for outcome in ATTEMPT_OUTCOMES:
        out[f"relay_delivery_attempts_total|outcome={outcome}".encode()] = b"0"
    for status in DOCUMENT_STATUSES:
        out[f"relay_documents_processed_total|status={status}".encode()] = b"0"
    out.update(stored)
    return out


def render(stored: dict[bytes, bytes]) -> str:
    """Prometheus text of the counters and histograms flushed by every process."""
    by_name: dict[str, list[tuple[tuple[int, float, str], str]]] = {}
    for raw_field, raw_value in _with_every_series(stored).items():
        field = raw_field.decode()
        series, _, labels = field.partition("|")
        base = series.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        label_text = ""
        if labels:
            k, _, v = labels.partition("=")
            label_text = f'{{{k}="{v}"}}'
        line = f"{series}{label_text} {raw_value.decode()}"
        by_name.setdefault(base, []).append((_sample_order(base, series, labels), line))
    lines: list[str] = []
    for base in sorted(by_name):
        kind, text = HELP.get(base, ("untyped", base))
        samples = [line for _, line in sorted(by_name[base])]
        lines += [f"# HELP {base} {text}", f"# TYPE {base} {kind}", *samples]
    return "\n".join(lines) + "\n"
