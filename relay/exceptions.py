"""Every exception relay raises on purpose.

    RelayError
    ├── ConfigError               a setting is unknown or does not parse (at start)
    ├── StoreUnavailable          Redis cannot be reached (the API answers 503)
    │   └── StoreProtocolError    Redis answered out of step; the connection was dropped
    ├── ApiError                  a client's request cannot be served (4xx JSON error)
    │   ├── BadRequest            400 bad_request
    │   ├── Unauthorized          401 unauthorized
    │   ├── NotFound              404 not_found
    │   ├── Conflict              409 conflict
    │   ├── PayloadTooLarge       413 payload_too_large
    │   ├── UnsupportedMediaType  415 unsupported_media_type
    │   ├── Unprocessable         422 validation_error (or a more precise type)
    │   └── RateLimited           429 rate_limited
    └── UnsafeTarget              a callback URL or address is not allowed (SSRF guard)

``relay.extract.ExtractionError`` is not here: it belongs to the extractor plug-in contract
and is a document-level result, never an API error.
"""

from __future__ import annotations


class RelayError(Exception):
    """Base of every error relay raises on purpose."""


class ConfigError(RelayError):
    """A setting is unknown or its value does not parse."""


class StoreUnavailable(RelayError):
    """Redis cannot be reached; callers retry or answer 503."""


class StoreProtocolError(StoreUnavailable):
    """Redis sent a reply no request was waiting for, or bytes that are not RESP: the replies
    are out of step with the requests, so the connection was dropped (``relay.lane``)."""


class ApiError(RelayError):
    """A request that cannot be served; rendered as ``{"error": {"type", "message"}}``."""

    status_code = 400
    error_type = "bad_request"

    def __init__(self, message: str, *, error_type: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if error_type is not None:
            self.error_type = error_type


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


class UnsafeTarget(RelayError):
    """A callback URL or resolved address that relay refuses to call.

    ``kind`` is a short machine word (``scheme``, ``userinfo``, ``too_long``, ``dns``,
    ``private_address``, ...); the message is the human reason.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
