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
    error_response,
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
from relay.config import DEFAULT_MAX_FILES_PER_UPLOAD, OCR_PROVIDERS
from relay.exports.formats import (
    BATCH_FORMATS,
    CSV,
    HTML,
    JSON,
    MARKDOWN,
    TABLE_FORMATS,
    XLSX,
    ZIP,
)
from relay.state.event_feed import BATCH_TYPES, OPERATIONAL_TYPES
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
    "description": "The client's key for this upload (all its files), unique within the batch.",
    "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN},
}


def _document_paths() -> dict[str, Any]:
    upload = {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {"$ref": "#/components/schemas/Upload"},
                "encoding": {
                    "file": {"contentType": "application/octet-stream"},
                    "metadata": {"contentType": "application/json"},
                    "batch_metadata": {"contentType": "application/json"},
                },
            }
        },
    }
    return {
        f"{V1}/documents": {
            "post": operation(
                "uploadDocument",
                "Upload one or several documents into a batch (created if new). Does not "
                "process them.",
                "documents",
                {
                    "201": {
                        "description": "One file: the queued document (with its Location). "
                        'Several: {"documents": [...]}, one a file in the parts\' order.',
                        "content": {
                            "application/json": {
                                "schema": {"oneOf": [ref("Document"), ref("UploadedDocuments")]}
                            }
                        },
                        "headers": {
                            "Location": {
                                **string_header(
                                    "The document's URL (GET it to poll); with one file only."
                                ),
                                "required": False,
                            },
                            **rate_headers(),
                        },
                    },
                    **_upload_errors(),
                },
                params=[_IDEMPOTENCY_KEY],
                body=upload,
                description="Each file part is a document; all of them are made, in one "
                "step, or none. Limits: RELAY_MAX_FILES_PER_UPLOAD files (default "
                f"{DEFAULT_MAX_FILES_PER_UPLOAD}; more: 422 too_many_files) and "
                "RELAY_MAX_UPLOAD_BYTES for the files together (413 payload_too_large). "
                "Quota: the files' bytes together count against the account's pending-bytes "
                "quota; past it, 429 quota_exceeded and nothing is made. Rate limit: the "
                "request counts one upload a file against RELAY_ACCOUNT_UPLOAD_RATE_LIMIT, all "
                "or none (429 rate_limited, nothing made or counted). Idempotency: with an "
                "Idempotency-Key, a retry with the key of an upload the batch already has, and "
                "the same files (names, types, bytes, order) and metadata, answers that upload's "
                "documents as they are now, in the same shape, and makes no other; the key "
                "with another request is 409 idempotency_key_reused. Retry an upload whose "
                "answer was lost, or that was answered 503, with its key.",
            )
        },
        f"{V1}/documents/{{id}}": {
            "get": status_operation("getDocument", "The document.", "Document", [DOC_ID])
        },
        f"{V1}/documents/{{id}}/pages/{{n}}": {"get": _page_operation()},
    }


def _upload_errors() -> dict[str, Any]:
    """``POST /documents``' errors: its 503 names the blob store's too."""
    described = errors(400, 401, 409, 413, 415, 422)
    described["503"] = {
        **described["503"],
        "description": "blob_store_unavailable (the store of uploaded bytes, S3 or a "
        "directory, refused or did not answer within RELAY_BLOB_TIMEOUT: nothing was kept), "
        "store_unavailable or store_full; see Retry-After.",
    }
    return described


def _page_operation() -> dict[str, Any]:
    """``GET /documents/{id}/pages/{n}`` (relay.api.pages): a PNG, or the errors."""
    described = errors(401, 404, 409, 422, 429, rate_limited=True)
    for code, text in {
        "404": "No such document (another account's is 404 too), or no page n.",
        "409": "document_not_finished (queued or processing); source_gone (canceled, or the "
        "source was dropped: its batch deleted, or sources are not kept); no_pages (CSV, TSV, "
        "JSON, XLSX, DOCX and HTML have no pages).",
        "422": "validation_error (width is not a whole number); page_not_renderable (the source "
        "is no readable PDF or image, is too large, or its rendering failed).",
        "503": "render_busy (no page renderer freed up in time), blob_store_unavailable (the "
        "source's store, S3 or a directory, does not answer), store_unavailable or store_full; "
        "see Retry-After.",
    }.items():
        described[code] = {**described[code], "description": text}
    page = {
        "name": "n",
        "in": "path",
        "required": True,
        "description": "The page number, 1 for the first.",
        "schema": {"type": "integer", "minimum": 1, "maximum": 999_999_999},
        "example": 1,
    }
    width = {
        "name": "width",
        "in": "query",
        "required": False,
        "description": "The image's width in pixels: clamped to 16 and to the server's "
        "RELAY_PAGE_IMAGE_MAX_SIDE (the bound on the long side, 2000 by default); absent: as "
        "large as that bound allows.",
        "schema": {"type": "integer", "minimum": 0, "maximum": 999_999_999},
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
                "Hand every queued, not yet handed document to the workers (idempotent); with "
                "pages, only those pages of each PDF or TIFF it hands out are read.",
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


def _export_query(formats: list[str], default: str, csv_inside: str) -> list[dict[str, Any]]:
    return [
        _query(
            "format",
            f"The file's format (default {default}). `Accept` is not consulted.",
            {"type": "string", "enum": formats, "default": default},
        ),
        _query(
            "bom",
            f"Start {csv_inside} with a UTF-8 byte order mark, for Excel (default false).",
            {"type": "boolean", "default": False},
        ),
    ]


def _export_answer(description: str, content: dict[str, Any], *extra: int) -> dict[str, Any]:
    """An export's 200 (``content`` by media type), its errors (the status gate's headers on
    every answer after authentication) and the 503 of a busy server."""
    answers = {
        "200": {
            "description": description,
            "headers": {
                "Content-Disposition": string_header(
                    'attachment; filename="..." (and filename* when the name is not ASCII).'
                ),
                **rate_headers(),
            },
            "content": content,
        },
        **errors(401, 404, 422, 429, *extra, rate_limited=True),
    }
    answers["422"]["description"] = (
        "An unknown format or bom (validation_error), or an export past RELAY_EXPORT_MAX_TABLES, "
        "_CELLS or _BYTES (export_too_large): nothing is sent then, the message says which."
    )
    answers["503"]["description"] = (
        "The data store is unreachable (store_unavailable), or RELAY_EXPORT_CONCURRENCY exports "
        "are being built (export_busy); see Retry-After."
    )
    return answers


def _file(media_type: str) -> dict[str, Any]:
    return {media_type: {"schema": {"type": "string", "format": "binary"}}}


TABLE_NUMBER: dict[str, Any] = {
    "name": "n",
    "in": "path",
    "required": True,
    "description": "The table: its 1-based position in the document's tables.",
    "schema": {"type": "integer", "minimum": 1, "maximum": 999_999_999},
    "example": 1,
}


def _export_paths() -> dict[str, Any]:
    table_content = {
        **_file(CSV.media_type.split(";")[0]),
        **_file(XLSX.media_type),
        **_file(MARKDOWN.media_type.split(";")[0]),
        **_file(HTML.media_type.split(";")[0]),
        JSON.media_type: {"schema": ref("Table")},
    }
    table = _export_answer("The table as a file.", table_content, 409)
    table["409"]["description"] = (
        "The document has not succeeded (document_not_succeeded): it has no tables yet, or none."
    )
    batch = _export_answer(
        "The batch's tables in one file.", {**_file(XLSX.media_type), **_file(ZIP.media_type)}
    )
    return {
        f"{V1}/documents/{{id}}/tables/{{n}}": {
            "get": operation(
                "getTable",
                "One table of a succeeded document as CSV, XLSX, Markdown, HTML or JSON.",
                "exports",
                table,
                params=[DOC_ID, TABLE_NUMBER, *_export_query(list(TABLE_FORMATS), "csv", "a CSV")],
                description="CSV is RFC 4180 (UTF-8, CRLF) with formula-looking cells "
                "prefixed by ' (not plain numbers); XLSX writes every cell as text and merges "
                "spans; Markdown is a GFM table (spans: covered cells empty); HTML is one "
                "standalone table with rowspan/colspan; JSON is the table as in the "
                "document's tables. Counted in the status window. See docs/exports.md.",
            )
        },
        f"{V1}/batches/{{name}}/export": {
            "get": operation(
                "exportBatch",
                "Every table of the batch: one XLSX workbook (an Index sheet, then a sheet "
                "per table) or a ZIP of CSV files with index.csv.",
                "exports",
                batch,
                params=[NAME, *_export_query(list(BATCH_FORMATS), "xlsx", "each CSV")],
                description="Documents in upload order, tables in page order; a document "
                "that gave no table (not succeeded, or none found) has an index row saying "
                "why. Built whole before it is sent (so a bound passed is a 422, never a "
                "truncated file). Counted in the status window. See docs/exports.md.",
            )
        },
    }


_REGISTRATION = (
    "With verify (or RELAY_REQUIRE_VERIFIED_WEBHOOKS), a signed webhook.verify challenge "
    "goes to the URL first. A registration that repeats the verification in progress (the "
    "same URL, its challenge still pending) answers 200 with the registration as it is and "
    "starts nothing, counted against no limit; any other starts a verification, counted per "
    "account (RELAY_ACCOUNT_VERIFY_RATE_LIMIT) and per callback host, every account's "
    "together (RELAY_HOST_VERIFY_RATE_LIMIT): 429 past either, nothing written. A host name "
    "is looked up on threads of their own, a few at once per account "
    "(RELAY_URL_CHECK_CONCURRENCY_PER_ACCOUNT)."
)
_REGISTRATION_429 = (
    "Too many requests, nothing written: rate_limited (too many endpoint verifications "
    "started by the account, or to the callback host by every account; or too many invalid "
    "API keys from this address) or concurrency_limited (the account's callback URL checks "
    "in flight); see Retry-After."
)
_REGISTRATION_503 = (
    "The data store is unreachable (store_unavailable) or full (store_full), or this server "
    "runs as many callback URL checks as it allows at once (outbound_busy); see Retry-After."
)
_TEST_SEND = (
    "Only to a webhook that could receive a notification now: not while its endpoint "
    "verification is pending or after it failed, not while it is disabled (409, nothing "
    "sent). The POST runs on threads of its own, a few at once per account "
    "(RELAY_TEST_SEND_CONCURRENCY_PER_ACCOUNT) and per server (RELAY_TEST_SEND_CONCURRENCY); "
    "past either the answer is at once 429 or 503, nothing sent. The answer comes within "
    "RELAY_DELIVERY_TIMEOUT plus 1 s whatever the receiver does (a timeout is reported as "
    "the attempt's error)."
)


def _test_send_errors() -> dict[str, Any]:
    return {
        **errors(401, 404),
        "409": error_response(
            "The webhook could not receive a notification now, so nothing is sent: "
            "webhook_not_verified (its endpoint verification is pending, or failed and the "
            "webhook is disabled) or webhook_disabled (register it again to enable it).",
            rate_limited=True,
        ),
        "429": error_response(
            "Too many requests, nothing sent: rate_limited (the account's retry rate, "
            "RELAY_ACCOUNT_RETRY_RATE_LIMIT, or too many invalid API keys from this address) "
            "or concurrency_limited (the account's test sends in flight); see Retry-After.",
            rate_limited=True,
            retry_after=True,
        ),
        "503": error_response(
            "The data store is unreachable (store_unavailable) or full (store_full), or this "
            "server runs as many test sends as it allows at once (outbound_busy, nothing "
            "sent); see Retry-After.",
            retry_after=True,
        ),
    }


def _registration_errors(*codes: int) -> dict[str, Any]:
    return {
        **errors(*codes),
        "429": error_response(_REGISTRATION_429, rate_limited=True, retry_after=True),
        "503": error_response(_REGISTRATION_503, retry_after=True),
    }


def _webhook_paths() -> dict[str, Any]:
    webhook = f"{V1}/batches/{{name}}/webhook"
    return {
        webhook: {
            "put": operation(
                "putWebhook",
                "Register or replace the batch's callback URL and the event types it gets "
                "(events: batch.completed by default; document.succeeded, document.failed). "
                "A completion that was never delivered is delivered now.",
                "webhooks",
                {
                    "200": response(
                        "Webhook",
                        "Replaced; or, with verify, the registration whose verification is in "
                        "progress for this URL (nothing started).",
                    ),
                    "201": response("Webhook", "Created."),
                    **_registration_errors(400, 401, 404, 409, 413, 415, 422),
                },
                params=[NAME],
                body=json_body("BatchWebhookRequest"),
                description=_REGISTRATION,
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
                    **_test_send_errors(),
                },
                params=[NAME],
                description=_TEST_SEND,
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
                    **_test_send_errors(),
                },
                description=_TEST_SEND,
            )
        },
        f"{V1}/operational-webhook": {
            "put": operation(
                "putOperationalWebhook",
                "Register or replace the account's operational webhook (and enable it again): "
                "it receives the events webhook.disabled and delivery.failed.",
                "webhooks",
                {
                    "200": response(
                        "OperationalWebhook",
                        "Replaced; or, with verify, the registration whose verification is in "
                        "progress for this URL (nothing started).",
                    ),
                    "201": response("OperationalWebhook", "Created."),
                    **_registration_errors(400, 401, 413, 415, 422),
                },
                body=json_body("WebhookRequest"),
                description=_REGISTRATION,
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
                {
                    "200": response("SigningMaterial", "The new material.", rate_headers()),
                    **errors(401),
                    "409": error_response(
                        "rotation_in_progress: the previous rotation's grace period "
                        "(RELAY_SIGNING_GRACE_SECONDS) is still running; another rotation now "
                        "would stop signing with the material receivers may still hold alone. "
                        "Nothing changed; Retry-After: when the grace period ends.",
                        rate_limited=True,
                        retry_after=True,
                    ),
                    "429": error_response(
                        "Too many requests, nothing changed: rate_limited (the account's "
                        "rotations, RELAY_ACCOUNT_ROTATION_RATE_LIMIT, every one asked counts, "
                        "a refused one too; or too many invalid API keys from this address); "
                        "see Retry-After.",
                        rate_limited=True,
                        retry_after=True,
                    ),
                },
                description="Counted against the account's rotation rate limit first. Refused "
                "(409) while the previous rotation's grace period runs: rotate again once "
                "every receiver has the current material and previous.expires_at has passed.",
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
                "not_found. Given empty it is 422 invalid_cursor, as the pattern says.",
                {"type": "string", "pattern": DELIVERY_ID_PATTERN},
            ),
            _query(
                "type",
                "Only events of this type (given empty it is 422, as the enum says).",
                {"type": "string", "enum": types},
            ),
            _query(
                "batch_name",
                "Only the events of this batch (given empty it is 422, as the pattern says).",
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
                "Every event relay created for the account (batch.completed, whether or not "
                "a webhook is registered; document.succeeded and document.failed for the "
                "batches whose webhook asks for them), oldest first, kept as long as "
                "RELAY_RETENTION: a receiver that was down catches up from the last id it "
                "processed. Never skips or repeats an event.",
                "events",
                listed,
                params=feed(list(BATCH_TYPES)),
            )
        },
        f"{V1}/operational-events": {
            "get": operation(
                "listOperationalEvents",
                "The account's operational events (webhook.disabled, delivery.failed), "
                "whether or not an operational webhook is registered; as GET /events.",
                "events",
                listed,
                params=feed(list(OPERATIONAL_TYPES)),
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

    provider = {"type": "string", "enum": list(OCR_PROVIDERS)}
    ready = {
        "type": "object",
        "required": ["status", "ocr_provider"],
        "properties": {
            "status": {"type": "string", "enum": ["ready"]},
            "ocr_provider": {
                "type": "object",
                "description": "The onnxruntime execution provider of the OCR models as this "
                "process finds it: RELAY_OCR_PROVIDER (asked), the one used, and why they "
                "differ (fallback; null when they do not).",
                "required": ["asked", "used", "fallback"],
                "properties": {
                    "asked": provider,
                    "used": provider,
                    "fallback": {"type": ["string", "null"]},
                },
            },
        },
    }

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
                "Redis is reachable; and which provider the OCR models run on.",
                "ops",
                {"200": plain("Ready.", ready), "503": unavailable},
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


def _webhook_post(
    operation_id: str,
    summary: str,
    description: str,
    schema: str,
    responses: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An event relay POSTs to a receiver: signed (the webhook headers), its body ``schema``;
    answered as every delivery is unless ``responses`` says otherwise."""
    return {
        "post": {
            "operationId": operation_id,
            "summary": summary,
            "description": description,
            "tags": ["webhooks"],
            "security": [],
            "parameters": _webhook_headers(),
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref(schema)}},
            },
            "responses": _receiver_responses() if responses is None else responses,
        }
    }


def _batch_completed() -> dict[str, Any]:
    return _webhook_post(
        "batchCompleted",
        "A batch completed: POSTed to the batch's callback URL (PUT "
        "/batches/{name}/webhook) each time it completes, signed, retried until a 2xx.",
        "Sent when the batch's last document reaches a terminal status "
        "(its completion_seq increments), again after new uploads complete it again. At "
        "least once: receivers dedupe on webhook-id. Verify the signature over the exact "
        "body bytes before parsing them.",
        "BatchCompletedEvent",
    )


_DOCUMENT_EVENT = (
    "Sent only to a batch webhook whose events ask for this type (PUT "
    "/batches/{name}/webhook with events), for each document of the batch that "
    "reaches the status while it does; through the same pipeline as batch.completed: "
    "signed with the account's material, retried on the same schedule, recorded with "
    "its attempts among the batch's deliveries. Each document event is its own "
    "delivery (none supersedes another), its webhook-id derived from the document. "
    "Order: a batch's batch.completed is not attempted while a document event of the "
    "batch is pending delivery, so when a receiver gets a batch.completed it has "
    "accepted every document event of that batch raised before it (or that event's "
    "delivery has given up: failed, canceled). Document events among themselves "
    "arrive in no particular order. At least once: dedupe on webhook-id."
)


def document_webhooks() -> dict[str, Any]:
    """The per-document events, POSTed to a batch's webhook that asks for them."""
    return {
        "document.succeeded": _webhook_post(
            "documentSucceeded",
            "A document of the batch succeeded (its line_items and tables are in the "
            "batch's results).",
            _DOCUMENT_EVENT,
            "DocumentSucceededEvent",
        ),
        "document.failed": _webhook_post(
            "documentFailed",
            "A document of the batch failed: data.processing_error has the code and message.",
            _DOCUMENT_EVENT,
            "DocumentFailedEvent",
        ),
    }


_OPERATIONAL_EVENT = (
    "POSTed to the account's operational webhook (PUT "
    "/operational-webhook) through the same pipeline as batch.completed: signed with "
    "the account's material, retried on the same schedule, recorded with its attempts. "
    "No event is raised about the operational webhook's own deliveries."
)


def operational_webhooks() -> dict[str, Any]:
    """The account's operational events, POSTed to its operational webhook."""
    return {
        "webhook.disabled": _webhook_post(
            "webhookDisabled",
            "A batch's webhook was disabled: every attempt failed for RELAY_DISABLE_AFTER, or "
            "the receiver answered 410.",
            _OPERATIONAL_EVENT,
            "WebhookDisabledEvent",
        ),
        "delivery.failed": _webhook_post(
            "deliveryFailed",
            "A delivery exhausted its retry schedule and is failed (still retryable).",
            _OPERATIONAL_EVENT,
            "DeliveryFailedEvent",
        ),
    }


def _test_event() -> dict[str, Any]:
    return _webhook_post(
        "webhookTest",
        "A test send (POST /batches/{name}/webhook/test, the console's Test "
        "button): signed like every delivery, sent once, never retried or recorded.",
        "Answer it as you would a real event; its webhook-id is new each "
        "time. data.batch_name is null for the operational webhook.",
        "WebhookTestEvent",
        responses={
            "2XX": {"description": "Reported as succeeded."},
            "default": {"description": "Reported with its status code or error."},
        },
    )


def _verify_event() -> dict[str, Any]:
    return _webhook_post(
        "webhookVerify",
        "An endpoint verification's challenge: sent when a webhook is "
        "registered with verify: true (or RELAY_REQUIRE_VERIFIED_WEBHOOKS), before "
        "anything else. Answer 2xx with data.challenge in the body.",
        "Signed like every event. The webhook stays pending (nothing else "
        "is sent; notifications wait, none is lost) until an answer is 2xx and holds the "
        "challenge; retried on RELAY_VERIFY_SCHEDULE, after which the webhook is disabled "
        "with the reason and a webhook.disabled event. data.batch_name is null for the "
        "operational webhook.",
        "WebhookVerifyEvent",
        responses={
            "2XX": {
                "description": "Verified when the body holds the challenge (e.g. the "
                'challenge alone, or {"challenge": "..."}).'
            },
            "default": {"description": "Not verified; retried on the schedule."},
        },
    )


def webhooks() -> dict[str, Any]:
    """The OpenAPI 3.1 ``webhooks``: what relay POSTs to receivers."""
    return {
        "batch.completed": _batch_completed(),
        **document_webhooks(),
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
            **_export_paths(),
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
