"""Every exception relay's core raises on purpose. None of them knows HTTP: each edge maps
them (the API in ``relay.api.errors``, the CLI to one line and an exit code).

    RelayError
    ├── ConfigError               a setting is unknown or does not parse (at start)
    ├── StoreUnavailable          Redis cannot be used now (every edge: 503 / retry later)
    │   └── StoreProtocolError    Redis answered out of step; the connection was dropped
    ├── BlobStoreUnavailable      the blob store (S3, the directory) cannot be used now
    ├── StateError                the state layer refuses an operation (a domain rule)
    │   ├── BatchNotFound         no such batch (for this account)
    │   ├── BatchDeleted          the batch was deleted: it accepts no uploads or processing
    │   ├── DeliveryNotFound      no such delivery (for this batch or account)
    │   ├── NotRetryable          the delivery cannot be sent again (``reason`` says why)
    │   ├── QuotaExceeded         the account holds too many bytes awaiting processing
    │   ├── BatchMetadataConflict the batch already has other metadata
    │   ├── IdempotencyKeyReused  an upload's Idempotency-Key names another request's documents
    │   ├── InvalidCursor         a pagination cursor no listing handed out
    │   ├── WebhookNotVerified    a test send to a webhook whose verification is pending or failed
    │   ├── WebhookDisabled       a test send to a disabled webhook
    │   └── RotationInProgress    a signing rotation while the previous one's grace runs
    ├── InvalidMetadata           a client's metadata is not a flat JSON object in bounds
    ├── OutboundBusy              no slot for an outbound call now (the account's or the process's)
    └── UnsafeTarget              a callback URL or address is not allowed (SSRF guard)

Redis's own errors (unreachable, timing out, loading) are not wrapped: every edge maps
redis-py's exceptions as they are; ``StoreUnavailable`` is for what relay's own Redis
client (``relay.redis.status_lane``) finds wrong. ``relay.extract.ExtractionError`` is not here
either: it belongs to the extractor plug-in contract and is a document-level result, never an error
of an operation; nor ``relay.extract.errors.ExtractorConfigError`` (an extractor that cannot be
loaded), which relay.extract defines itself because it imports nothing of relay.
"""

from __future__ import annotations

from typing import ClassVar


class RelayError(Exception):
    """Base of every error relay raises on purpose."""


class ConfigError(RelayError):
    """A setting is unknown or its value does not parse."""


class StoreUnavailable(RelayError):
    """Redis cannot be used now; callers retry or answer 503."""


class StoreProtocolError(StoreUnavailable):
    """Redis sent a reply no request was waiting for, or bytes that are not RESP: the replies
    are out of step with the requests, so the connection was dropped
    (``relay.redis.status_lane``)."""


class BlobStoreUnavailable(RelayError):
    """The store of uploaded bytes (``RELAY_BLOB_URL``: S3, the directory) did not answer, or
    refused, within its bounds: the API answers 503 ``blob_store_unavailable`` with nothing
    kept of the request; a worker lets the document wait and tries again
    (``RELAY_BLOB_WAIT``). Not for bytes that are simply gone (those read as None)."""


class StateError(RelayError):
    """An operation the state's rules refuse; ``message`` is for the person who asked."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BatchNotFound(StateError):
    """No batch of that name in the account."""


class BatchDeleted(StateError):
    """The batch was deleted: it accepts no uploads and no processing."""


class WebhookNotFound(StateError):
    """The batch has no webhook."""


class DeliveryNotFound(StateError):
    """No delivery of that id (in that batch or account)."""


class NotRetryable(StateError):
    """The delivery cannot be sent again.

    ``reason`` is a short machine word: ``superseded`` (a newer completion replaced it),
    ``no_webhook`` (the batch's webhook was removed), ``disabled`` (the webhook is disabled).
    """

    MESSAGES: ClassVar[dict[str, str]] = {
        "superseded": "a newer completion of the batch replaced this delivery",
        "no_webhook": "the batch has no webhook; register one first",
        "disabled": "the batch's webhook is disabled; register it again to enable it",
    }

    def __init__(self, reason: str) -> None:
        super().__init__(self.MESSAGES.get(reason, reason))
        self.reason = reason


class QuotaExceeded(StateError):
    """The upload would take the account's bytes held in Redis awaiting processing past
    ``limit`` (``RELAY_ACCOUNT_MAX_PENDING_BYTES``); ``pending`` is what it holds (as read
    just before the upload), ``size`` the refused upload's bytes."""

    def __init__(self, *, limit: int, pending: int, size: int) -> None:
        super().__init__(
            f"the account holds {pending} bytes of uploads awaiting processing; {size} more "
            f"would pass its pending-bytes quota of {limit} bytes: nothing of this upload was "
            "stored; process or delete batches, then retry"
        )
        self.limit = limit
        self.pending = pending
        self.size = size


# What a tenant is told of every callback URL refused for its host's DNS answer or addresses.
REFUSED_TARGET = (
    "the callback URL's host must be a name that resolves to public IP addresses only; "
    "this one cannot be used"
)


class BatchMetadataConflict(StateError):
    """An upload gave ``batch_metadata`` other than the metadata its batch already has
    (a batch's metadata is set once: ``relay.state.metadata``)."""


class IdempotencyKeyReused(StateError):
    """An upload's ``Idempotency-Key`` is the key of an earlier upload into the batch that
    was another request (other files, names, types, metadata or count of files:
    ``relay.state.uploads``); nothing is made."""


class InvalidMetadata(RelayError):
    """A client's metadata is not a flat JSON object within the bounds (``relay.state.metadata``);
    the message says what is wrong, for the person who sent it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnsafeTarget(RelayError):
    """A callback URL or resolved address that relay refuses to call.

    ``kind`` is a short machine word (``scheme``, ``userinfo``, ``too_long``, ``dns``,
    ``private_address``, ...); the message is the human reason, for the log. ``answer`` is
    what a tenant is told: the message when it is about the URL's own text (its syntax,
    scheme, length or form), and one fixed sentence (:data:`REFUSED_TARGET`) for every
    refusal that depends on DNS or on addresses (:attr:`NETWORK_KINDS`), so that the answers
    tell apart neither the names that exist from those that do not, nor what they resolve to.
    """

    NETWORK_KINDS: ClassVar[frozenset[str]] = frozenset({"dns", "private_address"})

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    @property
    def answer(self) -> str:
        return REFUSED_TARGET if self.kind in self.NETWORK_KINDS else self.message


class EventNotFound(StateError):
    """An ``after`` naming no event of the feed (another account's, or none at all)."""


class InvalidCursor(StateError):
    """A pagination cursor that no listing handed out (or that was altered)."""


class WebhookNotVerified(StateError):
    """The webhook's endpoint verification is pending or failed: nothing but the challenge
    may be sent to it (a test send is refused, nothing is sent)."""


class WebhookDisabled(StateError):
    """The webhook is disabled: nothing is sent to it until it is registered again."""


class RotationInProgress(StateError):
    """A signing rotation asked while the previous rotation's grace period runs: another one
    would drop the material receivers may still verify with. ``until_ms``: when it ends."""

    def __init__(self, until_ms: int) -> None:
        super().__init__(
            "the previous signing rotation's grace period is still running: the previous "
            "material signs until it ends, and a new rotation now would drop it while "
            "receivers may still use it; rotate again once every receiver has the current "
            "material and the grace period has ended"
        )
        self.until_ms = until_ms


class OutboundBusy(RelayError):
    """No slot for an outbound call now (``relay.delivery.outbound``): the account already
    has its share in flight (``scope`` ``account``) or the process's pool is full
    (``process``). ``limit``: that bound; ``retry_after``: whole seconds until a slot surely
    frees."""

    def __init__(self, scope: str, message: str, limit: int, retry_after: int) -> None:
        super().__init__(message)
        self.scope = scope
        self.message = message
        self.limit = limit
        self.retry_after = retry_after
