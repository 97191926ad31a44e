"""Statuses, records and their public JSON shapes.

Redis hashes come back as ``dict[bytes, bytes]``; the ``from_hash`` constructors turn them
into records and ``to_json`` into the public v1 shapes. The five public statuses are a
closed contract: internal states never leak into a response.

Each public shape is declared once, as the ``TypedDict`` its ``to_json`` returns
(``BatchJSON``, ``DocumentJSON``, ...): mypy holds ``to_json`` to it, and the OpenAPI
document's schemas of these objects are made from it (``relay.shapes``,
``relay.api.openapi_schemas``). The id patterns are ``relay.redis.keyspace``', which mints the ids.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, TypedDict

from relay.redis import keyspace
from relay.shapes import Ref, Schema, components
from relay.state.metadata import MetadataJSON
from relay.state.metadata import decode as decode_metadata
from relay.timefmt import rfc3339

BATCH_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# An upload's Idempotency-Key: 1 to 255 visible ASCII characters.
IDEMPOTENCY_KEY_RE = re.compile(r"[!-~]{1,255}")
# JSON Schema (ECMA-262) patterns, anchored, from the definitions the code checks against.
BATCH_NAME_PATTERN = f"^{BATCH_NAME_RE.pattern}$"
IDEMPOTENCY_KEY_PATTERN = f"^{IDEMPOTENCY_KEY_RE.pattern}$"
DOCUMENT_ID_PATTERN = keyspace.id_pattern("doc")
DELIVERY_ID_PATTERN = keyspace.id_pattern("msg")


def valid_batch_name(name: str) -> bool:
    """Whether a batch can have this name (``BATCH_NAME_RE``)."""
    return BATCH_NAME_RE.fullmatch(name) is not None


class Status(StrEnum):
    QUEUED = "queued"  # uploaded and/or waiting for a worker
    PROCESSING = "processing"  # a worker claimed it and is extracting
    SUCCEEDED = "succeeded"  # extraction finished; line_items filled
    FAILED = "failed"  # extraction could not finish; processing_error says why
    CANCELED = "canceled"  # removed from the queue before processing began


TERMINAL = frozenset({Status.SUCCEEDED, Status.FAILED, Status.CANCELED})
_COUNT_FIELDS = tuple((s, s.value.encode()) for s in Status)


class DeliveryStatus(StrEnum):
    PENDING = "pending"  # waiting for its next attempt (or in one)
    SUCCEEDED = "succeeded"  # the receiver answered 2xx
    FAILED = "failed"  # the retry schedule is exhausted; kept and retryable
    SUPERSEDED = "superseded"  # a newer completion of the batch replaced it first
    CANCELED = "canceled"  # the webhook was removed or disabled


# -- the public JSON shapes ------------------------------------------------------------------

# A time as ``rfc3339`` writes it.
_TIME = Schema(
    format="date-time",
    description="RFC 3339 UTC with milliseconds, e.g. 2026-11-30T04:00:00.123Z",
    pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$",
)
Time = Annotated[str, _TIME]
TimeOrNull = Annotated[str | None, _TIME]
Count = Annotated[int, Schema(minimum=0)]
BatchName = Annotated[str, Schema(pattern=BATCH_NAME_PATTERN)]


class ProcessingErrorJSON(TypedDict):
    code: str
    message: str


class DocumentJSON(TypedDict):
    id: Annotated[str, Schema(pattern=DOCUMENT_ID_PATTERN)]
    batch_name: BatchName
    filename: Annotated[str, Schema(maxLength=255)]
    content_type: str
    size: Count
    status: Annotated[str, Status]
    created_at: Time
    started_at: TimeOrNull
    completed_at: TimeOrNull
    processing_error: Annotated[
        ProcessingErrorJSON | None, Schema(description="Set when the document failed.")
    ]
    metadata: Annotated[MetadataJSON, Ref("Metadata")]  # the upload's `metadata` field
    page_count: Annotated[
        int | None,
        Schema(
            minimum=1,
            description="While a long scan (a PDF or TIFF of more pages than "
            "RELAY_SLICE_PAGES) is processing, read in slices across workers: the pages "
            "it reads. Null otherwise.",
        ),
    ]
    pages_done: Annotated[
        int | None,
        Schema(
            minimum=0,
            description="While page_count is set: how many of those pages are read so far "
            "(it rises as slices finish). Null otherwise.",
        ),
    ]


class BatchJSON(TypedDict):
    batch_name: BatchName
    status: Annotated[str, Status]
    all_done: Annotated[bool, Schema(description="True exactly when completed_at is set.")]
    document_count: Count
    counts: Annotated[dict[str, int], Ref("Counts")]  # one count per Status
    created_at: Time
    started_at: TimeOrNull
    completed_at: TimeOrNull
    deleted_at: TimeOrNull
    completion_seq: Annotated[Count, Schema(description="How many times the batch has completed.")]
    metadata: Annotated[MetadataJSON, Ref("Metadata")]  # the first upload's `batch_metadata`


class VerificationJSON(TypedDict):
    status: Annotated[
        str,
        Schema(
            enum=["none", "pending", "verified", "failed"],
            description="none: not asked (verify: false); pending: the signed "
            "webhook.verify challenge was sent and is not echoed yet, nothing else is "
            "sent meanwhile (notifications wait, none is lost); verified: echoed; "
            "failed: never echoed (the webhook is disabled with the reason, and a "
            "webhook.disabled event is raised).",
        ),
    ]
    verified_at: TimeOrNull


# The event types a batch's webhook may ask for, the default first (the events' bodies are
# relay.state.event_bodies').
WEBHOOK_EVENT_TYPES = ("batch.completed", "document.succeeded", "document.failed")
DEFAULT_WEBHOOK_EVENTS = WEBHOOK_EVENT_TYPES[:1]


class WebhookJSON(TypedDict):
    batch_name: str
    url: str
    events: Annotated[
        list[Annotated[str, Schema(enum=list(WEBHOOK_EVENT_TYPES))]],
        Schema(
            minItems=1,
            uniqueItems=True,
            description="The event types POSTed to the URL: batch.completed (the default), "
            "document.succeeded, document.failed.",
        ),
    ]
    disabled: bool
    disabled_reason: str | None
    created_at: Time
    updated_at: Time
    verification: VerificationJSON


class AttemptJSON(TypedDict):
    number: Annotated[int, Schema(minimum=1)]
    at: Time
    duration_ms: Annotated[float, Schema(type=["integer", "number"], minimum=0)]
    status_code: int | None
    error: Annotated[
        str | None,
        Schema(description="timeout, connection, dns, blocked_destination, http_status"),
    ]
    response_excerpt: Annotated[str | None, Schema(description="First 1 KiB.")]


class DeliveryJSON(TypedDict):
    id: Annotated[
        str,
        Schema(
            pattern=DELIVERY_ID_PATTERN,
            description="The webhook-id header of every attempt.",
        ),
    ]
    batch_name: Annotated[str, Schema(description="~ops for an operational event's delivery.")]
    type: Annotated[
        str,
        Schema(
            description="The event delivered: batch.completed, document.succeeded, "
            "document.failed, webhook.disabled, delivery.failed or webhook.verify."
        ),
    ]
    document_id: Annotated[
        str | None,
        Schema(pattern=DOCUMENT_ID_PATTERN, description="A document event's document; else null."),
    ]
    completion_seq: Annotated[
        Count,
        Schema(description="The batch's completion; 0 for a document or operational event."),
    ]
    url: str
    status: Annotated[str, DeliveryStatus]
    created_at: Time
    next_attempt_at: TimeOrNull
    attempts: list[AttemptJSON]


class SigningKeyJSON(TypedDict):
    secret: Annotated[str, Schema(pattern="^whsec_", description="HMAC key (v1).")]
    public_key: Annotated[str, Schema(pattern="^whpk_", description="Ed25519 key (v1a).")]
    created_at: Time


class PreviousSigningKeyJSON(SigningKeyJSON):
    expires_at: TimeOrNull


class SigningMaterialJSON(SigningKeyJSON):
    previous: Annotated[
        PreviousSigningKeyJSON | None,
        Schema(
            description="The material replaced by the last rotation while it still "
            "signs alongside (grace period); null otherwise."
        ),
    ]


class RecoveryJSON(TypedDict):
    recovered: Annotated[
        Count, Schema(description="Deliveries made due now (same webhook-id, fresh schedule).")
    ]
    skipped: Annotated[
        Count,
        Schema(
            description="Matching deliveries left as they were: their batch's webhook "
            "was removed or is disabled (register it again, then recover)."
        ),
    ]


# The shapes (and enums) that are components of their own in the OpenAPI document.
COMPONENTS = components(
    Status,
    ProcessingErrorJSON,
    DocumentJSON,
    BatchJSON,
    VerificationJSON,
    WebhookJSON,
    AttemptJSON,
    DeliveryJSON,
    SigningMaterialJSON,
    RecoveryJSON,
)


def _s(h: dict[bytes, bytes], field: str, default: str = "") -> str:
    value = h.get(field.encode())
    return default if value is None else value.decode()


def _ms(h: dict[bytes, bytes], field: str) -> int | None:
    value = h.get(field.encode())
    return int(value) if value else None


_count = _ms  # a count that may be absent (b"0" is 0)


def _int(h: dict[bytes, bytes], field: str) -> int:
    value = h.get(field.encode())
    return int(value) if value else 0


@dataclass(frozen=True)
class Document:
    id: str
    account: str
    batch_name: str
    filename: str
    content_type: str
    size: int
    status: Status
    created_at: int
    started_at: int | None
    completed_at: int | None
    error_code: str
    error_message: str
    metadata_json: str = ""  # canonical (relay.state.metadata), "" when none
    # A document read in slices across workers (relay.state.slices): its pages to read and
    # how many are read; None for one read whole.
    page_count: int | None = None
    pages_done: int | None = None

    @classmethod
    def from_hash(cls, h: dict[bytes, bytes]) -> Document:
        return cls(
            id=_s(h, "id"),
            account=_s(h, "account"),
            batch_name=_s(h, "batch"),
            filename=_s(h, "filename"),
            content_type=_s(h, "content_type"),
            size=_int(h, "size"),
            status=Status(_s(h, "status")),
            created_at=_int(h, "created_at"),
            started_at=_ms(h, "started_at"),
            completed_at=_ms(h, "completed_at"),
            error_code=_s(h, "error_code"),
            error_message=_s(h, "error_message"),
            metadata_json=_s(h, "metadata"),
            page_count=_count(h, "page_count"),
            pages_done=_count(h, "pages_done"),
        )

    def new_fields(self, *, blob: str, charged: int, trace: str = "") -> list[str | int]:
        """The hash of this document as an upload creates it, field and value pairs for
        ``HSET`` (``lua/upload.lua`` writes them as given): the one place a new document's
        fields are named; :meth:`from_hash` reads them back. ``blob``: where its bytes wait
        (``relay.state.blobs``); ``charged``: the bytes charged to the account's pending
        counters, which ``counted`` = 1 says are on its total too (whatever releases them
        reports them back to be taken off it); ``trace``: the upload's trace context
        (``relay.tracing``), kept when given."""
        fields: list[str | int] = [
            "id", self.id,
            "account", self.account,
            "batch", self.batch_name,
            "filename", self.filename,
            "content_type", self.content_type,
            "size", self.size,
            "status", self.status.value,
            "created_at", self.created_at,
            "started_at", "",
            "completed_at", "",
            "claims", 0,
            "blob", blob,
            "charged", charged,
            "counted", 1,
        ]  # fmt: skip
        if self.metadata_json:
            fields += ["metadata", self.metadata_json]
        if trace:
            fields += ["trace", trace]
        return fields

    def to_json(self) -> DocumentJSON:
        error: ProcessingErrorJSON | None = (
            {"code": self.error_code, "message": self.error_message}
            if self.status is Status.FAILED and self.error_code
            else None
        )
        progress = self.status is Status.PROCESSING and self.page_count is not None
        return {
            "id": self.id,
            "batch_name": self.batch_name,
            "filename": self.filename,
            "content_type": self.content_type,
            "size": self.size,
            "status": self.status.value,
            "created_at": rfc3339(self.created_at),
            "started_at": rfc3339(self.started_at),
            "completed_at": rfc3339(self.completed_at),
            "processing_error": error,
            "metadata": decode_metadata(self.metadata_json),
            # Progress: shown while processing only (a finished document's pages are done).
            "page_count": self.page_count if progress else None,
            "pages_done": self.pages_done if progress else None,
        }


@dataclass(frozen=True)
class Batch:
    account: str
    name: str
    counts: dict[Status, int]
    created_at: int
    started_at: int | None
    completed_at: int | None
    deleted_at: int | None
    completion_seq: int
    fields_json: str
    metadata_json: str = ""  # canonical (relay.state.metadata), "" when none

    @classmethod
    def from_hash(cls, h: dict[bytes, bytes]) -> Batch:
        # On the status endpoints' hot path: plain lookups, no enum iteration.
        return cls(
            account=_s(h, "account"),
            name=_s(h, "name"),
            counts={s: int(h.get(field) or 0) for s, field in _COUNT_FIELDS},
            created_at=_int(h, "created_at"),
            started_at=_ms(h, "started_at"),
            completed_at=_ms(h, "completed_at"),
            deleted_at=_ms(h, "deleted_at"),
            completion_seq=_int(h, "completion_seq"),
            fields_json=_s(h, "fields", "[]"),
            metadata_json=_s(h, "metadata"),
        )

    @classmethod
    def created(cls, account: str, name: str, *, created_at: int, documents: int) -> Batch:
        """The batch as the upload that creates it makes it: ``documents`` queued."""
        return cls(
            account=account,
            name=name,
            counts={s: documents if s is Status.QUEUED else 0 for s in Status},
            created_at=created_at,
            started_at=None,
            completed_at=None,
            deleted_at=None,
            completion_seq=0,
            fields_json="[]",
        )

    def new_fields(self, *, trace: str = "") -> list[str | int]:
        """The hash of this batch as an upload creates it, field and value pairs for ``HSET``
        (``lua/upload.lua`` writes them as given when the batch does not exist yet): the one
        place a new batch's fields are named; :meth:`from_hash` reads them back. Besides the
        record: ``total``, the documents ever uploaded; ``last_completed_at``, the latest
        completion time kept when the batch is made not done again; ``handed``, how many of
        its documents are handed out (``lua/process.lua``); ``trace``: the upload's trace
        context (``relay.tracing``), kept when given. The batch's metadata is written by the
        script, as the first upload that gives one may come later."""
        fields: list[str | int] = [
            "account", self.account,
            "name", self.name,
            "created_at", self.created_at,
            "started_at", "",
            "completed_at", "",
            "last_completed_at", "0",
            "deleted_at", "",
            "completion_seq", self.completion_seq,
            "total", self.document_count,
        ]  # fmt: skip
        for status, count in self.counts.items():
            fields += [status.value, count]
        fields += ["fields", self.fields_json, "handed", 0]
        if trace:
            fields += ["trace", trace]
        return fields

    @property
    def fields(self) -> list[str]:
        """The field names of the last ``process`` call (empty: every column)."""
        return list(json.loads(self.fields_json))

    @property
    def document_count(self) -> int:
        return sum(self.counts.values())

    @property
    def all_done(self) -> bool:
        return self.completed_at is not None

    @property
    def status(self) -> Status:
        """The aggregate status (spec section 2)."""
        c = self.counts
        if c[Status.QUEUED] or c[Status.PROCESSING] or not self.document_count:
            if c[Status.PROCESSING] or any(c[s] for s in TERMINAL):
                return Status.PROCESSING
            return Status.QUEUED
        for s in (Status.SUCCEEDED, Status.FAILED):
            if c[s]:
                return s
        return Status.CANCELED

    def to_json(self) -> BatchJSON:
        return {
            "batch_name": self.name,
            "status": self.status.value,
            "all_done": self.all_done,
            "document_count": self.document_count,
            "counts": {s.value: n for s, n in self.counts.items()},
            "created_at": rfc3339(self.created_at),
            "started_at": rfc3339(self.started_at),
            "completed_at": rfc3339(self.completed_at),
            "deleted_at": rfc3339(self.deleted_at),
            "completion_seq": self.completion_seq,
            "metadata": decode_metadata(self.metadata_json),
        }


@dataclass(frozen=True)
class Webhook:
    batch_name: str
    url: str
    disabled: bool
    disabled_reason: str
    created_at: int
    updated_at: int
    # Endpoint verification: "" (not asked), pending, verified or failed.
    verification: str = ""
    verified_at: int | None = None
    # The event types asked for (register_webhook.lua keeps them space-separated).
    events: tuple[str, ...] = DEFAULT_WEBHOOK_EVENTS

    @classmethod
    def from_hash(cls, batch_name: str, h: dict[bytes, bytes]) -> Webhook:
        return cls(
            batch_name=batch_name,
            url=_s(h, "url"),
            events=tuple(_s(h, "events").split()) or DEFAULT_WEBHOOK_EVENTS,
            disabled=_s(h, "disabled") == "1",
            disabled_reason=_s(h, "disabled_reason"),
            created_at=_int(h, "created_at"),
            updated_at=_int(h, "updated_at"),
            verification=_s(h, "verification"),
            verified_at=_ms(h, "verified_at"),
        )

    def to_json(self) -> WebhookJSON:
        return {
            "batch_name": self.batch_name,
            "url": self.url,
            "events": list(self.events),
            "disabled": self.disabled,
            "disabled_reason": self.disabled_reason or None,
            "created_at": rfc3339(self.created_at),
            "updated_at": rfc3339(self.updated_at),
            "verification": {
                "status": self.verification or "none",
                "verified_at": rfc3339(self.verified_at),
            },
        }


@dataclass(frozen=True)
class Attempt:
    number: int
    at: int
    duration_ms: float
    status_code: int | None
    error: str | None
    response_excerpt: str

    @classmethod
    def from_json(cls, raw: bytes) -> Attempt:
        d = json.loads(raw)
        return cls(
            number=int(d["number"]),
            at=int(d["at"]),
            duration_ms=float(d["duration_ms"]),
            status_code=d.get("status_code"),
            error=d.get("error"),
            response_excerpt=d.get("response_excerpt") or "",
        )

    def encode(self) -> str:
        return json.dumps(
            {
                "number": self.number,
                "at": self.at,
                "duration_ms": self.duration_ms,
                "status_code": self.status_code,
                "error": self.error,
                "response_excerpt": self.response_excerpt,
            },
            separators=(",", ":"),
        )

    def to_json(self) -> AttemptJSON:
        return {
            "number": self.number,
            "at": rfc3339(self.at),
            "duration_ms": round(self.duration_ms, 1),
            "status_code": self.status_code,
            "error": self.error,
            "response_excerpt": self.response_excerpt,
        }


def _event_type(h: dict[bytes, bytes]) -> str:
    """The type of the event a delivery's hash carries: its ``type`` (a document event's),
    else a completion's (seq > 0), else its body's own (an operational event, a challenge)."""
    kind = _s(h, "type")
    if kind:
        return kind
    if _int(h, "seq") > 0:
        return "batch.completed"
    try:
        body = json.loads(h.get(b"body") or b"{}")
    except ValueError:
        return ""
    found = body.get("type") if isinstance(body, dict) else None
    return found if isinstance(found, str) else ""


@dataclass(frozen=True)
class Delivery:
    id: str
    account: str
    batch_name: str
    completion_seq: int
    url: str
    status: DeliveryStatus
    created_at: int
    next_attempt_at: int | None
    attempts: list[Attempt]  # the kept ones: the first and the latest
    attempt_count: int = 0  # every attempt made, kept or not
    type: str = ""  # the event delivered (_event_type)
    document_id: str = ""  # a document event's document

    @classmethod
    def from_hash(cls, h: dict[bytes, bytes], attempts: list[bytes]) -> Delivery:
        status = DeliveryStatus(_s(h, "status"))
        return cls(
            id=_s(h, "id"),
            account=_s(h, "account"),
            batch_name=_s(h, "batch"),
            type=_event_type(h),
            document_id=_s(h, "doc"),
            completion_seq=_int(h, "seq"),
            url=_s(h, "url"),
            status=status,
            created_at=_int(h, "created_at"),
            next_attempt_at=_ms(h, "next_attempt_at") if status is DeliveryStatus.PENDING else None,
            attempts=[Attempt.from_json(a) for a in attempts],
            attempt_count=max(_int(h, "attempt_count"), len(attempts)),
        )

    def to_json(self) -> DeliveryJSON:
        return {
            "id": self.id,
            "batch_name": self.batch_name,
            "type": self.type,
            "document_id": self.document_id or None,
            "completion_seq": self.completion_seq,
            "url": self.url,
            "status": self.status.value,
            "created_at": rfc3339(self.created_at),
            "next_attempt_at": rfc3339(self.next_attempt_at),
            "attempts": [a.to_json() for a in self.attempts],
        }
