"""Settings: read once at the edge from ``RELAY_*`` environment variables and ``.env``.

``os.environ`` is read here and nowhere else. Every setting is declared in ``_FIELDS`` with
its default and one line of meaning; ``.env.example`` is generated from the same table
(``relay config example``), so the two cannot drift. An unknown ``RELAY_`` variable is an
error at start, not silently ignored.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.exceptions import ConfigError
from relay.timefmt import parse_duration

PREFIX = "RELAY_"


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
class _Field:
    name: str
    default: str
    parse: Callable[[str], Any]
    doc: str


_FIELDS: tuple[_Field, ...] = (
    _Field("redis_url", "redis://127.0.0.1:6379/0", str, "Redis holding all state and queues"),
    _Field(
        "redis_sentinels",
        "",
        _sentinels,
        "host:port,... of Redis Sentinels: when set, every process asks them for the primary"
        " (RELAY_REDIS_URL then gives only password, db and TLS options)",
    ),
    _Field(
        "redis_sentinel_service",
        "mymaster",
        str,
        "The primary's name in the Sentinels' `sentinel monitor` line",
    ),
    _Field(
        "redis_sentinel_password",
        "",
        Secret,
        "Password of the Sentinels themselves (when they have requirepass); empty = none",
    ),
    _Field(
        "redis_wait_replicas",
        "0",
        _non_negative_int,
        "Replicas that must have an upload, process or webhook registration before the API"
        " answers it (Redis WAIT); 0 = do not wait (a single Redis)",
    ),
    _Field(
        "redis_wait_timeout_ms",
        "500",
        _positive_int,
        "How long the API waits for those replicas before answering anyway (and counting it)",
    ),
    _Field("public_url", "http://127.0.0.1:8000", str, "Base URL of the API, used in results_url"),
    _Field("host", "127.0.0.1", str, "Address `relay serve` binds"),
    _Field("port", "8000", _positive_int, "Port `relay serve` binds"),
    _Field(
        "extractor",
        "relay.extract:extract",
        str,
        "package.module:callable that turns a document into line_items",
    ),
    _Field("max_upload_bytes", str(20 * 1024 * 1024), _positive_int, "Largest upload (else 413)"),
    _Field(
        "max_image_pixels",
        "50000000",
        _positive_int,
        "Largest image (all pages) the default extractor decodes, else image_too_large",
    ),
    _Field(
        "max_pages",
        "500",
        _positive_int,
        "Most pages of a PDF or TIFF the default extractor reads, else too_many_pages",
    ),
    _Field(
        "extract_timeout",
        "60",
        _positive_float,
        "Wall-clock seconds one document's extraction may take (else extraction_timeout)",
    ),
    _Field(
        "extract_memory",
        str(2 * 1024 * 1024 * 1024),
        _positive_int,
        "Bytes of address space the extraction process may use (else extraction_memory)",
    ),
    _Field(
        "max_result_bytes",
        str(16 * 1024 * 1024),
        _positive_int,
        "Largest result (line_items and tables) of one document as JSON bytes "
        "(else result_too_large)",
    ),
    _Field(
        "extract_max_depth",
        "64",
        _positive_int,
        "Deepest nesting of a JSON document's values (else too_deeply_nested)",
    ),
    _Field(
        "blob_dir",
        "",
        str,
        "Keep uploaded bytes in this directory (shared by API and workers); empty = in Redis",
    ),
    _Field(
        "status_rate_limit",
        "120/minute",
        RateLimit.parse,
        "Sliding-window limit per API key over the status endpoints",
    ),
    _Field(
        "account_max_pending_bytes",
        str(256 * 1024 * 1024),
        _positive_int,
        "Per account: uploaded bytes held in Redis awaiting processing (past it uploads are 429)",
    ),
    _Field(
        "account_upload_rate_limit",
        "600/minute",
        RateLimit.parse,
        "Per account: sliding-window limit on POST /documents",
    ),
    _Field(
        "account_process_rate_limit",
        "600/minute",
        RateLimit.parse,
        "Per account: sliding-window limit on POST /batches/{name}/process",
    ),
    _Field(
        "account_retry_rate_limit",
        "60/minute",
        RateLimit.parse,
        "Per account: sliding-window limit on manual delivery retries",
    ),
    _Field(
        "auth_failure_rate_limit",
        "60/minute",
        RateLimit.parse,
        "Per client address: requests with a missing or invalid API key (then 429)",
    ),
    _Field(
        "forwarded_allow_ips",
        "127.0.0.1",
        str,
        "Proxies trusted for X-Forwarded-For (the client address of the limits above)",
    ),
    _Field(
        "http_max_header_bytes",
        "32768",
        _positive_int,
        "`relay serve`: largest request line plus headers in bytes (else 431, closed)",
    ),
    _Field(
        "http_max_headers",
        "100",
        _positive_int,
        "`relay serve`: most headers in one request (else 431, closed)",
    ),
    _Field(
        "http_header_timeout",
        "10",
        _positive_float,
        "`relay serve`: seconds a client has to send a request's line and headers, from its"
        " first byte or from the connection's start (else 408, closed)",
    ),
    _Field(
        "http_body_timeout",
        "60",
        _positive_float,
        "`relay serve`: seconds a client has to send a request's body after its headers"
        " (else 408, closed)",
    ),
    _Field(
        "http_keepalive_timeout",
        "20",
        _positive_int,
        "`relay serve`: seconds an idle keep-alive connection stays open after a response",
    ),
    _Field(
        "http_max_connections",
        "1000",
        _positive_int,
        "`relay serve`: open connections at most; one more is answered 503 and closed",
    ),
    _Field(
        "lease_seconds",
        "60",
        _positive_float,
        "A worker's claim on a document lasts this long without renewal",
    ),
    _Field(
        "background_after",
        "2",
        _positive_float,
        "Seconds a document may extract while others wait before its worker moves it to"
        " the background and serves them",
    ),
    _Field(
        "background_extractions",
        "1",
        _non_negative_int,
        "Documents one worker process extracts in the background at once (0: none)",
    ),
    _Field(
        "max_document_attempts",
        "3",
        _positive_int,
        "Claims of one document before it fails with worker_lost",
    ),
    _Field("sweep_interval", "1.0", _positive_float, "Seconds between detector sweeps"),
    _Field(
        "retention",
        "30d",
        parse_duration,
        "A finished batch (none of its deliveries pending) is purged this long after it"
        " completed (s, m, h, d suffixes)",
    ),
    _Field(
        "disable_after",
        "5d",
        parse_duration,
        "A batch webhook whose attempts have all failed this long (no success since the first"
        " failure) is disabled (s, m, h, d suffixes)",
    ),
    _Field(
        "purge_batch",
        "20",
        _positive_int,
        "Purge steps (a batch, or 500 more documents of a big one) per shard per sweep",
    ),
    _Field(
        "max_stored_attempts",
        "20",
        _at_least_two,
        "Attempts kept per delivery: the first and the latest ones (the count stays true)",
    ),
    _Field(
        "retry_schedule",
        "5,300,1800,7200,18000,36000,36000",
        _schedule,
        "Seconds to wait after each failed attempt (len+1 attempts in all)",
    ),
    _Field("retry_jitter", "0.1", float, "Up to this fraction is added to each retry delay"),
    _Field(
        "delivery_timeout",
        "15",
        _positive_float,
        "Seconds an attempt may last, connect to last byte (wall clock); then it is cut",
    ),
    _Field(
        "delivery_batch",
        "64",
        _positive_int,
        "Due deliveries the delivery engine claims with one script",
    ),
    _Field(
        "delivery_concurrency",
        "64",
        _positive_int,
        "Attempts in flight per worker process (half at most to unanswering receivers)",
    ),
    _Field(
        "delivery_per_destination",
        "8",
        _positive_int,
        "Attempts in flight per worker process to one scheme://host:port",
    ),
    _Field(
        "events_max_wait",
        "30",
        _positive_float,
        "Seconds a GET /events?wait= is held at most in this process (a client may ask up to"
        " 30; a smaller bound answers sooner, with an empty page)",
    ),
    _Field(
        "events_max_waiters",
        "1000",
        _positive_int,
        "Requests long polling GET /events (wait=) at once in one API process; more get 429",
    ),
    _Field(
        "events_max_waiters_per_account",
        "10",
        _positive_int,
        "Requests of one account long polling its event feeds at once in one API process",
    ),
    _Field(
        "require_verified_webhooks",
        "false",
        _bool,
        "Verify every webhook registration (a signed webhook.verify challenge must be echoed"
        " before anything else is sent to it), as a registration with verify: true does",
    ),
    _Field(
        "verify_schedule",
        "1,2,5,10",
        _schedule,
        "Seconds to wait after each failed endpoint verification attempt (len+1 attempts;"
        " then the webhook is disabled)",
    ),
    _Field(
        "allow_http_targets",
        "false",
        _bool,
        "Allow http:// callback URLs (local work only)",
    ),
    _Field(
        "allow_private_targets",
        "false",
        _bool,
        "Allow callbacks to loopback/private addresses (local work only)",
    ),
    _Field(
        "encryption_key",
        "",
        Secret,
        "Fernet key(s) encrypting signing secrets at rest; comma-separated, first encrypts",
    ),
    _Field(
        "signing_grace_seconds",
        "86400",
        _positive_float,
        "After a rotation the previous signing material keeps signing this long",
    ),
    _Field(
        "console_secret",
        "",
        Secret,
        "Signs console session cookies; empty: derived from the first RELAY_ENCRYPTION_KEY",
    ),
    _Field(
        "console_session",
        "8h",
        parse_duration,
        "A console login lasts this long (s, m, h, d suffixes)",
    ),
    _Field("log_level", "info", str, "debug, info, warning or error"),
    _Field(
        "log_format",
        "text",
        _log_format,
        "text (readable key=value lines) or json (one JSON object per line)",
    ),
)

_BY_ENV = {PREFIX + f.name.upper(): f for f in _FIELDS}


@dataclass(frozen=True)
class Settings:
    """All configuration, built once by :func:`load_settings` and passed in."""

    redis_url: str
    redis_sentinels: tuple[tuple[str, int], ...]
    redis_sentinel_service: str
    redis_sentinel_password: Secret
    redis_wait_replicas: int
    redis_wait_timeout_ms: int
    public_url: str
    host: str
    port: int
    extractor: str
    max_upload_bytes: int
    max_image_pixels: int
    max_pages: int
    extract_timeout: float
    extract_memory: int
    max_result_bytes: int
    extract_max_depth: int
    blob_dir: str
    status_rate_limit: RateLimit
    account_max_pending_bytes: int
    account_upload_rate_limit: RateLimit
    account_process_rate_limit: RateLimit
    account_retry_rate_limit: RateLimit
    auth_failure_rate_limit: RateLimit
    forwarded_allow_ips: str
    http_max_header_bytes: int
    http_max_headers: int
    http_header_timeout: float
    http_body_timeout: float
    http_keepalive_timeout: int
    http_max_connections: int
    lease_seconds: float
    background_after: float
    background_extractions: int
    max_document_attempts: int
    sweep_interval: float
    retention: float
    disable_after: float
    purge_batch: int
    max_stored_attempts: int
    retry_schedule: tuple[float, ...]
    retry_jitter: float
    delivery_timeout: float
    delivery_batch: int
    delivery_concurrency: int
    delivery_per_destination: int
    events_max_wait: float
    events_max_waiters: int
    events_max_waiters_per_account: int
    require_verified_webhooks: bool
    verify_schedule: tuple[float, ...]
    allow_http_targets: bool
    allow_private_targets: bool
    encryption_key: Secret = field(repr=True)
    signing_grace_seconds: float
    console_secret: Secret = field(repr=True)
    console_session: float
    log_level: str
    log_format: str

    def to_env(self) -> dict[str, str]:
        """The settings as ``RELAY_*`` variables, for child processes."""
        out: dict[str, str] = {}
        for f in _FIELDS:
            value = getattr(self, f.name)
            if isinstance(value, Secret):
                text = value.reveal()
            elif isinstance(value, RateLimit):
                unit = {1_000: "second", 60_000: "minute", 3_600_000: "hour"}[value.window_ms]
                text = f"{value.limit}/{unit}"
            elif f.name == "redis_sentinels":
                text = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in value)
            elif isinstance(value, tuple):
                text = ",".join(f"{v:g}" for v in value)
            elif isinstance(value, bool):
                text = "true" if value else "false"
            else:
                text = str(value)
            out[PREFIX + f.name.upper()] = text
        return out


def read_dotenv(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines; ``#`` comments and blank lines skipped; quotes stripped."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        key, sep, value = text.partition("=")
        if not sep:
            raise ConfigError(f"{path}:{lineno}: expected KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key.strip().removeprefix("export ").strip()] = value
    return values


def load_settings(
    environ: Mapping[str, str] | None = None,
    dotenv: Path | None = Path(".env"),
    **overrides: Any,
) -> Settings:
    """Build the settings: defaults < ``.env`` < environment < ``overrides``.

    Raises :class:`ConfigError` naming the variable for an unknown ``RELAY_`` name or a
    value that does not parse.
    """
    env = dict(os.environ) if environ is None else dict(environ)
    merged = read_dotenv(dotenv) if dotenv is not None else {}
    merged.update(env)
    unknown = sorted(k for k in merged if k.startswith(PREFIX) and k not in _BY_ENV)
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(unknown)} (see .env.example)")
    values: dict[str, Any] = {}
    for env_name, f in _BY_ENV.items():
        raw = merged.get(env_name, f.default)
        try:
            values[f.name] = f.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{env_name}={raw!r}: {exc}") from exc
    bad = set(overrides) - set(values)
    if bad:
        raise ConfigError(f"unknown override(s): {sorted(bad)}")
    values.update(overrides)
    return Settings(**values)


def env_example() -> str:
    """The text of ``.env.example``: every setting, its default, one line of meaning."""
    lines = ["# relay configuration: every RELAY_ variable, its default and meaning.", ""]
    for f in _FIELDS:
        lines.append(f"# {f.doc}")
        lines.append(f"{PREFIX}{f.name.upper()}={f.default}")
    return "\n".join(lines) + "\n"


def explicitly_set(
    environ: Mapping[str, str] | None = None, dotenv: Path | None = Path(".env")
) -> set[str]:
    """The ``RELAY_`` names set in the environment or ``.env`` (not left to defaults)."""
    env = os.environ if environ is None else environ
    names = {k for k in env if k.startswith(PREFIX)}
    return names | (set(read_dotenv(dotenv)) if dotenv is not None else set())
