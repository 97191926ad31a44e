"""Standard Webhooks signatures: ``v1`` (HMAC-SHA256) and ``v1a`` (Ed25519).

Both sign the same bytes, ``f"{msg_id}.{timestamp}.".encode() + body``, and are sent in one
``webhook-signature`` header as space-separated ``<version>,<base64 signature>`` entries: for
each signing material in order (current first, then the previous one while a rotation's grace
period lasts) a ``v1`` entry and a ``v1a`` entry. Receivers accept the message if any entry they
can check matches; verifiers that only know ``v1`` (the ``standardwebhooks`` library) skip the
``v1a`` entries.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from relay.crypto import SigningMaterial, load_private_key

CONTENT_TYPE = "application/json"


def _check_id(msg_id: str, timestamp: int) -> None:
    # The id and timestamp go into headers and into the signed string, whose fields are
    # separated by "."; refuse anything that could make either ambiguous.
    if (
        not msg_id
        or not msg_id.isascii()
        or not msg_id.isprintable()
        or any(c in msg_id for c in " .,")
    ):
        raise ValueError("msg_id must be non-empty printable ASCII without spaces, '.' or ','")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
        raise ValueError("timestamp must be a non-negative integer (seconds since the epoch)")


def signed_content(msg_id: str, timestamp: int, body: bytes) -> bytes:
    """The bytes both signature versions cover."""
    return f"{msg_id}.{timestamp}.".encode() + body


def sign(msg_id: str, timestamp: int, body: bytes, materials: Sequence[SigningMaterial]) -> str:
    """The ``webhook-signature`` header value for ``body``.

    For each material in order: ``v1,<base64 HMAC-SHA256>`` then ``v1a,<base64 Ed25519>``,
    joined by single spaces. Ed25519 keys are loaded once per seed and cached
    (:func:`relay.crypto.load_private_key`). Raises ``ValueError`` for no materials or an
    unusable id/timestamp.
    """
    _check_id(msg_id, timestamp)
    if not materials:
        raise ValueError("at least one signing material is required")
    content = signed_content(msg_id, timestamp, body)
    entries: list[str] = []
    for material in materials:
        mac = hmac.digest(material.secret, content, hashlib.sha256)
        entries.append("v1," + base64.b64encode(mac).decode("ascii"))
        signature = load_private_key(material.private_key).sign(content)
        entries.append("v1a," + base64.b64encode(signature).decode("ascii"))
    return " ".join(entries)


def verify_v1a(
    msg_id: str, timestamp: int, body: bytes, header: str, public_keys: Sequence[bytes]
) -> bool:
    """Whether any ``v1a`` entry of ``header`` is a valid signature by any of ``public_keys``.

    ``public_keys`` are raw 32-byte Ed25519 keys (the bytes after ``whpk_``). Malformed or
    unknown entries are skipped, not errors. This checks the signature only: a receiver must
    also refuse stale timestamps (Standard Webhooks uses +-5 minutes) and replayed ids.
    """
    content = signed_content(msg_id, timestamp, body)
    keys = [Ed25519PublicKey.from_public_bytes(key) for key in public_keys]
    for entry in header.split():
        version, _, encoded = entry.partition(",")
        if version != "v1a":
            continue
        try:
            signature = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        for key in keys:
            try:
                key.verify(signature, content)
            except InvalidSignature:
                continue
            return True
    return False


def build_headers(
    msg_id: str,
    timestamp: int,
    body: bytes,
    materials: Sequence[SigningMaterial],
    user_agent: str,
    traceparent: str = "",
) -> dict[str, str]:
    """All headers of a webhook request: content type, user agent, the three ``webhook-*``
    and, when the attempt is traced, its W3C ``traceparent`` (``relay.tracing``). The
    signatures cover the id, the timestamp and the body, never the other headers: a
    receiver verifies the same way with or without ``traceparent``."""
    headers = {
        "content-type": CONTENT_TYPE,
        "user-agent": user_agent,
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(msg_id, timestamp, body, materials),
    }
    if traceparent:
        headers["traceparent"] = traceparent
    return headers
