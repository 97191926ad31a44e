"""What a setting's value can be and how its text is read: the parsers each field of
``relay.config.settings.Settings`` names (raw text in, the value out, ``ValueError`` with what
was expected), the value types (``Secret``, ``RateLimit``, ``BlobUrl``) and the constants
other modules share (the variable prefixes, the OCR providers, the files-a-request default)."""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass

from relay.timefmt import parse_duration

PREFIX = "RELAY_"
OTEL_PREFIX = "OTEL_"
# The variables that name an OTLP endpoint for traces: either one turns tracing on.
OTEL_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class Secret:
    """A string that never prints itself (``repr``/``str`` show a mask)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(
            self._value.encode(), other._value.encode()
        )

    def __hash__(self) -> int:
        return hash(Secret)

    def __repr__(self) -> str:
        return "Secret('**********')" if self._value else "Secret('')"

    __str__ = __repr__


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"expected true/false, got {raw!r}")


def _positive_float(raw: str) -> float:
    value = float(raw)
    if value <= 0:
        raise ValueError("must be > 0")
    return value


def _non_negative_float(raw: str) -> float:
    value = float(raw)
    if not value >= 0 or value == float("inf"):  # NaN fails the comparison
        raise ValueError("must be a finite number >= 0")
    return value


def _wall_factor(raw: str) -> float:
    value = float(raw)
    if not 1 <= value < float("inf"):  # NaN fails the comparison
        raise ValueError("must be a finite number >= 1")
    return value


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError("must be > 0")
    return value


def _log_format(raw: str) -> str:
    value = raw.strip().lower()
    if value not in {"text", "json"}:
        raise ValueError("expected text or json")
    return value


# RELAY_OCR_PROVIDER's values (relay.extract.ocr_models.PROVIDERS names onnxruntime's).
OCR_PROVIDERS = ("cpu", "cuda", "openvino")


def _ocr_provider(raw: str) -> str:
    value = raw.strip().lower()
    if value not in OCR_PROVIDERS:
        raise ValueError(f"expected one of {', '.join(OCR_PROVIDERS)}")
    return value


def _sentinels(raw: str) -> tuple[tuple[str, int], ...]:
    """``host:port,host:port`` (an IPv6 host in brackets: ``[::1]:26379``); empty = none."""
    out: list[tuple[str, int]] = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected host:port[,host:port...], got {part!r}")
        out.append((host, int(port)))
    return tuple(out)


# RELAY_MAX_FILES_PER_UPLOAD's default, which the OpenAPI document states.
DEFAULT_MAX_FILES_PER_UPLOAD = 100


def _positive_at_most(most: int, note: str = "") -> Callable[[str], int]:
    """A parser of whole numbers from 1 to ``most``; ``note`` explains the bound's refusal."""

    def parse(raw: str) -> int:
        value = _positive_int(raw)
        if value > most:
            raise ValueError(f"at most {most}{note}")
        return value

    return parse


_claim_documents = _positive_at_most(1000)
_metadata_keys = _positive_at_most(1000)
# Mirrored from relay.state.metadata.MOST_BYTES (config imports no domain module): a form field's
# text is parsed up to four times this.
_metadata_bytes = _positive_at_most(4096)


def _page_side(raw: str) -> int:
    value = int(raw)
    if not 16 <= value <= 10_000:
        raise ValueError("must be 16-10000 (pixels)")
    return value


_lease_slots = _positive_at_most(64, " (1 = no leases)")
# A leased slot is recorded this far ahead: a refusal may come this much later than a window
# without leases would allow (docs/decisions.md, "Leased slots").
_lease_ms = _positive_at_most(10_000, " (10 s)")


def _non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def _at_least_two(raw: str) -> int:
    value = int(raw)
    if value < 2:
        raise ValueError("must be >= 2 (the first attempt and the latest are kept)")
    return value


def _shard_count(raw: str) -> int:
    # Bounds mirrored from relay.redis.keyspace (MIN_SHARDS, MAX_SHARDS): config imports no domain
    # module.
    value = int(raw)
    if not 16 <= value <= 256:
        raise ValueError("must be 16-256 (docs/decisions.md, shard count)")
    return value


def _shards_delay(raw: str) -> float:
    value = parse_duration(raw)
    if not 1 <= value <= 3600:
        raise ValueError("must be 1s-1h")
    return value


def _schedule(raw: str) -> tuple[float, ...]:
    parts = tuple(float(p) for p in raw.split(",") if p.strip())
    if not parts or any(p < 0 for p in parts):
        raise ValueError("a comma-separated list of seconds >= 0")
    return parts


@dataclass(frozen=True)
class RateLimit:
    """``N/second|minute|hour``: at most ``limit`` requests in any ``window_ms``."""

    limit: int
    window_ms: int

    @classmethod
    def parse(cls, raw: str) -> RateLimit:
        count, _, unit = raw.strip().partition("/")
        windows = {"second": 1_000, "minute": 60_000, "hour": 3_600_000}
        if unit not in windows:
            raise ValueError("expected N/second, N/minute or N/hour")
        return cls(limit=_positive_int(count), window_ms=windows[unit])


@dataclass(frozen=True)
class BlobUrl:
    """``RELAY_BLOB_URL``: where uploaded bytes wait for a worker. ``redis:`` (in Redis, the
    batch's shard), ``file:///path`` (a directory every API and worker machine mounts at that
    path), ``s3://bucket/prefix`` (S3-compatible object storage, ``relay.state.s3``); empty
    (``kind`` "") leaves the choice to ``RELAY_BLOB_DIR``, its older spelling of ``file://``."""

    text: str
    kind: str = ""  # "redis", "dir", "s3", or "" when not set
    directory: str = ""  # file://: the absolute path
    bucket: str = ""  # s3://
    prefix: str = ""  # s3://: the key prefix, "" or ending in "/"

    @classmethod
    def parse(cls, raw: str) -> BlobUrl:
        text = raw.strip()
        if not text:
            return cls("")
        scheme, sep, rest = text.partition(":")
        scheme = scheme.lower()
        if not sep:
            raise ValueError("expected redis:, file:///absolute/path or s3://bucket[/prefix]")
        if scheme == "redis" and rest in ("", "//"):
            return cls(text, "redis")
        if scheme == "file" and rest.startswith("///") and len(rest) > 3:
            return cls(text, "dir", directory=rest[2:])
        if scheme == "s3" and rest.startswith("//"):
            bucket, _, prefix = rest[2:].partition("/")
            if not _BUCKET.fullmatch(bucket):
                raise ValueError(f"{bucket!r} is not an S3 bucket name (3-63 of a-z 0-9 . -)")
            prefix = prefix.strip("/")
            return cls(text, "s3", bucket=bucket, prefix=f"{prefix}/" if prefix else "")
        raise ValueError("expected redis:, file:///absolute/path or s3://bucket[/prefix]")

    def __str__(self) -> str:
        return self.text


_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
