"""The JSON Schemas of the OpenAPI document (``components``), OpenAPI 3.1 / JSON Schema.

Every response object is closed (``additionalProperties: false``, all listed fields
required), so a field that drifts from the contract (SPEC section 3) fails the schemathesis
conformance test. The records' objects (Batch, Document, Webhook, Delivery ...) are made
from the types their ``to_json`` returns (``relay.model``'s ``...JSON``, ``relay.shapes``),
and the webhook events' from the types their bodies are built as (``relay.webhook_events``);
the objects nothing else makes (lists, requests) are written here.
"""

from __future__ import annotations

from typing import Any

from relay.delivery.ssrf import CALLBACK_URL_PATTERN
from relay.model import (
    BATCH_NAME_PATTERN,
    DELIVERY_ID_PATTERN,
    DOCUMENT_ID_PATTERN,
    BatchJSON,
    DeliveryStatus,
    DocumentJSON,
    Status,
    WebhookJSON,
)
from relay.search import RECOVERABLE
from relay.shapes import object_schema, ref
from relay.webhook_events import COMPONENTS

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

# The records' and the webhook events' objects, from their types (model, webhook_events).
_MODELS: dict[str, Any] = {
    name: object_schema(shape, COMPONENTS)
    for shape, name in COMPONENTS.items()
    if shape is not Status
}
_DOCUMENT_PROPS: dict[str, Any] = object_schema(DocumentJSON, COMPONENTS)["properties"]
_BATCH_PROPS: dict[str, Any] = object_schema(BatchJSON, COMPONENTS)["properties"]
_WEBHOOK_PROPS: dict[str, Any] = object_schema(WebhookJSON, COMPONENTS)["properties"]

_NEXT_CURSOR = {
    "type": ["string", "null"],
    "description": "Pass as `cursor` for the next page; null on the last page.",
}

_MSG_ID = {
    "type": "string",
    "pattern": DELIVERY_ID_PATTERN,
    "description": "The delivery's id: the same on every attempt; dedupe on it.",
}

SCHEMAS: dict[str, Any] = {
    **_MODELS,
    "Error": _obj(
        {
            "error": _obj(
                {
                    "type": {"type": "string", "examples": ["not_found", "rate_limited"]},
                    "message": {"type": "string"},
                }
            )
        }
    ),
    "Status": {"type": "string", "enum": STATUSES},
    "Counts": _obj({s: _COUNT for s in STATUSES}),
    "ResultDocument": _obj(
        {
            **_DOCUMENT_PROPS,
            "line_items": {
                "type": ["array", "null"],
                "items": {"type": "object"},
                "description": (
                    "The extracted rows; null unless the document succeeded. The first "
                    "table's header row gives the keys; a later table is appended only when "
                    "it continues the first (a table split over pages: next page, same "
                    "columns); other tables are in `tables` only."
                ),
            },
            "tables": {
                "type": ["array", "null"],
                "items": ref("Table"),
                "description": (
                    "Every table found, in reading order (page, then top to bottom). For "
                    "CSV, TSV and JSON one table: the line_items as a grid, the header row "
                    "of their keys first. Null unless the document succeeded (and for "
                    "results stored before tables existed); [] when a plug-in extractor "
                    "reports rows only."
                ),
            },
        }
    ),
    "Table": _obj(
        {
            "page": {
                "type": "integer",
                "minimum": 1,
                "description": "The PDF page or TIFF page (1 for any other document).",
            },
            "rows": {
                "type": "array",
                "items": {"type": "array", "items": {"type": ["string", "null"]}},
                "description": (
                    "The grid: every row as long; a spanning cell's text at its top-left "
                    "position, the cells it covers null."
                ),
            },
            "confidence": {
                "type": ["array", "null"],
                "items": {
                    "type": "array",
                    "items": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
                },
                "description": (
                    "Per cell, how sure OCR is of its text (0-1, null for an empty cell), "
                    "in the shape of rows; null when the text comes from a PDF's text layer "
                    "or a CSV, TSV or JSON document."
                ),
            },
        }
    ),
    "BatchResults": _obj(
        {
            **_BATCH_PROPS,
            "documents": {"type": "array", "items": ref("ResultDocument")},
            "next_cursor": _NEXT_CURSOR,
        }
    ),
    "BatchList": _obj(
        {"batches": {"type": "array", "items": ref("Batch")}, "next_cursor": _NEXT_CURSOR}
    ),
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
            }
        },
    },
    "Upload": {
        "type": "object",
        "required": ["file"],
        "additionalProperties": False,
        "properties": {
            "file": {"type": "string", "format": "binary", "contentMediaType": "*/*"},
            "batch_name": {
                "type": "string",
                "pattern": BATCH_NAME_PATTERN,
                "description": "A new batch named batch_<12 characters> when absent.",
            },
        },
    },
    "WebhookRequest": _optional(
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
    ),
    "OperationalWebhook": _obj({k: v for k, v in _WEBHOOK_PROPS.items() if k != "batch_name"}),
    "DeliveryList": _obj(
        {"deliveries": {"type": "array", "items": ref("Delivery")}, "next_cursor": _NEXT_CURSOR}
    ),
    "EventList": _obj(
        {
            "events": {
                "type": "array",
                "items": {
                    "oneOf": [
                        ref("BatchCompletedFeedEvent"),
                        ref("WebhookDisabledFeedEvent"),
                        ref("DeliveryFailedFeedEvent"),
                    ]
                },
                "description": "Oldest first: each event's id (its webhook-id), type, "
                "timestamp and data, as its webhook body has them.",
            },
            "next_cursor": {
                "type": ["string", "null"],
                "pattern": DELIVERY_ID_PATTERN,
                "description": "The id of the last event read (pass it as `after`); the "
                "`after` given when there was none; null when the feed is empty.",
            },
            "has_more": {
                "type": "boolean",
                "description": "More events follow now: read again without waiting.",
            },
        }
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
_EVENT_ID = {**_MSG_ID, "description": "The event's id: the webhook-id of its deliveries."}
for _name in ("BatchCompletedEvent", "WebhookDisabledEvent", "DeliveryFailedEvent"):
    _event = SCHEMAS[_name]
    SCHEMAS[_name.replace("Event", "FeedEvent")] = _obj({"id": _EVENT_ID, **_event["properties"]})
