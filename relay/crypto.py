"""Signing material for webhook subscriptions, and its encryption at rest.

* :class:`SigningMaterial` is one generation of a subscription's keys: a 32-byte HMAC secret
  (Standard Webhooks ``v1``, shown to customers as ``whsec_…``) and an Ed25519 key pair
  (``v1a``, ``whsk_…`` private / ``whpk_…`` public). It serialises to one JSON blob.
* :class:`Encryptor` encrypts those blobs with Fernet keys from ``RELAY_ENCRYPTION_KEY``
  (comma-separated; the first encrypts, all decrypt, so keys can be rotated).

Nothing here prints key material: the ``repr`` of both classes shows only non-secret facts.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from relay.exceptions import ConfigError

GENERATE_KEY_HINT = (
    "generate one with: "
    'python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'
)
_WRONG_KEY = (
    "cannot decrypt signing material: RELAY_ENCRYPTION_KEY does not hold the key that encrypted it"
)

SECRET_BYTES = 32
_MIN_SECRET, _MAX_SECRET = 24, 64  # Standard Webhooks: secrets are 24 to 64 bytes
_MATERIAL_VERSION = 1


class _Revealable(Protocol):
    def reveal(self) -> str: ...


def generate_key() -> str:
    """A new Fernet key, as text fit for ``RELAY_ENCRYPTION_KEY``."""
    return Fernet.generate_key().decode("ascii")


class Encryptor:
    """Fernet encryption with rotation; the first key encrypts, every key decrypts.

    Built without keys it is a placeholder that raises :class:`ConfigError` (with the command
    that generates a key) on first use, so processes that never touch secrets still start.
    """

    __slots__ = ("_count", "_fernet", "_first")

    def __init__(self, keys: Sequence[str | bytes]) -> None:
        fernets: list[Fernet] = []
        for index, key in enumerate(keys, 1):
            try:
                fernets.append(Fernet(key))
            except (ValueError, TypeError, binascii.Error):
                # Never echo the value: it may be a real key with a typo.
                raise ConfigError(
                    f"RELAY_ENCRYPTION_KEY entry {index} is not a Fernet key "
                    f"(32 url-safe base64-encoded bytes); {GENERATE_KEY_HINT}"
                ) from None
        self._fernet = MultiFernet(fernets) if fernets else None
        self._first = fernets[0] if fernets else None
        self._count = len(fernets)

    @classmethod
    def from_setting(cls, value: str | _Revealable) -> Encryptor:
        """From the ``RELAY_ENCRYPTION_KEY`` text (or its masked ``Secret``); empty = unset."""
        text = value if isinstance(value, str) else value.reveal()
        return cls([part.strip() for part in text.split(",") if part.strip()])

    @property
    def configured(self) -> bool:
        return self._fernet is not None

    def _require(self) -> MultiFernet:
        if self._fernet is None:
            raise ConfigError(
                "RELAY_ENCRYPTION_KEY is not set; it encrypts webhook signing secrets at rest. "
                + GENERATE_KEY_HINT
            )
        return self._fernet

    def encrypt(self, data: bytes) -> bytes:
        """Encrypt with the first key. Raises :class:`ConfigError` if no key is configured."""
        return self._require().encrypt(data)

    def decrypt(self, token: bytes) -> bytes:
        """Decrypt with any configured key; :class:`ConfigError` if none fits or none is set."""
        fernet = self._require()
        try:
            return fernet.decrypt(token)
        except InvalidToken:
            raise ConfigError(_WRONG_KEY) from None

    def rotate(self, token: bytes) -> bytes:
        """Re-encrypt ``token`` under the first key (``MultiFernet.rotate``)."""
        fernet = self._require()
        try:
            return fernet.rotate(token)
        except InvalidToken:
            raise ConfigError(_WRONG_KEY) from None

    def is_current(self, token: bytes) -> bool:
        """True when ``token`` opens with the first key: :meth:`rotate` has nothing to do."""
        self._require()
        assert self._first is not None  # set whenever _fernet is
        try:
            self._first.decrypt(token)
        except InvalidToken:
            return False
        return True

    def __repr__(self) -> str:
        return f"Encryptor(keys={self._count})"


@functools.lru_cache(maxsize=4096)
def load_private_key(seed: bytes) -> Ed25519PrivateKey:
    """The Ed25519 key for a raw 32-byte seed, cached so signing does not reload it."""
    return Ed25519PrivateKey.from_private_bytes(seed)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is not valid base64") from None


@dataclass(frozen=True, repr=False)
class SigningMaterial:
    """One generation of a subscription's signing keys.

    ``secret`` is the HMAC-SHA256 key (24-64 bytes; generated ones are 32), ``private_key`` the
    raw 32-byte Ed25519 seed, ``created_at_ms`` when it was generated (epoch ms).
    """

    secret: bytes = field(repr=False)
    private_key: bytes = field(repr=False)
    created_at_ms: int

    def __post_init__(self) -> None:
        if not _MIN_SECRET <= len(self.secret) <= _MAX_SECRET:
            raise ValueError(f"the HMAC secret must be {_MIN_SECRET}-{_MAX_SECRET} bytes")
        if len(self.private_key) != 32:
            raise ValueError("the Ed25519 private key must be the raw 32-byte seed")

    @classmethod
    def generate(cls, now_ms: int) -> SigningMaterial:
        """Fresh random material (OS randomness for both keys)."""
        return cls(
            secret=os.urandom(SECRET_BYTES), private_key=os.urandom(32), created_at_ms=now_ms
        )

    @classmethod
    def from_encoded(cls, whsec: str, whsk: str, created_at_ms: int) -> SigningMaterial:
        """From the customer-facing ``whsec_…`` and ``whsk_…`` strings."""
        if not whsec.startswith("whsec_") or not whsk.startswith("whsk_"):
            raise ValueError("expected a whsec_… secret and a whsk_… private key")
        return cls(
            secret=_unb64(whsec.removeprefix("whsec_"), "the whsec_ secret"),
            private_key=_unb64(whsk.removeprefix("whsk_"), "the whsk_ key"),
            created_at_ms=created_at_ms,
        )

    @property
    def public_key(self) -> bytes:
        """The raw 32-byte Ed25519 public key."""
        return (
            load_private_key(self.private_key)
            .public_key()
            .public_bytes(Encoding.Raw, PublicFormat.Raw)
        )

    @property
    def whsec(self) -> str:
        """The HMAC secret as Standard Webhooks writes it (given to the customer once)."""
        return "whsec_" + _b64(self.secret)

    @property
    def whsk(self) -> str:
        """The Ed25519 private key (never leaves relay)."""
        return "whsk_" + _b64(self.private_key)

    @property
    def whpk(self) -> str:
        """The Ed25519 public key receivers verify ``v1a`` signatures with."""
        return "whpk_" + _b64(self.public_key)

    def to_json(self) -> str:
        """One JSON object with base64 fields, to be encrypted as a single blob."""
        return json.dumps(
            {
                "v": _MATERIAL_VERSION,
                "secret": _b64(self.secret),
                "private_key": _b64(self.private_key),
                "created_at_ms": self.created_at_ms,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> SigningMaterial:
        """Inverse of :meth:`to_json`; ``ValueError`` if the blob is not one."""
        try:
            data: Any = json.loads(text)
        except (ValueError, UnicodeDecodeError):
            raise ValueError("signing material is not valid JSON") from None
        if not isinstance(data, dict) or data.get("v") != _MATERIAL_VERSION:
            raise ValueError("signing material has an unknown format")
        secret, private_key, created = (
            data.get("secret"),
            data.get("private_key"),
            data.get("created_at_ms"),
        )
        if not (
            isinstance(secret, str)
            and isinstance(private_key, str)
            and isinstance(created, int)
            and not isinstance(created, bool)
        ):
            raise ValueError("signing material is missing a field")
        return cls(
            secret=_unb64(secret, "secret"),
            private_key=_unb64(private_key, "private_key"),
            created_at_ms=created,
        )

    def __repr__(self) -> str:
        return f"SigningMaterial(created_at_ms={self.created_at_ms}, whpk={self.whpk!r})"
