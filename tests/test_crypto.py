"""Encryption at rest (Fernet/MultiFernet) and signing material serialisation."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from relay.config import Secret
from relay.crypto import Encryptor, SigningMaterial, generate_key
from relay.exceptions import ConfigError


def test_round_trip() -> None:
    enc = Encryptor.from_setting(generate_key())
    token = enc.encrypt(b"signing material")
    assert token != b"signing material"
    assert enc.decrypt(token) == b"signing material"


def test_generated_key_is_a_fernet_key() -> None:
    key = generate_key()
    assert Fernet(key).decrypt(Fernet(key).encrypt(b"x")) == b"x"


def test_rotation_new_key_first_still_decrypts_old_ciphertext() -> None:
    old, new = generate_key(), generate_key()
    before = Encryptor.from_setting(old)
    token = before.encrypt(b"payload")

    after = Encryptor.from_setting(f" {new} , {old} ,")  # spaces and a trailing comma tolerated
    assert after.decrypt(token) == b"payload"
    # New ciphertext is under the new key only: the old list cannot read it.
    fresh = after.encrypt(b"payload2")
    with pytest.raises(ConfigError):
        before.decrypt(fresh)
    # rotate() re-encrypts old ciphertext under the first key.
    rotated = after.rotate(token)
    assert Encryptor.from_setting(new).decrypt(rotated) == b"payload"


def test_wrong_key_is_config_error_with_clear_message() -> None:
    token = Encryptor.from_setting(generate_key()).encrypt(b"x")
    other = Encryptor.from_setting(generate_key())
    with pytest.raises(ConfigError, match="does not hold the key that encrypted it"):
        other.decrypt(token)
    with pytest.raises(ConfigError, match="does not hold the key"):
        other.rotate(token)
    with pytest.raises(ConfigError):
        other.decrypt(b"not a fernet token")


@pytest.mark.parametrize("setting", ["", "  ", ",", Secret("")])
def test_empty_setting_raises_on_use_with_generation_hint(setting: str | Secret) -> None:
    enc = Encryptor.from_setting(setting)
    assert not enc.configured
    uses: list[Callable[[bytes], bytes]] = [enc.encrypt, enc.decrypt, enc.rotate]
    for use in uses:
        with pytest.raises(ConfigError, match="RELAY_ENCRYPTION_KEY") as info:
            use(b"x")
        assert "Fernet.generate_key().decode()" in str(info.value)


def test_invalid_key_is_refused_without_echoing_it() -> None:
    bogus = "not-a-key-but-maybe-a-secret-typo"
    with pytest.raises(ConfigError, match="entry 2 is not a Fernet key") as info:
        Encryptor.from_setting(f"{generate_key()},{bogus}")
    assert bogus not in str(info.value)


def test_from_secret_object() -> None:
    key = generate_key()
    assert Encryptor.from_setting(Secret(key)).decrypt(Encryptor.from_setting(key).encrypt(b"y"))


def test_material_generate_and_encodings() -> None:
    m = SigningMaterial.generate(1_700_000_000_000)
    assert len(m.secret) == 32 and len(m.private_key) == 32
    assert m.created_at_ms == 1_700_000_000_000
    assert base64.b64decode(m.whsec.removeprefix("whsec_")) == m.secret
    assert base64.b64decode(m.whsk.removeprefix("whsk_")) == m.private_key
    public = base64.b64decode(m.whpk.removeprefix("whpk_"))
    assert len(public) == 32 and public == m.public_key
    # The public key really belongs to the private key.
    Ed25519PublicKey.from_public_bytes(public)  # parses
    assert SigningMaterial.generate(0).secret != m.secret


def test_material_json_round_trip_through_encryption() -> None:
    m = SigningMaterial.generate(123)
    enc = Encryptor.from_setting(generate_key())
    blob = enc.encrypt(m.to_json().encode())
    back = SigningMaterial.from_json(enc.decrypt(blob))
    assert back == m
    assert SigningMaterial.from_encoded(m.whsec, m.whsk, 123) == m


@pytest.mark.parametrize(
    "blob",
    [
        "not json",
        "[]",
        '{"v": 2}',
        '{"v": 1, "secret": "AAAA", "private_key": "AAAA"}',
        '{"v": 1, "secret": "!!!", "private_key": "AAAA", "created_at_ms": 1}',
        '{"v": 1, "secret": "AAAA", "private_key": "AAAA", "created_at_ms": 1}',  # too short
    ],
)
def test_material_from_bad_json(blob: str) -> None:
    with pytest.raises(ValueError):
        SigningMaterial.from_json(blob)


def test_reprs_do_not_leak() -> None:
    key = generate_key()
    enc = Encryptor.from_setting(key)
    m = SigningMaterial.generate(5)
    text = repr(enc) + str(enc) + repr(m) + str(m)
    assert key not in text
    for secret in (m.whsec, m.whsk, m.secret.hex(), repr(m.secret), repr(m.private_key)):
        assert secret not in text
    assert "whsec_" not in text and "whsk_" not in text
    assert repr(enc) == "Encryptor(keys=1)"
    assert "created_at_ms=5" in repr(m)
