"""Settings: read once at the edge from ``RELAY_*`` environment variables and ``.env``.

``os.environ`` is read here and nowhere else. Every setting is declared once, as a field of
:class:`Settings` with its type, its default, its parser and one line of meaning
(:func:`setting`); ``.env.example`` and ``docs/settings.md`` are generated from those fields
(``relay config example``, ``relay config docs``), so nothing can drift. An unknown
``RELAY_`` variable is an error at start, not silently ignored.

One family of foreign variables is read too: OpenTelemetry's own ``OTEL_*``
(:attr:`Settings.otel`), which turn tracing on and configure it (``relay.tracing``,
docs/deploy.md, "Tracing"). relay checks the few that decide whether and how it exports; the
SDK reads the rest itself from the process environment, where :func:`export_otel` puts those
that came from ``.env`` (the one documented exception to "read here and nowhere else").

The AWS SDK reads its own too when ``RELAY_BLOB_URL`` is ``s3://`` (``relay.state.s3``):
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``,
``AWS_CA_BUNDLE`` and its config files, for what the ``RELAY_S3_*`` settings leave empty; relay
neither reads nor checks them, and they must be in the process environment (not ``.env``).
"""

from __future__ import annotations

import hmac
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dotenv.parser import parse_stream

from relay.exceptions import ConfigError
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


@dataclass(frozen=True)
class _Field:
    name: str
    default: str
    parse: Callable[[str], Any]
    doc: str


def setting(default: str, parse: Callable[[str], Any], doc: str) -> Any:
    """A field of :class:`Settings`: the default as text, its parser, one line of meaning
    (a required field: :func:`load_settings` always passes every value)."""
    return field(metadata={"setting": (default, parse, doc)})


@dataclass(frozen=True)
class Settings:
    """All configuration, built once by :func:`load_settings` and passed in.

    Each field is a setting, declared here once: its type, and in :func:`setting` its
    default (as text, as it would be written in the environment), its parser and one line
    of meaning. ``RELAY_<NAME>`` names it; ``.env.example`` and the settings table in
    docs/decisions.md are generated from these fields (``relay config example``).
    """

    redis_url: str = setting(
        "redis://127.0.0.1:6379/0",
        str,
        "Redis holding all state and queues",
    )
    redis_sentinels: tuple[tuple[str, int], ...] = setting(
        "",
        _sentinels,
        "host:port,... of Redis Sentinels: when set, every process asks them for the primary"
        " (RELAY_REDIS_URL then gives only password, db and TLS options)",
    )
    redis_cluster_nodes: tuple[tuple[str, int], ...] = setting(
        "",
        _sentinels,
        "host:port,... of Redis Cluster seed nodes: when set, the state lives on that Cluster"
        " (RELAY_REDIS_URL then gives only password and TLS options; RELAY_QUEUE_REDIS_URL is"
        " required; not with RELAY_REDIS_SENTINELS)",
    )
    queue_redis_url: str = setting(
        "",
        str,
        "Redis holding RQ's job queues; empty = the state's Redis (RELAY_REDIS_URL, through"
        " the Sentinels when set). Required with RELAY_REDIS_CLUSTER_NODES: RQ's keys span slots",
    )
    shards: int = setting(
        "16",
        _shard_count,
        "Shards (hash tags) the state is spread over, 16-256: at most this many busy Cluster"
        " primaries. Raise only (data stays where it was written); see docs/deploy.md",
    )
    shards_delay: float = setting(
        "60s",
        _shards_delay,
        "A raised RELAY_SHARDS takes new batches this long after its first process starts;"
        " every process re-reads the counts in use four times as often (s, m, h suffixes)",
    )
    redis_sentinel_service: str = setting(
        "mymaster",
        str,
        "The primary's name in the Sentinels' `sentinel monitor` line",
    )
    redis_sentinel_password: Secret = setting(
        "",
        Secret,
        "Password of the Sentinels themselves (when they have requirepass); empty = none",
    )
    redis_wait_replicas: int = setting(
        "0",
        _non_negative_int,
        "Replicas that must have an acknowledged write (upload, process, webhook, signing,"
        " relay keys create/revoke) before it is answered (Redis WAIT); 0 = do not wait",
    )
    redis_wait_timeout_ms: int = setting(
        "500",
        _positive_int,
        "How long the API waits for those replicas before answering anyway (and counting it)",
    )
    redis_socket_timeout: float = setting(
        "5",
        _positive_float,
        "Seconds any process waits for one Redis reply (the status lane: for its oldest round)"
        " before it drops the connection and fails or retries the command",
    )
    redis_connect_timeout: float = setting(
        "1",
        _positive_float,
        "Seconds to connect to a Redis data node, TLS and AUTH included",
    )
    redis_sentinel_timeout: float = setting(
        "0.5",
        _positive_float,
        "Seconds to connect to one Sentinel and to get its answer; a Sentinel that misses it"
        " is skipped for the next one (no retry of its own)",
    )
    redis_sentinel_poll: float = setting(
        "0.5",
        _positive_float,
        "Seconds between two questions each process asks the Sentinels in the background (who"
        " is the primary?); when it moved, the process drops its connections to the old one",
    )
    request_deadline: float = setting(
        "8",
        _positive_float,
        "Seconds one API request may wait on Redis in all (a free connection, finding the"
        " primary, connecting, every reply); past it the request is answered 503. Reading its"
        " body or a long poll's wait does not count",
    )
    redis_max_connections: int = setting(
        "64",
        _positive_int,
        "Redis connections one API process holds at most (on a Cluster: commands in flight,"
        " so as many to any one node), its event listener's included; a request finding them"
        " all in use waits its turn within RELAY_REQUEST_DEADLINE, then 503. See docs/deploy.md"
        " for processes x this against Redis maxclients",
    )
    redis_backoff_cap: float = setting(
        "2",
        _positive_float,
        "Longest pause, in seconds, between two tries of a process that lost Redis (doubling"
        " from 0.05 s: commands of workers and CLI, the delivery engine, detector, RQ's dequeue)",
    )
    worker_dequeue_timeout: int = setting(
        "5",
        _positive_int,
        "Seconds a worker blocks waiting for a job (BLPOP); it waits for the reply that long"
        " plus RELAY_REDIS_SOCKET_TIMEOUT",
    )
    public_url: str = setting(
        "http://127.0.0.1:8000",
        str,
        "Base URL of the API, used in results_url",
    )
    host: str = setting(
        "127.0.0.1",
        str,
        "Address `relay serve` binds",
    )
    port: int = setting(
        "8000",
        _positive_int,
        "Port `relay serve` binds",
    )
    extractor: str = setting(
        "relay.extract:extract",
        str,
        "package.module:callable that turns a document into line_items",
    )
    max_upload_bytes: int = setting(
        str(20 * 1024 * 1024),
        _positive_int,
        "Largest upload (else 413): one file, and the files of one request together",
    )
    max_files_per_upload: int = setting(
        str(DEFAULT_MAX_FILES_PER_UPLOAD),
        _positive_at_most(1000),
        "Most file parts one POST /documents may carry (each a document), at most 1000; more"
        " is 422 too_many_files, nothing made",
    )
    max_image_pixels: int = setting(
        "50000000",
        _positive_int,
        "Largest image (all pages) the default extractor decodes, else image_too_large",
    )
    max_pages: int = setting(
        "500",
        _positive_int,
        "Most pages of a PDF or TIFF the default extractor reads, else too_many_pages",
    )
    max_page_ranges: int = setting(
        "100",
        _positive_at_most(1000),
        "Most pages and ranges a process call's pages may list (1-3,12 is two), at most 1000;"
        " else 422 invalid_pages",
    )
    extract_timeout: float = setting(
        "60",
        _positive_float,
        "CPU seconds one document's extraction may use, plus RELAY_EXTRACT_PAGE_SECONDS a"
        " page for a PDF or TIFF (else extraction_timeout); a loaded machine does not cut it",
    )
    extract_page_seconds: float = setting(
        "15",
        _non_negative_float,
        "CPU seconds a PDF's or TIFF's extraction budget grows by for each of its pages"
        " (the longest: RELAY_EXTRACT_TIMEOUT + RELAY_MAX_PAGES of them)",
    )
    extract_wall_factor: float = setting(
        "4",
        _wall_factor,
        "Wall-clock backstop of an extraction, as a multiple (>= 1) of its CPU budget: a child"
        " waiting rather than computing is cut there (else extraction_timeout)",
    )
    extract_memory: int = setting(
        str(2 * 1024 * 1024 * 1024),
        _positive_int,
        "Bytes of address space the extraction process may use (else extraction_memory)",
    )
    ocr_provider: str = setting(
        "cpu",
        _ocr_provider,
        "onnxruntime execution provider of the OCR models: cpu, cuda or openvino (the last"
        " two need onnxruntime-gpu or onnxruntime-openvino; else the CPU, with a warning)",
    )
    max_result_bytes: int = setting(
        str(16 * 1024 * 1024),
        _positive_int,
        "Largest result (line_items and tables) of one document as JSON bytes "
        "(else result_too_large)",
    )
    extract_max_depth: int = setting(
        "64",
        _positive_int,
        "Deepest nesting of a JSON document's values, or of an HTML page's tables inside"
        " tables (else too_deeply_nested)",
    )
    extract_max_cells: int = setting(
        "1000000",
        _positive_int,
        "Most table cells (grid positions, empty ones included) of an XLSX, DOCX or HTML"
        " document, counted as they are read (else too_many_cells)",
    )
    extract_max_unzipped_bytes: int = setting(
        str(256 * 1024 * 1024),
        _positive_int,
        "Most bytes the parts of an XLSX or DOCX may unpack to, as its ZIP directory declares"
        " them, checked before anything is unpacked (else archive_too_large)",
    )
    extract_max_zip_entries: int = setting(
        "10000",
        _positive_int,
        "Most parts (ZIP entries) of an XLSX or DOCX (else archive_too_large)",
    )
    metadata_max_keys: int = setting(
        "32",
        _metadata_keys,
        "Most keys of a document's or batch's metadata (a flat JSON object; else 422"
        " invalid_metadata)",
    )
    metadata_max_bytes: int = setting(
        "2048",
        _metadata_bytes,
        "Most bytes of a document's or batch's metadata as compact UTF-8 JSON, at most 4096"
        " (else 422 invalid_metadata)",
    )
    blob_url: BlobUrl = setting(
        "",
        BlobUrl.parse,
        "Where uploaded bytes wait and finished documents' sources are kept: redis: (in"
        " Redis), file:///path (a directory shared by API and workers) or s3://bucket/prefix"
        " (S3-compatible storage: RELAY_S3_*); empty = RELAY_BLOB_DIR's choice. See"
        ' docs/deploy.md, "Where uploaded bytes wait"',
    )
    blob_dir: str = setting(
        "",
        str,
        "The older spelling of RELAY_BLOB_URL=file:///path (empty with RELAY_BLOB_URL empty:"
        " in Redis); beside RELAY_BLOB_URL=s3:// or redis: the directory is still read and"
        " emptied for the documents whose bytes were written there",
    )
    blob_threads: int = setting(
        "8",
        _positive_at_most(256),
        "Threads of an API process for blob-store calls (S3, the directory): uploads and page"
        " images wait for one within RELAY_BLOB_TIMEOUT",
    )
    blob_timeout: float = setting(
        "30",
        _positive_float,
        "Seconds an API request waits on the blob store in all (a free thread, the call and"
        " its retries); past it 503 blob_store_unavailable and nothing is kept of the upload",
    )
    blob_wait: float = setting(
        "10m",
        parse_duration,
        "How long a document whose bytes a worker cannot fetch (the blob store unreachable)"
        " waits, tried again after 1 s, 2 s, ... up to 30 s apart, before it fails"
        " blob_store_unavailable (s, m, h, d suffixes)",
    )
    s3_endpoint_url: str = setting(
        "",
        str,
        "S3 API endpoint (https://..., or http:// for a local server); empty = the SDK's"
        " AWS_ENDPOINT_URL, else AWS S3 of the region",
    )
    s3_region: str = setting(
        "",
        str,
        "Region of the bucket; empty = the SDK's AWS_DEFAULT_REGION (or its config file)",
    )
    s3_access_key_id: str = setting(
        "",
        str,
        "Access key id; empty (with RELAY_S3_SECRET_ACCESS_KEY empty) = the SDK's own chain:"
        " AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, its files, an instance or pod role",
    )
    s3_secret_access_key: Secret = setting(
        "",
        Secret,
        "Secret access key of RELAY_S3_ACCESS_KEY_ID (never printed)",
    )
    s3_verify_tls: bool = setting(
        "true",
        _bool,
        "Check the endpoint's TLS certificate (false only for a test server on a closed network)",
    )
    s3_ca_bundle: str = setting(
        "",
        str,
        "PEM file of the CAs that sign the endpoint's certificate; empty = the SDK's own"
        " (AWS_CA_BUNDLE, else certifi's)",
    )
    s3_path_style: bool = setting(
        "false",
        _bool,
        "Address the bucket in the path (endpoint/bucket/key), as MinIO, Ceph and SeaweedFS"
        " behind one hostname want; false = the SDK's choice (bucket.endpoint)",
    )
    s3_connect_timeout: float = setting(
        "2",
        _positive_float,
        "Seconds to connect to the S3 endpoint (each try)",
    )
    s3_read_timeout: float = setting(
        "10",
        _positive_float,
        "Seconds the S3 endpoint may keep one socket read or write waiting (each try)",
    )
    s3_attempts: int = setting(
        "3",
        _positive_at_most(10),
        "Tries of one S3 call, the first included (the SDK's standard retry mode: connection"
        " errors, throttling and 5xx answers, with backoff)",
    )
    export_max_tables: int = setting(
        "1000",
        _positive_int,
        "Most tables one export holds (a batch's workbook or ZIP); past it the export is 422"
        " export_too_large, before anything is sent",
    )
    export_max_cells: int = setting(
        "2000000",
        _positive_int,
        "Most cells (grid positions, empty ones included) one export holds, a single table's"
        " included (else 422 export_too_large)",
    )
    export_max_bytes: int = setting(
        str(128 * 1024 * 1024),
        _positive_int,
        "Most bytes of cell text (UTF-8) one export holds (else 422 export_too_large)",
    )
    export_concurrency: int = setting(
        "2",
        _positive_int,
        "Exports one API process builds at a time (each takes a thread and a core while it"
        " builds); past it an export is 503 export_busy with Retry-After",
    )
    keep_sources: bool = setting(
        "true",
        _bool,
        "Keep a finished document's uploaded bytes until its batch is deleted or purged"
        " (RELAY_RETENTION), for its page images; not counted in"
        " RELAY_ACCOUNT_MAX_PENDING_BYTES. In Redis (RELAY_BLOB_URL) they take its memory: the"
        " sources of the retention window (docs/deploy.md)",
    )
    page_image_max_side: int = setting(
        "2000",
        _page_side,
        "Longest side in pixels of a page image (GET /documents/{id}/pages/{n}, the"
        " console's review page); ?width= is clamped to it (16-10000)",
    )
    page_renders: int = setting(
        "2",
        _positive_at_most(64),
        "Page images an API process renders at once, each in a child process bounded by"
        " RELAY_EXTRACT_MEMORY and RELAY_MAX_IMAGE_PIXELS; one account at most half of them",
    )
    page_render_timeout: float = setting(
        "10",
        _positive_float,
        "Seconds one page image may take to render (else 422 page_not_renderable); a"
        " request waits at most this long for a free render too (else 503 render_busy)",
    )
    status_rate_limit: RateLimit = setting(
        "120/minute",
        RateLimit.parse,
        "Sliding-window limit per API key over the status endpoints",
    )
    account_max_pending_bytes: int = setting(
        str(256 * 1024 * 1024),
        _positive_int,
        "Per account: uploaded bytes held in Redis awaiting processing (past it uploads are"
        " 429); bytes in a directory or S3 (RELAY_BLOB_URL) are not counted",
    )
    account_upload_rate_limit: RateLimit = setting(
        "600/minute",
        RateLimit.parse,
        "Per account: sliding-window limit on POST /documents",
    )
    account_process_rate_limit: RateLimit = setting(
        "600/minute",
        RateLimit.parse,
        "Per account: sliding-window limit on POST /batches/{name}/process",
    )
    account_retry_rate_limit: RateLimit = setting(
        "60/minute",
        RateLimit.parse,
        "Per account: sliding-window limit on manual delivery retries",
    )
    write_lease_slots: int = setting(
        "8",
        _lease_slots,
        "Most slots of an account's write window an API process leases at once (1 = none)",
    )
    write_lease_ms: int = setting(
        "1000",
        _lease_ms,
        "How long an API process may admit writes from a lease of window slots (ms)",
    )
    auth_failure_rate_limit: RateLimit = setting(
        "60/minute",
        RateLimit.parse,
        "Per client address: requests with a missing or invalid API key; past it every"
        " request from the address is 429, a valid key too (relay keys unblock lifts it)",
    )
    forwarded_allow_ips: str = setting(
        "127.0.0.1",
        str,
        "Proxies trusted for X-Forwarded-For (the client address of the limits above)",
    )
    http_max_header_bytes: int = setting(
        "32768",
        _positive_int,
        "`relay serve`: largest request line plus headers in bytes (else 431, closed)",
    )
    http_max_headers: int = setting(
        "100",
        _positive_int,
        "`relay serve`: most headers in one request (else 431, closed)",
    )
    http_header_timeout: float = setting(
        "10",
        _positive_float,
        "`relay serve`: seconds a client has to send a request's line and headers, from its"
        " first byte or from the connection's start (else 408, closed)",
    )
    http_body_timeout: float = setting(
        "60",
        _positive_float,
        "`relay serve`: seconds a client has to send a request's body after its headers"
        " (else 408, closed)",
    )
    http_keepalive_timeout: int = setting(
        "20",
        _positive_int,
        "`relay serve`: seconds an idle keep-alive connection stays open after a response",
    )
    http_max_connections: int = setting(
        "1000",
        _positive_int,
        "`relay serve`: open connections at most; one more is answered 503 and closed",
    )
    lease_seconds: float = setting(
        "60",
        _positive_float,
        "A worker's claim on a document lasts this long without renewal",
    )
    background_after: float = setting(
        "2",
        _positive_float,
        "Seconds a document may extract while others wait before its worker moves it to"
        " the background and serves them",
    )
    background_extractions: int = setting(
        "2",
        _non_negative_int,
        "Documents one worker process extracts in the background at once (0: none)",
    )
    claim_documents: int = setting(
        "10",
        _claim_documents,
        "Documents a worker claims in one turn of the fair queue, from one batch, while they"
        " are small (RELAY_CLAIM_BYTES); 1 to claim one at a time (1 to 1000)",
    )
    claim_bytes: int = setting(
        str(64 * 1024),
        _non_negative_int,
        "Bytes the documents of one claim may add up to past its first (a large document is"
        " claimed alone)",
    )
    process_linger: float = setting(
        "1",
        _non_negative_float,
        "Seconds a processing job with nothing left to claim waits on the processing bell for"
        " more before it ends (within its 2 s budget; 0: it ends at once; never with"
        " `relay worker --burst`)",
    )
    slice_pages: int = setting(
        "4",
        _non_negative_int,
        "A scanned PDF or a TIFF of more pages than this is read in slices of this many pages"
        " that any processing worker takes in fair order, then joined (0: always read whole)",
    )
    max_document_attempts: int = setting(
        "3",
        _positive_int,
        "Claims of one document, or of one slice of it, before it fails with worker_lost",
    )
    sweep_interval: float = setting(
        "1.0",
        _positive_float,
        "Seconds between detector sweeps",
    )
    retention: float = setting(
        "30d",
        parse_duration,
        "A finished batch (none of its deliveries pending) is purged this long after it"
        " completed (s, m, h, d suffixes)",
    )
    disable_after: float = setting(
        "5d",
        parse_duration,
        "A batch webhook whose attempts have all failed this long (no success since the first"
        " failure) is disabled (s, m, h, d suffixes)",
    )
    document_events_wait: float = setting(
        "5m",
        parse_duration,
        "How long a batch.completed delivery waits, from its first wait, for a document event"
        " of its batch that has no delivery yet (made within a second normally; this bounds"
        " the wait for one never made); one whose delivery is pending holds it until that"
        " delivery ends (s, m, h, d suffixes)",
    )
    purge_steps: int = setting(
        "20",
        _positive_int,
        "Purge steps (a batch, or 500 more documents of a big one) per shard per sweep",
    )
    max_stored_attempts: int = setting(
        "20",
        _at_least_two,
        "Attempts kept per delivery: the first and the latest ones (the count stays true)",
    )
    retry_schedule: tuple[float, ...] = setting(
        "5,300,1800,7200,18000,36000,36000",
        _schedule,
        "Seconds to wait after each failed attempt (len+1 attempts in all)",
    )
    retry_jitter: float = setting(
        "0.1",
        float,
        "Up to this fraction is added to each retry delay",
    )
    delivery_timeout: float = setting(
        "15",
        _positive_float,
        "Seconds an attempt may last, connect to last byte (wall clock); then it is cut",
    )
    delivery_claim_size: int = setting(
        "64",
        _positive_int,
        "Due deliveries the delivery engine claims with one script (the claim size)",
    )
    delivery_concurrency: int = setting(
        "64",
        _positive_int,
        "Attempts in flight per worker process (half at most to unanswering receivers)",
    )
    delivery_per_destination: int = setting(
        "8",
        _positive_int,
        "Attempts in flight per worker process to one scheme://host:port",
    )
    test_send_concurrency: int = setting(
        "8",
        _positive_int,
        "Test sends (POST .../webhook/test) in flight per API process, on threads of their"
        " own; more get 503 outbound_busy",
    )
    test_send_concurrency_per_account: int = setting(
        "2",
        _positive_int,
        "Test sends of one account in flight per API process; more get 429 concurrency_limited",
    )
    url_check_concurrency: int = setting(
        "16",
        _positive_int,
        "Callback URL checks (DNS) in flight per API process, on threads of their own; more"
        " get 503 outbound_busy",
    )
    url_check_concurrency_per_account: int = setting(
        "4",
        _positive_int,
        "Callback URL checks of one account in flight per API process; more get 429"
        " concurrency_limited",
    )
    events_max_wait: float = setting(
        "30",
        _positive_float,
        "Seconds a GET /events?wait= is held at most in this process (a client may ask up to"
        " 30; a smaller bound answers sooner, with an empty page)",
    )
    events_max_waiters: int = setting(
        "1000",
        _positive_int,
        "Requests long polling GET /events (wait=) at once in one API process; more get 429",
    )
    events_max_waiters_per_account: int = setting(
        "10",
        _positive_int,
        "Requests of one account long polling its event feeds at once in one API process",
    )
    account_max_inflight: int = setting(
        "32",
        _positive_int,
        "Requests of one account in flight at once in one API process (long polls included);"
        " one more gets 429 too_many_concurrent_requests, Retry-After: 1. Keep it below"
        " RELAY_REDIS_MAX_CONNECTIONS",
    )
    require_verified_webhooks: bool = setting(
        "false",
        _bool,
        "Verify every webhook registration (a signed webhook.verify challenge must be echoed"
        " before anything else is sent to it), as a registration with verify: true does",
    )
    verify_schedule: tuple[float, ...] = setting(
        "1,2,5,10",
        _schedule,
        "Seconds to wait after each failed endpoint verification attempt (len+1 attempts;"
        " then the webhook is disabled)",
    )
    account_verify_rate_limit: RateLimit = setting(
        "10/minute",
        RateLimit.parse,
        "Per account: sliding-window limit on endpoint verifications started (webhook"
        " registrations with verify; repeating a pending one starts none)",
    )
    host_verify_rate_limit: RateLimit = setting(
        "5/minute",
        RateLimit.parse,
        "Per callback host, all accounts together: sliding-window limit on endpoint"
        " verifications started",
    )
    allow_http_targets: bool = setting(
        "false",
        _bool,
        "Allow http:// callback URLs (local work only)",
    )
    allow_private_targets: bool = setting(
        "false",
        _bool,
        "Allow callbacks to loopback/private addresses (local work only)",
    )
    encryption_key: Secret = setting(
        "",
        Secret,
        "Fernet key(s) encrypting signing secrets at rest; comma-separated, first encrypts",
    )
    signing_grace_seconds: float = setting(
        "86400",
        _positive_float,
        "After a rotation the previous signing material keeps signing this long",
    )
    account_rotation_rate_limit: RateLimit = setting(
        "10/hour",
        RateLimit.parse,
        "Per account: sliding-window limit on POST /webhook-signing/rotate (a rotation is"
        " also refused, 409, while the previous one's grace period runs)",
    )
    console_secret: Secret = setting(
        "",
        Secret,
        "Signs console session cookies; empty: derived from the first RELAY_ENCRYPTION_KEY",
    )
    console_session: float = setting(
        "8h",
        parse_duration,
        "A console login lasts this long (s, m, h, d suffixes)",
    )
    log_level: str = setting(
        "info",
        str,
        "debug, info, warning or error",
    )
    log_format: str = setting(
        "text",
        _log_format,
        "text (readable key=value lines) or json (one JSON object per line)",
    )
    # Not a RELAY_ setting: OpenTelemetry's OTEL_* variables as found in the environment and
    # .env (the environment wins), sorted by name; relay.tracing reads them.
    # Not printed: OTEL_EXPORTER_OTLP_HEADERS may carry a collector's credentials.
    otel: tuple[tuple[str, str], ...] = field(default=(), repr=False, metadata={})

    def otel_value(self, name: str) -> str:
        """The ``OTEL_*`` variable ``name`` (stripped; '' when not set)."""
        return next((v.strip() for k, v in self.otel if k == name), "")

    @property
    def tracing(self) -> bool:
        """Whether traces are exported: an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT``
        or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), and neither ``OTEL_SDK_DISABLED=true`` nor
        ``OTEL_TRACES_EXPORTER=none`` turns the SDK off."""
        if self.otel_value("OTEL_SDK_DISABLED").lower() == "true":
            return False
        if self.otel_value("OTEL_TRACES_EXPORTER").lower() == "none":
            return False
        return any(self.otel_value(name) for name in OTEL_ENDPOINTS)

    @property
    def blob_kind(self) -> str:
        """Where uploaded bytes are written: ``redis``, ``dir`` or ``s3`` (RELAY_BLOB_URL,
        else ``dir`` with RELAY_BLOB_DIR, else ``redis``)."""
        return self.blob_url.kind or ("dir" if self.blob_dir else "redis")

    @property
    def blob_directory(self) -> str:
        """The directory of the directory store ('' for none): written with ``dir``, only
        read and emptied beside ``redis`` or ``s3`` (bytes written before a move)."""
        return self.blob_url.directory or self.blob_dir

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
            elif f.name in ("redis_sentinels", "redis_cluster_nodes"):
                text = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in value)
            elif isinstance(value, tuple):
                text = ",".join(f"{v:g}" for v in value)
            elif isinstance(value, bool):
                text = "true" if value else "false"
            else:
                text = str(value)
            out[PREFIX + f.name.upper()] = text
        out.update(self.otel)
        return out


_FIELDS: tuple[_Field, ...] = tuple(
    _Field(f.name, *f.metadata["setting"]) for f in fields(Settings) if "setting" in f.metadata
)
_BY_ENV = {PREFIX + f.name.upper(): f for f in _FIELDS}
# Settings renamed so that a name keeps one meaning ("batch" is a customer's batch of
# documents); the old names are still read, the new one wins when both are set.
_RENAMED = {
    "RELAY_DELIVERY_BATCH": "RELAY_DELIVERY_CLAIM_SIZE",
    "RELAY_PURGE_BATCH": "RELAY_PURGE_STEPS",
}


def read_dotenv(path: Path) -> dict[str, str]:
    """A ``.env`` file's ``KEY=VALUE`` bindings, parsed by python-dotenv (quotes, escapes,
    ``export``, comments, multi-line values), taken literally (no ``${VAR}`` expansion). A
    line that does not parse, or a key without ``=``, stops the process with its line."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    with path.open(encoding="utf-8") as stream:
        for binding in parse_stream(stream):
            where = f"{path}:{binding.original.line}"
            if binding.error:
                raise ConfigError(f"{where}: expected KEY=VALUE")
            if binding.key is None:  # a comment or a blank line
                continue
            if binding.value is None:
                raise ConfigError(f"{where}: expected KEY=VALUE, got {binding.key!r} alone")
            values[binding.key] = binding.value
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
    for old, new in _RENAMED.items():
        if old in merged:
            merged.setdefault(new, merged.pop(old))
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
    values["otel"] = tuple(sorted((k, v) for k, v in merged.items() if k.startswith(OTEL_PREFIX)))
    bad = set(overrides) - set(values)
    if bad:
        raise ConfigError(f"unknown override(s): {sorted(bad)}")
    values.update(overrides)
    _check_topology(values)
    _check_blobs(values)
    settings = Settings(**values)
    _check_otel(settings)
    return settings


def _check_topology(values: Mapping[str, Any]) -> None:
    """The Redis settings that cannot go together."""
    if values["redis_cluster_nodes"] and values["redis_sentinels"]:
        raise ConfigError(
            "RELAY_REDIS_CLUSTER_NODES and RELAY_REDIS_SENTINELS are exclusive: the state lives"
            " on a Cluster or on a primary the Sentinels name, not both"
        )
    if values["redis_cluster_nodes"] and not values["queue_redis_url"]:
        raise ConfigError(
            "RELAY_REDIS_CLUSTER_NODES needs RELAY_QUEUE_REDIS_URL: RQ's queues cannot live on"
            " a Cluster (their keys and transactions span slots); give them a small Redis"
        )


def _check_blobs(values: Mapping[str, Any]) -> None:
    """RELAY_BLOB_URL and its older spelling RELAY_BLOB_DIR: one directory at most, and the
    S3 credentials given in pairs."""
    url, directory = values["blob_url"], values["blob_dir"]
    if url.kind == "dir" and directory and Path(directory) != Path(url.directory):
        raise ConfigError(
            f"RELAY_BLOB_URL={url.text!r} and RELAY_BLOB_DIR={directory!r} name two directories:"
            " keep one (RELAY_BLOB_DIR is the older spelling of RELAY_BLOB_URL=file:///path)"
        )
    if bool(values["s3_access_key_id"]) != bool(values["s3_secret_access_key"]):
        raise ConfigError(
            "RELAY_S3_ACCESS_KEY_ID and RELAY_S3_SECRET_ACCESS_KEY go together (or leave both"
            " empty for the SDK's own credentials)"
        )


def _check_otel(settings: Settings) -> None:
    """The OTEL_* values relay's tracing cannot work with, refused at start rather than met
    at the first export: relay exports traces over OTLP/HTTP (protobuf) only."""
    if not settings.tracing:
        return
    for name in OTEL_ENDPOINTS:
        url = settings.otel_value(name)
        if url and not url.lower().startswith(("http://", "https://")):
            raise ConfigError(f"{name}={url!r}: expected an http:// or https:// URL")
    exporter = settings.otel_value("OTEL_TRACES_EXPORTER").lower()
    if exporter not in ("", "otlp"):
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER={exporter!r}: relay exports traces with otlp only (or none)"
        )
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = settings.otel_value(name)
        if protocol:
            if protocol != "http/protobuf":
                raise ConfigError(
                    f"{name}={protocol!r}: relay exports traces over http/protobuf only"
                )
            break  # the traces' own protocol decides over the general one


def export_otel(settings: Settings) -> None:
    """Put the ``OTEL_*`` variables that came from ``.env`` into this process's environment,
    where the OpenTelemetry SDK reads them (it reads no file); one already there stays."""
    for name, value in settings.otel:
        os.environ.setdefault(name, value)


def env_example() -> str:
    """The text of ``.env.example``: every setting, its default, one line of meaning."""
    lines = ["# relay configuration: every RELAY_ variable, its default and meaning.", ""]
    for f in _FIELDS:
        lines.append(f"# {f.doc}")
        lines.append(f"{PREFIX}{f.name.upper()}={f.default}")
    return "\n".join(lines) + "\n"


def settings_doc() -> str:
    """The text of ``docs/settings.md``: every setting as a table row (variable, default,
    meaning), from the same fields as ``.env.example``."""
    lines = [
        "# Settings",
        "",
        "Every `RELAY_*` variable, read from the environment and `.env` at start (an unknown",
        "one is an error). Generated from `relay.config.Settings` (`relay config docs`), as",
        "`.env.example` is (`relay config example`); a test keeps the three the same.",
        "Durations take `30d`, `12h`, `15m`, `4s` or a number of seconds.",
        "",
        "| variable | default | meaning |",
        "| --- | --- | --- |",
    ]
    for f in _FIELDS:
        default = f"`{f.default}`" if f.default else "(empty)"
        doc = f.doc.replace("|", "\\|")
        lines.append(f"| `{PREFIX}{f.name.upper()}` | {default} | {doc} |")
    return "\n".join([*lines, *_OTEL_DOC]) + "\n"


# The OpenTelemetry SDK's variables relay's tracing reads or documents (docs/deploy.md,
# "Tracing"); the SDK's own documentation has the rest.
_OTEL_DOC = (
    "",
    "## Tracing: OpenTelemetry's own variables",
    "",
    "Traces are configured by the OpenTelemetry SDK's `OTEL_*` variables, not `RELAY_*` ones",
    '(docs/deploy.md, "Tracing"). relay reads them from the environment and `.env` (the',
    "environment wins) to decide whether to trace and refuses at start what it cannot export",
    "with; the SDK reads them itself. With no endpoint set, tracing is off and costs nothing.",
    "",
    "| variable | default | meaning |",
    "| --- | --- | --- |",
    "| `OTEL_EXPORTER_OTLP_ENDPOINT` | (empty: off) | Base URL of an OTLP/HTTP collector"
    " (`/v1/traces` is appended); setting it turns tracing on |",
    "| `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | (empty) | The full URL for traces, instead of"
    " the one above (also turns tracing on) |",
    "| `OTEL_SERVICE_NAME` | `relay` | The resource's `service.name`; each process also"
    " carries `relay.process` (api, worker, detector) |",
    "| `OTEL_RESOURCE_ATTRIBUTES` | (empty) | More resource attributes, `key=value,...` |",
    "| `OTEL_TRACES_SAMPLER` | `parentbased_always_on` | Which traces are kept:"
    " `parentbased_traceidratio` with `OTEL_TRACES_SAMPLER_ARG=0.1` keeps a tenth of relay's"
    " own and follows a client's sampled `traceparent`; `traceidratio` ignores the client's"
    " decision |",
    "| `OTEL_TRACES_SAMPLER_ARG` | (empty) | The ratio of the `*traceidratio` samplers |",
    "| `OTEL_BSP_SCHEDULE_DELAY` | `5000` | Milliseconds between two exports of a process |",
    "| `OTEL_BSP_MAX_QUEUE_SIZE` | `2048` | Spans a process holds for export; past it new"
    " spans are dropped (a slow collector never slows relay) |",
    "| `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` | `512` | Spans per export request |",
    "| `OTEL_BSP_EXPORT_TIMEOUT` | `30000` | Milliseconds an export may take, also the one at"
    " a process's stop: keep it below the stop timeout of the supervisor |",
    "| `OTEL_EXPORTER_OTLP_HEADERS` | (empty) | Headers of every export (`key=value,...`),"
    " e.g. the collector's credentials; never printed |",
    "| `OTEL_EXPORTER_OTLP_TIMEOUT` | `10` | Seconds one export request may take |",
    "| `OTEL_EXPORTER_OTLP_COMPRESSION` | (empty) | `gzip` to compress exports |",
    "| `OTEL_EXPORTER_OTLP_CERTIFICATE` | (empty) | CA bundle to verify an https collector"
    " (`_CLIENT_CERTIFICATE`, `_CLIENT_KEY`: mutual TLS) |",
    "| `OTEL_EXPORTER_OTLP_PROTOCOL` | `http/protobuf` | The only protocol relay exports"
    " with; another is refused at start |",
    "| `OTEL_TRACES_EXPORTER` | `otlp` | `none` turns tracing off; another is refused at start |",
    "| `OTEL_SDK_DISABLED` | `false` | `true` turns tracing off |",
)


def explicitly_set(
    environ: Mapping[str, str] | None = None, dotenv: Path | None = Path(".env")
) -> set[str]:
    """The ``RELAY_`` names set in the environment or ``.env`` (not left to defaults)."""
    env = os.environ if environ is None else environ
    names = {k for k in env if k.startswith(PREFIX)}
    return names | (set(read_dotenv(dotenv)) if dotenv is not None else set())
