"""The webhook events: their shapes and the exact bytes POSTed for each.

Each event's body is declared once, as a ``TypedDict`` (``BatchCompletedEvent``, ...): the
functions here build it under mypy's eye, and the OpenAPI document's schemas of the events
are made from the same types (``relay.shapes``, ``relay.api.openapi_schemas``). The bytes
are built once per event and sent as they are on every attempt (signatures cover them).
"""

from __future__ import annotations

import json
from typing import Annotated, Literal, TypedDict, cast

from relay.shapes import Ref, Schema, components
from relay.state.metadata import MetadataJSON
from relay.state.metadata import decode as decode_metadata
from relay.state.model import COMPONENTS as RECORDS
from relay.state.model import (
    DELIVERY_ID_PATTERN,
    WEBHOOK_EVENT_TYPES,
    Batch,
    BatchJSON,
    Document,
    DocumentJSON,
    Time,
)
from relay.timefmt import rfc3339

EVENT_TYPE = "batch.completed"
# A document reached succeeded or failed, for a batch whose webhook asks for these events
# (its `events`; docs/receiving-webhooks.md, "Document events").
DOCUMENT_SUCCEEDED = "document.succeeded"
DOCUMENT_FAILED = "document.failed"
DOCUMENT_TYPES = (DOCUMENT_SUCCEEDED, DOCUMENT_FAILED)
# What a batch's webhook may ask for (PUT /batches/{name}/webhook `events`), its default first.
BATCH_WEBHOOK_TYPES = WEBHOOK_EVENT_TYPES
# Operational events, delivered to the account's operational webhook (keys.OPERATIONAL_BATCH).
WEBHOOK_DISABLED = "webhook.disabled"
DELIVERY_FAILED = "delivery.failed"
VERIFY_EVENT = "webhook.verify"  # endpoint verification: a challenge to echo
TEST_EVENT = "webhook.test"  # the test send (relay.delivery.probe)


class BatchCompletedData(BatchJSON):
    results_url: Annotated[
        str,
        Schema(
            format="uri",
            description="GET it (with an API key) for the documents and their rows.",
        ),
    ]


class BatchCompletedEvent(TypedDict):
    type: Literal["batch.completed"]
    timestamp: Annotated[Time, Schema(description="When the batch completed (completed_at).")]
    data: Annotated[
        BatchCompletedData,
        Schema(description="The batch, as GET /batches/{name} answered it then, plus results_url."),
    ]


class DocumentEventData(DocumentJSON):
    batch_metadata: Annotated[
        MetadataJSON,
        Ref("Metadata"),
        Schema(description="The batch's metadata, as its batch.completed event carries it."),
    ]
    results_url: Annotated[
        str,
        Schema(
            format="uri",
            description="The batch's results: GET it (with an API key) for its documents, "
            "this one with its line_items and tables (succeeded) or processing_error.",
        ),
    ]


class DocumentSucceededEvent(TypedDict):
    type: Literal["document.succeeded"]
    timestamp: Annotated[Time, Schema(description="When the document succeeded (completed_at).")]
    data: Annotated[
        DocumentEventData,
        Schema(
            description="The document, as GET /documents/{id} answered it then, plus the "
            "batch's metadata and results_url."
        ),
    ]


class DocumentFailedEvent(TypedDict):
    type: Literal["document.failed"]
    timestamp: Annotated[Time, Schema(description="When the document failed (completed_at).")]
    data: Annotated[
        DocumentEventData,
        Schema(
            description="The document, as GET /documents/{id} answered it then (its "
            "processing_error holds the code and message), plus the batch's metadata and "
            "results_url."
        ),
    ]


class WebhookDisabledData(TypedDict):
    batch_name: str
    url: str
    reason: str


class WebhookDisabledEvent(TypedDict):
    type: Literal["webhook.disabled"]
    timestamp: Annotated[Time, Schema(description="When the webhook was disabled.")]
    data: WebhookDisabledData


class DeliveryFailedData(TypedDict):
    id: Annotated[str, Schema(description="The failed delivery's webhook-id.")]
    batch_name: str
    url: str
    attempts: Annotated[int, Schema(minimum=1)]
    error: str | None
    status_code: int | None


class DeliveryFailedEvent(TypedDict):
    type: Literal["delivery.failed"]
    timestamp: Annotated[Time, Schema(description="When the schedule ran out.")]
    data: DeliveryFailedData


class WebhookTestData(TypedDict):
    batch_name: str | None
    url: str


class WebhookTestEvent(TypedDict):
    type: Literal["webhook.test"]
    timestamp: Annotated[Time, Schema(description="When the test was sent.")]
    data: WebhookTestData


class WebhookVerifyData(TypedDict):
    batch_name: str | None
    url: str
    challenge: Annotated[str, Schema(description="Echo it in the body of a 2xx answer.")]


class WebhookVerifyEvent(TypedDict):
    type: Literal["webhook.verify"]
    timestamp: Annotated[Time, Schema(description="When the challenge was made.")]
    data: WebhookVerifyData


class TestSendJSON(TypedDict):
    """What a test send got back (``relay.delivery.probe.ProbeResult.to_json``)."""

    id: Annotated[
        str,
        Schema(
            pattern=DELIVERY_ID_PATTERN,
            description="The test event's webhook-id (new each time).",
        ),
    ]
    type: Literal["webhook.test"]
    url: str
    at: Annotated[Time, Schema(description="When it was sent.")]
    succeeded: Annotated[bool, Schema(description="The receiver answered 2xx.")]
    status_code: int | None
    duration_ms: Annotated[float, Schema(minimum=0)]
    response_excerpt: Annotated[
        str, Schema(description="The first KiB of the answer, or the error's message.")
    ]
    error: Annotated[
        str | None,
        Schema(
            description="http_status, timeout, connection, dns, blocked_destination...; "
            "null on a 2xx."
        ),
    ]


class _FeedEntry(TypedDict):
    id: Annotated[
        str,
        Schema(
            pattern=DELIVERY_ID_PATTERN,
            description="The event's id: the webhook-id of its deliveries.",
        ),
    ]


# An event as the feeds answer it (``relay.state.event_feed.render``): its id, then its webhook
# body.
class BatchCompletedFeedEvent(_FeedEntry, BatchCompletedEvent):
    pass


class DocumentSucceededFeedEvent(_FeedEntry, DocumentSucceededEvent):
    pass


class DocumentFailedFeedEvent(_FeedEntry, DocumentFailedEvent):
    pass


class WebhookDisabledFeedEvent(_FeedEntry, WebhookDisabledEvent):
    pass


class DeliveryFailedFeedEvent(_FeedEntry, DeliveryFailedEvent):
    pass


FeedEvent = (
    BatchCompletedFeedEvent
    | DocumentSucceededFeedEvent
    | DocumentFailedFeedEvent
    | WebhookDisabledFeedEvent
    | DeliveryFailedFeedEvent
)

# The events' components in the OpenAPI document (the records' too: their data refers to them).
COMPONENTS: dict[type, str] = {
    **RECORDS,
    **components(
        BatchCompletedData,
        BatchCompletedEvent,
        DocumentEventData,
        DocumentSucceededEvent,
        DocumentFailedEvent,
        WebhookDisabledEvent,
        DeliveryFailedEvent,
        WebhookTestEvent,
        WebhookVerifyEvent,
        TestSendJSON,
        BatchCompletedFeedEvent,
        DocumentSucceededFeedEvent,
        DocumentFailedFeedEvent,
        WebhookDisabledFeedEvent,
        DeliveryFailedFeedEvent,
    ),
}


def _bytes(event: object) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def event_body(fields: dict[bytes, bytes]) -> bytes:
    """The exact bytes POSTed for one operational event (an outbox entry with a ``kind``:
    ``emit_event`` in ``_lib.lua`` writes ``delivery.failed`` and ``webhook.disabled``)."""

    def text(name: str) -> str:
        return fields.get(name.encode(), b"").decode()

    at = rfc3339(int(text("at")))
    if text("kind") == DELIVERY_FAILED:
        code = text("status_code")
        failed: DeliveryFailedEvent = {
            "type": "delivery.failed",
            "timestamp": at,
            "data": {
                "id": text("id"),
                "batch_name": text("batch"),
                "url": text("url"),
                "attempts": int(text("attempts") or 0),
                "error": text("error") or None,
                "status_code": int(code) if code else None,
            },
        }
        return _bytes(failed)
    disabled: WebhookDisabledEvent = {
        "type": "webhook.disabled",
        "timestamp": at,
        "data": {"batch_name": text("batch"), "url": text("url"), "reason": text("reason")},
    }
    return _bytes(disabled)


def verify_body(batch_name: str, url: str, challenge: str, at_ms: int) -> bytes:
    """The exact bytes of an endpoint verification's challenge (``webhook.verify``): the
    receiver answers 2xx with ``challenge`` in its body. ``batch_name`` is null for the
    operational webhook."""
    event: WebhookVerifyEvent = {
        "type": "webhook.verify",
        "timestamp": rfc3339(at_ms),
        "data": {"batch_name": batch_name or None, "url": url, "challenge": challenge},
    }
    return _bytes(event)


VERIFY_PREFIX = b'{"type":"' + VERIFY_EVENT.encode() + b'"'


def verify_challenge(body: bytes) -> str | None:
    """The challenge of a ``verify_body``, None for any other delivery body."""
    if not body.startswith(VERIFY_PREFIX):
        return None
    challenge = json.loads(body)["data"]["challenge"]
    return challenge if isinstance(challenge, str) else None


def probe_body(batch_name: str, url: str, at_ms: int) -> bytes:
    """The exact bytes of a test send (``batch_name`` is null for the operational webhook)."""
    event: WebhookTestEvent = {
        "type": "webhook.test",
        "timestamp": rfc3339(at_ms),
        "data": {"batch_name": batch_name or None, "url": url},
    }
    return _bytes(event)


def notification_body(batch: Batch, public_url: str) -> bytes:
    """The exact bytes POSTed for one completion (identical on every attempt)."""
    event: BatchCompletedEvent = {
        "type": "batch.completed",
        # A notification is made for a completed batch: completed_at is set.
        "timestamp": cast(str, rfc3339(batch.completed_at)),
        "data": {**batch.to_json(), "results_url": results_url(public_url, batch.name)},
    }
    return _bytes(event)


def results_url(public_url: str, batch_name: str) -> str:
    """The batch's results, as an event links them."""
    return f"{public_url.rstrip('/')}/api/v1/batches/{batch_name}/results"


def document_body(doc: Document, batch_metadata_json: str, public_url: str) -> bytes:
    """The exact bytes POSTed for one document event (``document.succeeded`` or
    ``document.failed``, from the document's status; identical on every attempt):
    ``doc`` as it ended, ``batch_metadata_json`` the batch's metadata (canonical, "" for
    none)."""
    data: DocumentEventData = {
        **doc.to_json(),
        "batch_metadata": decode_metadata(batch_metadata_json),
        "results_url": results_url(public_url, doc.batch_name),
    }
    # The document has ended: completed_at is set.
    at = cast(str, rfc3339(doc.completed_at))
    if doc.status.value == "succeeded":
        succeeded: DocumentSucceededEvent = {
            "type": "document.succeeded",
            "timestamp": at,
            "data": data,
        }
        return _bytes(succeeded)
    failed: DocumentFailedEvent = {"type": "document.failed", "timestamp": at, "data": data}
    return _bytes(failed)
