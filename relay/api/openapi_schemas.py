"""The JSON Schemas of the OpenAPI document (``components``), OpenAPI 3.1 / JSON Schema.

Every response object is closed (``additionalProperties: false``, all listed fields
required), so a field that drifts from the contract (SPEC section 3) fails the schemathesis
conformance test. The records' objects (Batch, Document, Webhook, Delivery ...) are made
from the types their ``to_json`` returns (``relay.state.model``'s ``...JSON``, ``relay.shapes``),
the webhook events' from the types their bodies are built as (``relay.state.event_bodies``) and
the API's bodies around them (lists, results, errors, the feed) from the types the handlers
build them as (``relay.api.responses``). Written here: the requests (what the handlers
read, not build), ``Counts`` (one count per ``Status``) and ``OperationalWebhook`` (a
``Webhook`` without its batch).
"""

from __future__ import annotations

from typing import Any

from relay.api.responses import COMPONENTS
from relay.config import DEFAULT_MAX_FILES_PER_UPLOAD
from relay.delivery.ssrf import CALLBACK_URL_PATTERN
from relay.extract.pages import DEFAULT_MAX_RANGES, pages_pattern
from relay.shapes import field_schema, object_schema, ref
from relay.state.delivery_search import RECOVERABLE
from relay.state.metadata import MetadataJSON
from relay.state.model import (
    BATCH_NAME_PATTERN,
    DELIVERY_ID_PATTERN,
    DOCUMENT_ID_PATTERN,
    DeliveryStatus,
    Status,
    WebhookJSON,
)

__all__ = ["BATCH_NAME_PATTERN", "DELIVERY_ID_PATTERN", "DOCUMENT_ID_PATTERN", "ref"]

STATUSES = [s.value for s in Status]
DELIVERY_STATUSES = [s.value for s in DeliveryStatus]
RECOVERABLE_STATUSES = [s.value for s in RECOVERABLE]


def _obj(props: dict[str, Any]) -> dict[str, Any]:
    """A closed object schema whose listed properties are all required."""
    return {
        "type": "object",
        "required": list(props),
        "properties": props,
        "additionalProperties": False,
    }


def _optional(names: list[str], props: dict[str, Any]) -> dict[str, Any]:
    """``_obj(props)`` with ``names`` not required."""
    schema = _obj(props)
    return {**schema, "required": [n for n in schema["required"] if n not in names]}


# A time the client sends: RFC 3339 with a zone, any precision (milliseconds count).
QUERY_TIME: dict[str, Any] = {"type": "string", "format": "date-time"}
_COUNT = {"type": "integer", "minimum": 0}

# The objects made from their types: the records' (model), the webhook events'
# (webhook_events) and the API's bodies around them (api.responses).
_MODELS: dict[str, Any] = {
    name: object_schema(shape, COMPONENTS)
    for shape, name in COMPONENTS.items()
    if shape is not Status
}
_WEBHOOK_PROPS: dict[str, Any] = object_schema(WebhookJSON, COMPONENTS)["properties"]

# A registration (PUT /operational-webhook; a batch's takes `events` too).
_WEBHOOK_REQUEST: dict[str, Any] = _optional(
    ["verify"],
    {
        "url": {
            "type": "string",
            "pattern": CALLBACK_URL_PATTERN,
            "description": "An absolute URI, https://<host name>[:port][/path][?query]: a "
            "DNS host name (no IP literal, no userinfo), RFC 3986 characters, no fragment, "
            "at most 2048 characters in all (the pattern bounds it). Beyond this form "
            "the host must resolve, and only to public addresses (no loopback, private, "
            "link-local, CGNAT, multicast or reserved ones), or registration is 422 "
            "invalid_webhook_url with the reason. A relay run for local work "
            "(RELAY_ALLOW_HTTP_TARGETS, RELAY_ALLOW_PRIVATE_TARGETS) also takes http:// "
            "and IP literals.",
        },
        "verify": {
            "type": "boolean",
            "default": False,
            "description": "Verify the endpoint first: relay sends a signed webhook.verify "
            "event whose data.challenge the receiver must echo in a 2xx body; until then "
            "nothing else is sent (notifications wait). Always on with "
            "RELAY_REQUIRE_VERIFIED_WEBHOOKS.",
        },
    },
)

SCHEMAS: dict[str, Any] = {
    **_MODELS,
    "Status": {"type": "string", "enum": STATUSES},
    "Counts": _obj({s: _COUNT for s in STATUSES}),
    "Metadata": field_schema(MetadataJSON, COMPONENTS),
    "ProcessRequest": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "fields": {
                "type": ["array", "null"],
                "maxItems": 100,
                "uniqueItems": True,
                "description": "Keys every row keeps, in this order (a key a row lacks is "
                "null); names are unique. Absent, null or empty: every row keeps its own keys.",
                "items": _obj({"name": {"type": "string", "minLength": 1, "maxLength": 128}}),
            },
            "pages": {
                "type": ["string", "null"],
                "pattern": pages_pattern(DEFAULT_MAX_RANGES),
                "examples": ["1-3,12"],
                "description": "Read only these pages of each PDF or TIFF handed out by this "
                "call: page numbers and ranges (first-last, inclusive) separated by commas, "
                "in any order, overlaps merged; at most RELAY_MAX_PAGE_RANGES of them "
                f"(default {DEFAULT_MAX_RANGES}). Tables keep their page's own number (page 12 "
                "stays 12). Pages past a document's end are left out; a document none of whose "
                "pages is asked for fails with pages_out_of_range. Another image is one page; "
                "CSV, TSV, JSON, XLSX, DOCX and HTML have none (read whole). A range that ends "
                "before it starts (3-1) is 422 invalid_pages, as is anything the pattern "
                "refuses. Kept with each document: one handed out again after a lost worker is "
                "read with the same pages. Absent or null: every page.",
            },
        },
    },
    "Upload": {
        "type": "object",
        "required": ["file"],
        "additionalProperties": False,
        "properties": {
            "file": {
                "description": "One file part, or several (each named file), each a "
                "document: CSV, TSV, JSON, PDF, XLSX, DOCX, HTML, or a PNG, JPEG, TIFF or WebP "
                "image (recognised by its bytes first, then its declared type, then its name; "
                "any other is stored and fails with unsupported_format when processed). At "
                "most RELAY_MAX_FILES_PER_UPLOAD of them (default "
                f"{DEFAULT_MAX_FILES_PER_UPLOAD}; more is 422 too_many_files, nothing made), "
                "within RELAY_MAX_UPLOAD_BYTES together (else 413). All of them are made or "
                "none: the request is refused whole (quota, rate limit, a bad part). Each "
                "keeps its part's filename and content type. One file is one part, as it "
                "always was, and is answered as a Document; several are answered as "
                "UploadedDocuments.",
                "type": "array",
                "items": {"type": "string", "format": "binary", "contentMediaType": "*/*"},
                "minItems": 1,
                "maxItems": DEFAULT_MAX_FILES_PER_UPLOAD,
            },
            "batch_name": {
                "type": "string",
                "pattern": BATCH_NAME_PATTERN,
                "description": "A new batch named batch_<12 characters> when absent.",
            },
            "metadata": {
                **ref("Metadata"),
                "description": "The document's metadata: a JSON object (the part's text), "
                "returned with the document and in the batch's results; with several files, "
                "every document's (one part for all: upload files that need their own in "
                "requests of their own). Outside the Metadata rules: 422 invalid_metadata, "
                "nothing created.",
            },
            "batch_metadata": {
                **ref("Metadata"),
                "description": "The batch's metadata: a JSON object (the part's text), "
                "returned with the batch, in its results, in its batch.completed webhooks and "
                "in the event feed. Set once: the first upload that gives it (normally the one "
                "that creates the batch) sets it; a later upload may give the same object "
                "again (key order and spacing do not matter) or leave it out; another object "
                "is 409 batch_metadata_conflict, nothing created. {} is no metadata. Outside "
                "the Metadata rules: 422 invalid_metadata, nothing created.",
            },
        },
    },
    "WebhookRequest": _WEBHOOK_REQUEST,
    "BatchWebhookRequest": {
        **_WEBHOOK_REQUEST,
        "properties": {
            **_WEBHOOK_REQUEST["properties"],
            "events": {
                **_WEBHOOK_PROPS["events"],
                "default": ["batch.completed"],
                "description": "The event types POSTed to the URL, each once: "
                "batch.completed (the default, as when absent), document.succeeded and "
                "document.failed (one for each document of the batch that reaches that "
                "status from the registration on; at the receiver, a batch's document events "
                "come before its batch.completed). Any other value is 422.",
            },
        },
    },
    "OperationalWebhook": _obj(
        {k: v for k, v in _WEBHOOK_PROPS.items() if k not in ("batch_name", "events")}
    ),
    "RecoverRequest": {
        "type": "object",
        "description": "Every field is a string when given: `null` is refused with 422 like "
        "any other value of the wrong type (leave a field out to take its default).",
        "required": ["since"],
        "properties": {
            "since": {**QUERY_TIME, "description": "Deliveries created at or after (RFC 3339)."},
            "until": {**QUERY_TIME, "description": "... and before (RFC 3339; default: now)."},
            "status": {
                "type": "string",
                "enum": RECOVERABLE_STATUSES,
                "default": DeliveryStatus.FAILED.value,
            },
        },
        "additionalProperties": False,
    },
}
