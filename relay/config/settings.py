"""Every ``RELAY_*`` setting, declared once: a field of :class:`Settings` with its type,
default, parser (``relay.config.values``) and one line of meaning (:func:`setting`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from relay.config.values import (
    DEFAULT_MAX_FILES_PER_UPLOAD,
    OTEL_ENDPOINTS,
    PREFIX,
    BlobUrl,
    RateLimit,
    Secret,
    _at_least_two,
    _bool,
    _claim_documents,
    _lease_ms,
    _lease_slots,
    _log_format,
    _metadata_bytes,
    _metadata_keys,
    _non_negative_float,
    _non_negative_int,
    _ocr_provider,
    _page_side,
    _positive_at_most,
    _positive_float,
    _positive_int,
    _schedule,
    _sentinels,
    _shard_count,
    _shards_delay,
    _wall_factor,
)
from relay.timefmt import parse_duration


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
