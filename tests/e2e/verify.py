"""Verify a received delivery the way a receiver would, with nothing of relay's own code:
v1 with the official ``standardwebhooks`` library, v1a with cryptography's Ed25519."""

from __future__ import annotations

import base64
import json
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks.webhooks import Webhook

from tests.support.receiver import Received


def verify_v1(received: Received, secret: str) -> Any:
    """The payload, when the official library accepts the delivery for ``secret``."""
    headers = {
        k: received.headers[k] for k in ("webhook-id", "webhook-timestamp", "webhook-signature")
    }
    return Webhook(secret).verify(received.body, headers)


def verify_v1a(received: Received, public_key: str) -> bool:
    h = received.headers
    content = f"{h['webhook-id']}.{h['webhook-timestamp']}.".encode() + received.body
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key.removeprefix("whpk_")))
    for entry in h["webhook-signature"].split():
        version, _, sig = entry.partition(",")
        if version != "v1a":
            continue
        try:
            key.verify(base64.b64decode(sig), content)
            return True
        except InvalidSignature:
            continue
    return False


def verify_both(received: Received, signing: dict[str, Any]) -> dict[str, Any]:
    """Verify v1 and v1a against the account's current material; returns the payload."""
    payload = verify_v1(received, signing["secret"])
    assert verify_v1a(received, signing["public_key"]), "v1a signature did not verify"
    assert json.loads(received.body) == payload
    result: dict[str, Any] = payload
    return result
