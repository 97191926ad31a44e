"""The OpenAPI 3.1 document of the whole API, built in code and served as JSON.

Starlette's ``SchemaGenerator`` answers YAML and knows nothing of bodies or responses, so the
document is written out here: every route, parameter, request body, response code and schema
(``openapi_schemas``), with the rate-limit headers (``openapi_parts``). The tests check that
its operations are exactly the app's routes, and schemathesis checks the responses against it.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

import relay
from relay.api.bodies import json_response
from relay.api.openapi_parts import (
    DELIVERY_ID,
    DOC_ID,
    LIMIT,
    LISTING_PAGE,
    NAME,
    PAGE,
    SEARCH_PAGE,
    errors,
    int_header,
    json_body,
    operation,
    rate_headers,
    status_operation,
    string_header,
)
from relay.api.openapi_parts import json_response as response
from relay.api.openapi_schemas import (
    BATCH_NAME_PATTERN,
    DELIVERY_ID_PATTERN,
    DELIVERY_STATUSES,
    QUERY_TIME,
    SCHEMAS,
    ref,
)
from relay.state.model import IDEMPOTENCY_KEY_PATTERN

V1 = "/api/v1"
# Marks a DELETE after which the resource stays readable (documented in its description).
SOFT_DELETE = "x-soft-delete"
# On a DELETE: the paths whose reads still answer after it by design (what it removed is not
# what they show).
STILL_READABLE = "x-still-readable"


_IDEMPOTENCY_KEY: dict[str, Any] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "The client's key for this upload, unique within the batch.",
    "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN},
}


def _document_paths() -> dict[str, Any]:
    upload = {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {"$ref": "#/components/schemas/Upload"},
                "encoding": {"file": {"contentType": "application/octet-stream"}},
            }
        },
    }
    return {
        f"{V1}/documents": {
            "post": operation(
                "uploadDocument",
                "Upload a document into a batch (created if new). Does not process it.",
                "documents",
                {
                    "201": response(
                        "Document",
                        "The queued document.",
                        {
                            "Location": string_header("The document's URL (GET it to poll)."),
                            **rate_headers(),
                        },
                    ),
                    **errors(400, 401, 409, 413, 415, 422),
                },
                params=[_IDEMPOTENCY_KEY],
                body=upload,
                description="With an Idempotency-Key, a retry with the key of an upload the "
                "batch already has answers that document, as it is now, and makes no other: "
                "retry an upload whose answer was lost, or that was answered 503, with its key.",
            )
        },
        f"{V1}/documents/{{id}}": {
            "get": status_operation("getDocument", "The document.", "Document", [DOC_ID])
        },
        f"{V1}/documents/{{id}}/pages/{{n}}": {"get": _page_operation()},
    }


def _page_operation() -> dict[str, Any]:
    """``GET /documents/{id}/pages/{n}`` (relay.api.pages): a PNG, or the errors."""
    described = errors(401, 404, 409, 422, 429, rate_limited=True)
    for code, text in {
        "404": "No such document (another account's is 404 too), or no page n.",
        "409": "document_not_finished (queued or processing); source_gone (canceled, or the "
        "source was dropped: its batch deleted, or sources are not kept); no_pages (CSV, TSV, "
        "JSON have no pages).",
        "422": "validation_error (width is not a whole number); page_not_renderable (the source "
        "is no readable PDF or image, is too large, or its rendering failed).",
        "503": "render_busy (no page renderer freed up in time), store_unavailable or "
        "store_full; see Retry-After.",
    }.items():
        described[code] = {**described[code], "description": text}
    page = {
        "name": "n",
        "in": "path",
        "required": True,
        "description": "The page number, 1 for the first.",
        "schema": {"type": "integer", "minimum": 1},
        "example": 1,
    }
    width = {
        "name": "width",
        "in": "query",
        "required": False,
        "description": "The image's width in pixels: clamped to 16 and to the server's "
        "RELAY_PAGE_IMAGE_MAX_SIDE (the bound on the long side, 2000 by default); absent: as "
        "large as that bound allows.",
        "schema": {"type": "integer", "minimum": 0},
    }
    return operation(
        "getDocumentPage",
        "A finished document's page as a PNG image. Rate-limited status endpoint.",
        "status",
        {
            "200": {
                "description": "The page as displayed (a PDF's /Rotate and an image's EXIF "
                "orientation applied): what a table's bbox and its cells' boxes (fractions of "
                "the page's width and height, origin top left) are drawn on.",
                "content": {"image/png": {"schema": {"type": "string", "format": "binary"}}},
                "headers": {
                    **rate_headers(),
                    "X-Page-Count": int_header("How many pages the document has.", 1),
                    "Cache-Control": string_header("private, max-age=300."),
                },
            },
            **described,
        },
        params=[DOC_ID, page, width],
        description="Sources are kept until their batch is deleted or purged "
        "(RELAY_KEEP_SOURCES); a PDF page is rendered, an image re-encoded, at most "
        "RELAY_PAGE_IMAGE_MAX_SIDE pixels on the long side.",
    )


def _batch_paths() -> dict[str, Any]:
    return {
        f"{V1}/batches": {
            "get": operation(
                "listBatches",
                "The account's batches, newest first.",
                "batches",
                {"200": response("BatchList", "A page of batches."), **errors(401, 422)},
                params=LISTING_PAGE,
            )
        },
        f"{V1}/batches/{{name}}": {
            "get": status_operation(
                "getBatch", "The batch with all_done and counts.", "Batch", [NAME]
            ),
            "delete": operation(
                "deleteBatch",
                "Cancel queued documents; the batch stays readable and accepts no uploads.",
                "batches",
                {"202": response("Batch", "The batch (idempotent)."), **errors(401, 404)},
                params=[NAME],
                description="A soft delete, by design: queued documents become canceled, "
                "processing ones finish, and the batch, its results and its webhook stay "
                "readable (200, with deleted_at set) until retention purges them; uploads into "
                "it are 409 batch_deleted and its name is never reused. A read after this DELETE "
                "answering 200 is therefore not a use after free.",
                extensions={SOFT_DELETE: True},
            ),
        },
        f"{V1}/batches/{{name}}/process": {
            "post": operation(
                "processBatch",
                "Hand every queued, not yet handed document to the workers (idempotent).",
                "batches",
                {
                    "202": response("Batch", "The batch.", rate_headers()),
                    **errors(400, 401, 404, 409, 413, 415, 422),
                },
                params=[NAME],
                body=json_body("ProcessRequest", required=False),
            )
        },
        f"{V1}/batches/{{name}}/results": {
            "get": status_operation(
                "getBatchResults",
                "The batch plus a page of its documents with line_items and tables.",
                "BatchResults",
                [NAME, *PAGE],
                422,
            )
        },
    }


def _webhook_paths() -> dict[str, Any]:
    webhook = f"{V1}/batches/{{name}}/webhook"
    return {
        webhook: {
            "put": operation(
                "putWebhook",
                "Register or replace the batch's callback URL. A completion that was never "
                "delivered is delivered now.",
                "webhooks",
                {
                    "200": response("Webhook", "Replaced."),
                    "201": response("Webhook", "Created."),
                    **errors(400, 401, 404, 409, 413, 415, 422),
                },
                params=[NAME],
                body=json_body("WebhookRequest"),
            ),
            "get": operation(
                "getWebhook",
                "The batch's callback registration.",
                "webhooks",
                {"200": response("Webhook", "The webhook."), **errors(401, 404)},
                params=[NAME],
            ),
            "delete": operation(
                "deleteWebhook",
                "Remove the callback; pending deliveries of the batch become canceled.",
                "webhooks",
                {"200": response("Webhook", "The removed webhook."), **errors(401, 404)},
                params=[NAME],
                description="The registration goes (GET of the webhook answers 404); the "
                "batch's deliveries stay listed, the pending ones canceled, until retention "
                "purges the batch: an operator still finds every delivery and its attempts.",
                extensions={STILL_READABLE: [f"{webhook}/deliveries"]},
            ),
        },
        f"{webhook}/deliveries": {
            "get": operation(
                "listDeliveries",
                "The batch's deliveries, newest first, each with its attempts.",
                "webhooks",
                {"200": response("DeliveryList", "A page of deliveries."), **errors(401, 404, 422)},
                params=[NAME, *PAGE],
            )
        },
        f"{webhook}/deliveries/{{id}}/retry": {
            "post": operation(
                "retryDelivery",
                "Deliver a failed, canceled or succeeded delivery again now (same webhook-id).",
                "webhooks",
                {
                    "202": response("Delivery", "Scheduled now.", rate_headers()),
                    **errors(401, 404, 409),
                },
                params=[NAME, DELIVERY_ID],
            )
        },
        f"{webhook}/test": {
            "post": operation(
                "testWebhook",
                "Send a signed webhook.test event to the batch's webhook now, through the "
                "delivery transport and deadline, and answer with the attempt. Nothing is "
                "recorded: the batch's deliveries are untouched. Counts against the account's "
                "retry rate limit.",
                "webhooks",
                {
                    "200": response("TestSend", "The attempt.", rate_headers()),
                    **errors(401, 404),
                },
                params=[NAME],
            )
        },
        f"{V1}/operational-webhook/test": {
            "post": operation(
                "testOperationalWebhook",
                "Send a signed webhook.test event to the operational webhook now (as "
                "POST /batches/{name}/webhook/test).",
                "webhooks",
                {
                    "200": response("TestSend", "The attempt.", rate_headers()),
                    **errors(401, 404),
                },
            )
        },
        f"{V1}/operational-webhook": {
            "put": operation(
                "putOperationalWebhook",
                "Register or replace the account's operational webhook (and enable it again): "
                "it receives the events webhook.disabled and delivery.failed.",
                "webhooks",
                {
                    "200": response("OperationalWebhook", "Replaced."),
                    "201": response("OperationalWebhook", "Created."),
                    **errors(400, 401, 413, 415, 422),
                },
                body=json_body("WebhookRequest"),
            ),
            "get": operation(
                "getOperationalWebhook",
                "The account's operational webhook.",
                "webhooks",
                {"200": response("OperationalWebhook", "The webhook."), **errors(401, 404)},
            ),
            "delete": operation(
                "deleteOperationalWebhook",
                "Remove the operational webhook; its pending deliveries become canceled.",
                "webhooks",
                {
                    "200": response("OperationalWebhook", "The removed webhook."),
                    **errors(401, 404),
                },
                description="The registration goes; its deliveries stay listed, the pending "
                "ones canceled, as the account's record of what was sent.",
                extensions={STILL_READABLE: [f"{V1}/operational-webhook/deliveries"]},
            ),
        },
        f"{V1}/operational-webhook/deliveries": {
            "get": operation(
                "listOperationalDeliveries",
                "The operational webhook's deliveries (one per event), newest first.",
                "webhooks",
                {"200": response("DeliveryList", "A page of deliveries."), **errors(401, 422)},
                params=PAGE,
            )
        },
        f"{V1}/webhook-signing": {
            "get": operation(
                "getSigningMaterial",
                "The account's signing material (secret whsec_..., public key whpk_...).",
                "webhooks",
                {"200": response("SigningMaterial", "The current material."), **errors(401)},
            )
        },
        f"{V1}/webhook-signing/rotate": {
            "post": operation(
                "rotateSigningMaterial",
                "New secret and key pair; the previous ones keep signing for a grace period.",
                "webhooks",
                {"200": response("SigningMaterial", "The new material."), **errors(401)},
            )
        },
    }


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def _delivery_paths() -> dict[str, Any]:
    search = [
        _query(
            "status",
            "Only deliveries with this status.",
            {"type": "string", "enum": DELIVERY_STATUSES},
        ),
        _query(
            "batch_name",
            "Only the deliveries of this batch (given empty it is 422, as the pattern says).",
            {"type": "string", "pattern": BATCH_NAME_PATTERN},
        ),
        _query("since", "Created at or after this time (RFC 3339).", QUERY_TIME),
        _query("until", "Created before this time (RFC 3339).", QUERY_TIME),
        *SEARCH_PAGE,
    ]
    return {
        f"{V1}/deliveries": {
            "get": operation(
                "searchDeliveries",
                "The account's deliveries across its batches, newest first, each with its "
                "attempts; every filter is exact (indexed), a page costs O(page).",
                "webhooks",
                {"200": response("DeliveryList", "A page of deliveries."), **errors(401, 422)},
                params=search,
            )
        },
        f"{V1}/deliveries/recover": {
            "post": operation(
                "recoverDeliveries",
                "Every failed (or canceled) delivery of the account created in [since, "
                "until) due again now, same webhook-id, fresh retry schedule. Counts as one "
                "manual retry against the account's retry rate limit.",
                "webhooks",
                {
                    "202": response("Recovery", "Made due now.", rate_headers()),
                    **errors(400, 401, 413, 415, 422),
                },
                body=json_body("RecoverRequest"),
            )
        },
    }


def _event_paths() -> dict[str, Any]:
    def feed(types: list[str]) -> list[dict[str, Any]]:
        return [
            _query(
                "after",
                "The id of the last event seen: the events after it (absent: from the oldest "
                "kept). An id that aged out of the feed (RELAY_RETENTION) reads from the "
                "oldest kept; any other id that is not an event of this feed is 404 "
                "not_found.",
                {"type": "string", "pattern": DELIVERY_ID_PATTERN},
            ),
            _query("type", "Only events of this type.", {"type": "string", "enum": types}),
            _query(
                "batch_name",
                "Only the events of this batch.",
                {"type": "string", "pattern": BATCH_NAME_PATTERN},
            ),
            LIMIT,
            _query(
                "wait",
                "Long polling: with nothing after `after`, answer as soon as an event is "
                "recorded, or with an empty page after this many seconds (at most 30). "
                "Bounded per API process and per account (429 too_many_waiters).",
                {"type": "number", "minimum": 0, "maximum": 30},
            ),
        ]

    listed = {"200": response("EventList", "A page of events."), **errors(401, 404, 422)}
    return {
        f"{V1}/events": {
            "get": operation(
                "listEvents",
                "Every event relay created for the account (batch.completed), oldest first, "
                "whether or not a webhook is registered, kept as long as RELAY_RETENTION: a "
                "receiver that was down catches up from the last id it processed. Never "
                "skips or repeats an event.",
                "events",
                listed,
                params=feed(["batch.completed"]),
            )
        },
        f"{V1}/operational-events": {
            "get": operation(
                "listOperationalEvents",
                "The account's operational events (webhook.disabled, delivery.failed), "
                "whether or not an operational webhook is registered; as GET /events.",
                "events",
                listed,
                params=feed(["webhook.disabled", "delivery.failed"]),
            )
        },
    }


def _ops_paths() -> dict[str, Any]:
    status = {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string"}},
    }

    def plain(description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"description": description, "content": {"application/json": {"schema": schema}}}

    spec = operation(
        "getOpenApi",
        "This document (JSON).",
        "meta",
        {"200": plain("The OpenAPI document.", {"type": "object"})},
        public=True,
    )
    unavailable = {
        **response("Error", "Redis is unreachable."),
        "headers": {"Retry-After": int_header("Seconds to wait before retrying.", 1)},
    }
    return {
        f"{V1}/openapi.json": {"get": spec},
        "/openapi.json": {"get": {**spec, "operationId": "getOpenApiRoot"}},
        "/docs": {
            "get": operation(
                "getReference",
                "This API reference as one HTML page (no script, nothing fetched elsewhere).",
                "meta",
                {
                    "200": {
                        "description": "The reference page.",
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    }
                },
                public=True,
            )
        },
        "/healthz": {
            "get": operation(
                "healthz", "The process is up.", "ops", {"200": plain("Up.", status)}, public=True
            )
        },
        "/readyz": {
            "get": operation(
                "readyz",
                "Redis is reachable.",
                "ops",
                {"200": plain("Ready.", status), "503": unavailable},
                public=True,
            )
        },
        "/metrics": {
            "get": operation(
                "metrics",
                "Prometheus metrics (text format 0.0.4).",
                "ops",
                {
                    "200": {
                        "description": "The metrics.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
                public=True,
            )
        },
    }


def _webhook_headers() -> list[dict[str, Any]]:
    def header(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": name,
            "in": "header",
            "required": True,
            "description": description,
            "schema": schema,
        }

    return [
        header(
            "webhook-id",
            "The delivery's id (msg_...), the same on every attempt.",
            {
                "type": "string",
                "pattern": DELIVERY_ID_PATTERN,
            },
        ),
        header(
            "webhook-timestamp",
            "Unix seconds of this attempt; refuse one too far from your clock (e.g. 5 min).",
            {"type": "string", "pattern": "^[0-9]+$"},
        ),
        header(
            "webhook-signature",
            "Space-separated signatures of `{webhook-id}.{webhook-timestamp}.{body}` (Standard "
            "Webhooks): `v1,<base64 HMAC-SHA256>` with the secret (whsec_...) and "
            "`v1a,<base64 Ed25519>` with the key pair (whpk_...), plus the previous ones' "
            "during a rotation. Accept the request if any entry verifies.",
            {"type": "string"},
        ),
        header("user-agent", "relay/<version>.", {"type": "string", "pattern": "^relay/"}),
    ]


def _receiver_responses() -> dict[str, Any]:
    return {
        "2XX": {"description": "Received: the delivery succeeded (answer within the timeout)."},
        "410": {"description": "Gone: the batch's webhook is disabled, no more attempts."},
        "429": {
            "description": "Busy: the next attempt waits at least Retry-After (seconds or an "
            "HTTP date), up to 10 times its scheduled interval."
        },
        "503": {"description": "Unavailable: as 429."},
        "default": {
            "description": "Any other answer, a redirect, a timeout or no connection: the "
            "attempt failed and is retried on the schedule (RELAY_RETRY_SCHEDULE)."
        },
    }


def _batch_completed() -> dict[str, Any]:
    return {
        "post": {
            "operationId": "batchCompleted",
            "summary": "A batch completed: POSTed to the batch's callback URL (PUT "
            "/batches/{name}/webhook) each time it completes, signed, retried until a 2xx.",
            "description": "Sent when the batch's last document reaches a terminal status "
            "(its completion_seq increments), again after new uploads complete it again. At "
            "least once: receivers dedupe on webhook-id. Verify the signature over the exact "
            "body bytes before parsing them.",
            "tags": ["webhooks"],
            "security": [],
            "parameters": _webhook_headers(),
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref("BatchCompletedEvent")}},
            },
            "responses": _receiver_responses(),
        }
    }


def _operational(operation_id: str, summary: str, schema: str) -> dict[str, Any]:
    return {
        "post": {
            "operationId": operation_id,
            "summary": summary,
            "description": "POSTed to the account's operational webhook (PUT "
            "/operational-webhook) through the same pipeline as batch.completed: signed with "
            "the account's material, retried on the same schedule, recorded with its attempts. "
            "No event is raised about the operational webhook's own deliveries.",
            "tags": ["webhooks"],
            "security": [],
            "parameters": _webhook_headers(),
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref(schema)}},
            },
            "responses": _receiver_responses(),
        }
    }


def operational_webhooks() -> dict[str, Any]:
    """The account's operational events, POSTed to its operational webhook."""
    return {
        "webhook.disabled": _operational(
            "webhookDisabled",
            "A batch's webhook was disabled: every attempt failed for RELAY_DISABLE_AFTER, or "
            "the receiver answered 410.",
            "WebhookDisabledEvent",
        ),
        "delivery.failed": _operational(
            "deliveryFailed",
            "A delivery exhausted its retry schedule and is failed (still retryable).",
            "DeliveryFailedEvent",
        ),
    }


def _test_event() -> dict[str, Any]:
    return {
        "post": {
            "operationId": "webhookTest",
            "summary": "A test send (POST /batches/{name}/webhook/test, the console's Test "
            "button): signed like every delivery, sent once, never retried or recorded.",
            "description": "Answer it as you would a real event; its webhook-id is new each "
            "time. data.batch_name is null for the operational webhook.",
            "tags": ["webhooks"],
            "security": [],
            "parameters": _webhook_headers(),
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref("WebhookTestEvent")}},
            },
            "responses": {
                "2XX": {"description": "Reported as succeeded."},
                "default": {"description": "Reported with its status code or error."},
            },
        }
    }


def _verify_event() -> dict[str, Any]:
    return {
        "post": {
            "operationId": "webhookVerify",
            "summary": "An endpoint verification's challenge: sent when a webhook is "
            "registered with verify: true (or RELAY_REQUIRE_VERIFIED_WEBHOOKS), before "
            "anything else. Answer 2xx with data.challenge in the body.",
            "description": "Signed like every event. The webhook stays pending (nothing else "
            "is sent; notifications wait, none is lost) until an answer is 2xx and holds the "
            "challenge; retried on RELAY_VERIFY_SCHEDULE, after which the webhook is disabled "
            "with the reason and a webhook.disabled event. data.batch_name is null for the "
            "operational webhook.",
            "tags": ["webhooks"],
            "security": [],
            "parameters": _webhook_headers(),
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref("WebhookVerifyEvent")}},
            },
            "responses": {
                "2XX": {
                    "description": "Verified when the body holds the challenge (e.g. the "
                    'challenge alone, or {"challenge": "..."}).'
                },
                "default": {"description": "Not verified; retried on the schedule."},
            },
        }
    }


def webhooks() -> dict[str, Any]:
    """The OpenAPI 3.1 ``webhooks``: what relay POSTs to receivers."""
    return {
        "batch.completed": _batch_completed(),
        **operational_webhooks(),
        "webhook.verify": _verify_event(),
        "webhook.test": _test_event(),
    }


@cache
def document() -> dict[str, Any]:
    """The OpenAPI document (built once per process)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "relay",
            "version": relay.__version__,
            "description": "Asynchronous document processing with batch-completion webhooks. "
            'Errors are {"error": {"type", "message"}}.',
        },
        "security": [{"bearerAuth": []}],
        "paths": {
            **_document_paths(),
            **_batch_paths(),
            **_webhook_paths(),
            **_delivery_paths(),
            **_event_paths(),
            **_ops_paths(),
        },
        "webhooks": webhooks(),
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key rk_<prefix>_<secret> (`relay keys create`).",
                }
            },
            "schemas": SCHEMAS,
        },
    }


async def openapi_json(request: Request) -> Response:
    """``GET /openapi.json`` and ``GET /api/v1/openapi.json``: the document as JSON."""
    return json_response(document())
