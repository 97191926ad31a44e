"""Standard Webhooks v1 (checked by the official library) and v1a (Ed25519) signatures."""

from __future__ import annotations

import base64
import os
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from relay.crypto import SigningMaterial
from relay.delivery.signing import build_headers, sign, signed_content, verify_v1a

KAT_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
KAT_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
KAT_TS = 1614265330
KAT_BODY = b'{"test": 2432232314}'
KAT_V1 = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

UA = "relay-test/1"


def kat_material() -> SigningMaterial:
    return SigningMaterial(
        secret=base64.b64decode(KAT_SECRET.removeprefix("whsec_")),
        private_key=os.urandom(32),
        created_at_ms=0,
    )


def entries(header: str) -> list[tuple[str, str]]:
    return [(v, s) for v, _, s in (e.partition(",") for e in header.split(" "))]


def test_known_answer_vector() -> None:
    header = sign(KAT_ID, KAT_TS, KAT_BODY, [kat_material()])
    parsed = entries(header)
    assert [v for v, _ in parsed] == ["v1", "v1a"]
    assert f"{parsed[0][0]},{parsed[0][1]}" == KAT_V1


def test_material_round_trips_the_customer_secret() -> None:
    assert kat_material().whsec == KAT_SECRET


def test_official_library_accepts_single_material() -> None:
    m = SigningMaterial.generate(0)
    ts = int(time.time())
    body = b'{"batch_id":"b_1","status":"completed"}'
    headers = build_headers("msg_1", ts, body, [m], UA)
    # verify() returns the parsed body only after a matching v1 entry was found; the v1a entry
    # in the same header must not trip its parser (it splits each entry on "," and skips
    # versions other than v1).
    assert Webhook(m.whsec).verify(body, headers) == {"batch_id": "b_1", "status": "completed"}


def test_official_library_accepts_either_material_during_rotation() -> None:
    current, previous = SigningMaterial.generate(2), SigningMaterial.generate(1)
    ts = int(time.time())
    body = b'{"n":1}'
    headers = build_headers("msg_2", ts, body, [current, previous], UA)
    assert [v for v, _ in entries(headers["webhook-signature"])] == ["v1", "v1a", "v1", "v1a"]
    assert Webhook(current.whsec).verify(body, headers) == {"n": 1}
    # The previous secret's v1 entry comes after the current material's v1a entry.
    assert Webhook(previous.whsec).verify(body, headers) == {"n": 1}
    with pytest.raises(WebhookVerificationError):
        Webhook(SigningMaterial.generate(3).whsec).verify(body, headers)


def test_v1a_verifies_with_whpk() -> None:
    current, previous = SigningMaterial.generate(2), SigningMaterial.generate(1)
    header = sign("msg_3", 1_700_000_000, b"{}", [current, previous])
    v1a = [base64.b64decode(s) for v, s in entries(header) if v == "v1a"]
    content = signed_content("msg_3", 1_700_000_000, b"{}")
    assert content == b"msg_3.1700000000.{}"
    for material, signature in zip((current, previous), v1a, strict=True):
        public = Ed25519PublicKey.from_public_bytes(
            base64.b64decode(material.whpk.removeprefix("whpk_"))
        )
        public.verify(signature, content)  # raises InvalidSignature on mismatch
    assert verify_v1a("msg_3", 1_700_000_000, b"{}", header, [previous.public_key])
    assert not verify_v1a(
        "msg_3", 1_700_000_000, b"{}", header, [SigningMaterial.generate(0).public_key]
    )


def test_tampering_fails_both_versions() -> None:
    m = SigningMaterial.generate(0)
    ts = int(time.time())
    body = b'{"amount":100}'
    headers = build_headers("msg_4", ts, body, [m], UA)
    tampered = b'{"amount":900}'
    with pytest.raises(WebhookVerificationError):
        Webhook(m.whsec).verify(tampered, headers)
    sig = headers["webhook-signature"]
    assert verify_v1a("msg_4", ts, body, sig, [m.public_key])
    assert not verify_v1a("msg_4", ts, tampered, sig, [m.public_key])
    assert not verify_v1a("msg_5", ts, body, sig, [m.public_key])
    assert not verify_v1a("msg_4", ts + 1, body, sig, [m.public_key])


def test_verify_v1a_skips_malformed_entries() -> None:
    m = SigningMaterial.generate(0)
    good = sign("msg_6", 10, b"x", [m])
    messy = "garbage v1a,!!!notbase64 v1a, v2,abc " + good
    assert verify_v1a("msg_6", 10, b"x", messy, [m.public_key])
    assert not verify_v1a("msg_6", 10, b"x", "garbage v1a,!!!", [m.public_key])


def test_headers() -> None:
    m = SigningMaterial.generate(0)
    headers = build_headers("msg_7", 42, b"{}", [m], UA)
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"] == UA
    assert headers["webhook-id"] == "msg_7"
    assert headers["webhook-timestamp"] == "42"
    assert headers["webhook-signature"] == sign("msg_7", 42, b"{}", [m])


def test_signing_is_deterministic_per_material() -> None:
    # HMAC and Ed25519 are both deterministic: the same input yields the same header, which
    # lets a retried attempt be compared with the first.
    m = SigningMaterial.generate(0)
    assert sign("msg_8", 1, b"a", [m]) == sign("msg_8", 1, b"a", [m])
    assert sign("msg_8", 1, b"a", [m]) != sign("msg_8", 1, b"b", [m])


@pytest.mark.parametrize(
    ("msg_id", "ts"),
    [("", 1), ("a b", 1), ("a.b", 1), ("a\r\nx: y", 1), ("ok", -1), ("ok", True)],
)
def test_bad_inputs_refused(msg_id: str, ts: int) -> None:
    with pytest.raises(ValueError):
        sign(msg_id, ts, b"{}", [SigningMaterial.generate(0)])


def test_no_materials_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        sign("msg_9", 1, b"{}", [])
