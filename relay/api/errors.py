"""Every error the API answers, as ``{"error": {"type", "message"}}``; the one place where
an error gets an HTTP status.

- :class:`ApiError` and its subclasses, raised by the handlers for what a request got wrong:
  their status and type (401 adds ``WWW-Authenticate: Bearer``);
- the state layer's :class:`relay.exceptions.StateError` subclasses, mapped by
  :data:`STATE_ERRORS` (a missing batch is 404 ``not_found``, a deleted one 409
  ``batch_deleted``, ...);
- Redis unreachable, timing out, loading its dataset or read-only after a failover, and
  :class:`relay.exceptions.StoreUnavailable` (the status lane's own failures):
  503 ``store_unavailable`` with ``Retry-After: 1``; the clients reconnect by themselves, so
  the next request after Redis is back succeeds;
- Redis full (``maxmemory`` reached, the ``OOM command not allowed`` reply): 503
  ``store_full`` with ``Retry-After``; only writes meet it, reads go on;
- the blob store (``RELAY_BLOB_URL``: S3, the directory) unreachable, refusing or slower than
  ``RELAY_BLOB_TIMEOUT`` (:class:`relay.exceptions.BlobStoreUnavailable`): 503
  ``blob_store_unavailable`` with ``Retry-After``; an upload keeps nothing then;
- the pending-bytes quota (:class:`relay.exceptions.QuotaExceeded`): 429 ``quota_exceeded``
  with ``Retry-After`` and ``RateLimit-*`` counted in bytes;
- no slot for an outbound call (:class:`relay.exceptions.OutboundBusy`: a test send, a
  callback URL check): 429 ``concurrency_limited`` when the account has its share in flight,
  503 ``outbound_busy`` when the process's lane is full, both with ``Retry-After``;
- Starlette's ``HTTPException`` (unknown route, wrong method): the same JSON shape;
- a client that hangs up mid-body: 400 (nobody reads it; it just must not be a 500);
- anything else: 500 ``internal_error``, logged. No client input is meant to get there.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from relay.api.responses import ErrorJSON
from relay.exceptions import (
    BatchDeleted,
    BatchMetadataConflict,
    BatchNotFound,
    BlobStoreUnavailable,
    ConfigError,
    DeliveryNotFound,
    EventNotFound,
    IdempotencyKeyReused,
    InvalidCursor,
    NotRetryable,
    OutboundBusy,
    QuotaExceeded,
    RotationInProgress,
    StateError,
    StoreUnavailable,
    WebhookDisabled,
    WebhookNotVerified,
)
from relay.redis.clients import REPLY_ERROR, UNAVAILABLE, is_store_full
from relay.timefmt import now_ms

logger = logging.getLogger("relay.api")


class ApiError(Exception):
    """A request that cannot be served; rendered as ``{"error": {"type", "message"}}``.

    HTTP errors of the edge, raised by handlers; the core raises
    :class:`relay.exceptions.StateError` instead, which :data:`STATE_ERRORS` maps.
    """

    status_code = 400
    error_type = "bad_request"

    def __init__(
        self,
        message: str,
        *,
        error_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if error_type is not None:
            self.error_type = error_type
        self.headers = headers or {}


class BadRequest(ApiError):
    status_code = 400
    error_type = "bad_request"


class Unauthorized(ApiError):
    status_code = 401
    error_type = "unauthorized"


class NotFound(ApiError):
    status_code = 404
    error_type = "not_found"


class Conflict(ApiError):
    status_code = 409
    error_type = "conflict"


class PayloadTooLarge(ApiError):
    status_code = 413
    error_type = "payload_too_large"


class UnsupportedMediaType(ApiError):
    status_code = 415
    error_type = "unsupported_media_type"


class Unprocessable(ApiError):
    status_code = 422
    error_type = "validation_error"


class RateLimited(ApiError):
    status_code = 429
    error_type = "rate_limited"


class Busy(ApiError):
    """A bounded resource of the process is in use past the request's wait (503, with
    Retry-After)."""

    status_code = 503
    error_type = "busy"


# Each state error as (status, type); the first entry the error is an instance of wins.
STATE_ERRORS: dict[type[StateError], tuple[int, str]] = {
    BatchNotFound: (404, "not_found"),
    DeliveryNotFound: (404, "not_found"),
    EventNotFound: (404, "not_found"),
    BatchDeleted: (409, "batch_deleted"),
    NotRetryable: (409, "delivery_not_retryable"),
    BatchMetadataConflict: (409, "batch_metadata_conflict"),
    IdempotencyKeyReused: (409, "idempotency_key_reused"),
    WebhookNotVerified: (409, "webhook_not_verified"),
    WebhookDisabled: (409, "webhook_disabled"),
    RotationInProgress: (409, "rotation_in_progress"),
    QuotaExceeded: (429, "quota_exceeded"),
    InvalidCursor: (422, "invalid_cursor"),
    StateError: (409, "conflict"),
}

# Retry-After of a pending-bytes refusal: bytes are freed as the account's documents are
# processed, which relay cannot foresee; a short fixed hint.
QUOTA_RETRY_AFTER = 10
# Retry-After of a full store: an operator (or retention) has to free memory first.
STORE_FULL_RETRY_AFTER = 5
# Retry-After of an unreachable blob store: a restart or failover of object storage.
BLOB_STORE_RETRY_AFTER = 2


def from_state_error(exc: StateError) -> ApiError:
    """The HTTP error for a refusal of the state layer."""
    status, error_type = next(v for cls, v in STATE_ERRORS.items() if isinstance(exc, cls))
    headers: dict[str, str] = {}
    if isinstance(exc, RotationInProgress):
        # The grace period's end: the first moment another rotation is taken.
        headers = {"Retry-After": str(max(1, -(-(exc.until_ms - now_ms()) // 1000)))}
    if isinstance(exc, QuotaExceeded):
        headers = {
            "RateLimit-Limit": str(exc.limit),
            "RateLimit-Remaining": str(max(0, exc.limit - exc.pending)),
            "RateLimit-Reset": str(QUOTA_RETRY_AFTER),
            "Retry-After": str(QUOTA_RETRY_AFTER),
        }
    err = ApiError(exc.message, error_type=error_type, headers=headers)
    err.status_code = status
    return err


def from_outbound_busy(exc: OutboundBusy, headers: dict[str, str] | None = None) -> ApiError:
    """The HTTP error for no slot for an outbound call: 429 ``concurrency_limited`` (the
    account's share is in flight) or 503 ``outbound_busy`` (the process's lane is full),
    with ``Retry-After``. ``headers``: the RateLimit-* of the request's own window, if it
    has one; else a 429's RateLimit-* count the calls in flight (the share, none left)."""
    account = exc.scope == "account"
    if headers is None and account:
        headers = {
            "RateLimit-Limit": str(exc.limit),
            "RateLimit-Remaining": "0",
            "RateLimit-Reset": str(exc.retry_after),
        }
    err = ApiError(
        exc.message,
        error_type="concurrency_limited" if account else "outbound_busy",
        headers={**(headers or {}), "Retry-After": str(exc.retry_after)},
    )
    err.status_code = 429 if account else 503
    return err


_HTTP_TYPES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
}


def error_json(
    status_code: int, error_type: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    error: ErrorJSON = {"error": {"type": error_type, "message": message}}
    body = json.dumps(error, separators=(",", ":"), ensure_ascii=False)
    return Response(body.encode(), status_code, headers, media_type="application/json")


def error_response(exc: ApiError, headers: dict[str, str] | None = None) -> Response:
    """The response for an ApiError, with its own and extra ``headers`` (e.g. the
    rate-limit ones)."""
    headers = {**exc.headers, **(headers or {})}
    if exc.status_code == 401:
        headers = {**(headers or {}), "WWW-Authenticate": 'Bearer realm="relay"'}
    return error_json(exc.status_code, exc.error_type, exc.message, headers)


async def on_api_error(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, ApiError):  # pragma: no cover - registered for ApiError only
        raise exc
    return error_response(exc)


async def on_state_error(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, StateError):  # pragma: no cover - registered for StateError only
        raise exc
    return error_response(from_state_error(exc))


async def on_outbound_busy(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, OutboundBusy):  # pragma: no cover - registered for it only
        raise exc
    return error_response(from_outbound_busy(exc))


async def on_store_unavailable(request: Request, exc: Exception) -> Response:
    logger.warning("store unavailable on %s %s: %r", request.method, request.url.path, exc)
    return error_json(
        503,
        "store_unavailable",
        "the data store is unreachable; retry shortly",
        {"Retry-After": "1"},
    )


def blob_store_unavailable(exc: BlobStoreUnavailable) -> ApiError:
    """503 ``blob_store_unavailable`` with ``Retry-After`` (logged: the operator's to see)."""
    logger.warning("blob store unavailable: %s", exc)
    err = ApiError(
        "the store of uploaded documents is unreachable; nothing was kept; retry shortly",
        error_type="blob_store_unavailable",
        headers={"Retry-After": str(BLOB_STORE_RETRY_AFTER)},
    )
    err.status_code = 503
    return err


async def on_blob_store_unavailable(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, BlobStoreUnavailable):  # pragma: no cover - registered for it only
        raise exc
    return error_response(blob_store_unavailable(exc))


async def on_store_full(request: Request, exc: Exception) -> Response:
    # maxmemory reached (noeviction): writes are refused until memory is freed; reads and
    # every process carry on. Logged per request, like an outage, so an operator sees it.
    logger.warning("store full (maxmemory) on %s %s: %s", request.method, request.url.path, exc)
    return error_json(
        503,
        "store_full",
        "the data store is full and refuses writes; reads still work; retry later",
        {"Retry-After": str(STORE_FULL_RETRY_AFTER)},
    )


async def on_response_error(request: Request, exc: Exception) -> Response:
    # redis-py raises OutOfMemoryError for the OOM reply; an older Redis wraps a script's
    # OOM in a generic script error, recognised by its text. Anything else is a bug: 500.
    if is_store_full(exc):
        return await on_store_full(request, exc)
    raise exc


async def on_config_error(request: Request, exc: Exception) -> Response:
    # A server-side misconfiguration (e.g. RELAY_ENCRYPTION_KEY lacks the key that encrypted
    # the signing material): not the client's fault, and nothing it sent is lost.
    logger.error("configuration error on %s %s: %s", request.method, request.url.path, exc)
    return error_json(503, "service_misconfigured", str(exc))


async def on_http_exception(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, HTTPException):  # pragma: no cover - registered for it only
        raise exc
    error_type = _HTTP_TYPES.get(exc.status_code, "http_error")
    message = {404: "no such route", 405: "method not allowed"}.get(exc.status_code, exc.detail)
    headers = dict(exc.headers) if exc.headers else None
    return error_json(exc.status_code, error_type, message, headers)


async def on_client_disconnect(request: Request, exc: Exception) -> Response:
    return error_json(400, "bad_request", "the client disconnected before the body ended")


async def on_internal_error(request: Request, exc: Exception) -> Response:
    logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_json(500, "internal_error", "internal error")


def status_of(exc: BaseException) -> int:
    """The HTTP status the handlers below answer ``exc`` with (a traced request's
    ``http.response.status_code``, ``relay.tracing.server``)."""
    if isinstance(exc, ApiError):
        return exc.status_code
    if isinstance(exc, StateError):
        return next(status for cls, (status, _) in STATE_ERRORS.items() if isinstance(exc, cls))
    if isinstance(exc, HTTPException):
        return exc.status_code
    if isinstance(exc, ClientDisconnect):
        return 400
    if isinstance(exc, (ConfigError, StoreUnavailable, BlobStoreUnavailable, *UNAVAILABLE)) or (
        isinstance(exc, REPLY_ERROR) and is_store_full(exc)
    ):
        return 503
    return 500


def exception_handlers() -> dict[Any, Any]:
    """The handlers to pass to ``Starlette(exception_handlers=...)``.

    The specific ones run in Starlette's ExceptionMiddleware (response sent, done); the
    ``Exception`` one runs in ServerErrorMiddleware, which re-raises after answering so
    the server logs it too and a test client surfaces it.
    """
    return {
        ApiError: on_api_error,
        StateError: on_state_error,
        ConfigError: on_config_error,
        OutboundBusy: on_outbound_busy,
        StoreUnavailable: on_store_unavailable,
        BlobStoreUnavailable: on_blob_store_unavailable,
        **dict.fromkeys(UNAVAILABLE, on_store_unavailable),
        REPLY_ERROR: on_response_error,  # OutOfMemoryError is a subclass
        HTTPException: on_http_exception,
        ClientDisconnect: on_client_disconnect,
        Exception: on_internal_error,
    }
