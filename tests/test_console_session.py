"""Console session cookies and CSRF tokens, without a browser: the cookie's flags over http
and https, expiry, tampering, and the signing key's two sources."""

from __future__ import annotations

import time
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response

from relay.config import Secret
from relay.console.session import SESSION_COOKIE, Sessions, csrf_ok, signing_key
from tests.support.api_fixtures import make_settings


def request(scheme: str = "http", cookie: str = "") -> Request:
    headers: list[tuple[bytes, bytes]] = []
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    scope: dict[str, Any] = {
        "type": "http",
        "scheme": scheme,
        "method": "GET",
        "path": "/console",
        "headers": headers,
        "query_string": b"",
        "server": ("relay.example", 443 if scheme == "https" else 80),
    }
    return Request(scope)


def started(sessions: Sessions, scheme: str) -> tuple[str, str]:
    response = Response()
    sessions.start(request(scheme), response, "ops", "abcd1234")
    header = next(
        v.decode()
        for k, v in response.raw_headers
        if k == b"set-cookie" and v.startswith(SESSION_COOKIE.encode() + b"=")
    )
    return header, header.split(";", 1)[0].split("=", 1)[1]


def test_the_cookie_is_httponly_strict_and_secure_under_https() -> None:
    sessions = Sessions(make_settings("redis://127.0.0.1:1/0"))
    plain, value = started(sessions, "http")
    flags = plain.lower()
    assert "httponly" in flags and "samesite=strict" in flags and "path=/console" in flags
    assert "secure" not in flags
    secure, _ = started(sessions, "https")
    assert "; secure" in secure.lower()
    session = sessions.read(request(cookie=f"{SESSION_COOKIE}={value}"))
    assert session is not None and session.operator == "ops" and session.key_prefix == "abcd1234"
    assert (
        csrf_ok(session, session.csrf)
        and not csrf_ok(session, "")
        and not csrf_ok(session, session.csrf + "x")
    )


def test_a_tampered_or_foreign_cookie_is_no_session() -> None:
    settings = make_settings("redis://127.0.0.1:1/0")
    sessions = Sessions(settings)
    _, value = started(sessions, "http")
    body, _, sig = value.rpartition(".")
    forged = body + "." + ("A" if sig[0] != "A" else "B") + sig[1:]
    assert sessions.read(request(cookie=f"{SESSION_COOKIE}={forged}")) is None
    other = Sessions(make_settings("redis://127.0.0.1:1/0"))  # another encryption key
    assert other.read(request(cookie=f"{SESSION_COOKIE}={value}")) is None


def test_sessions_expire() -> None:
    sessions = Sessions(make_settings("redis://127.0.0.1:1/0", console_session=1.0))
    _, value = started(sessions, "http")
    assert sessions.read(request(cookie=f"{SESSION_COOKIE}={value}")) is not None
    time.sleep(2.1)
    assert sessions.read(request(cookie=f"{SESSION_COOKIE}={value}")) is None


def test_the_signing_key_is_the_setting_or_derived_from_the_encryption_key() -> None:
    derived = make_settings("redis://127.0.0.1:1/0")
    key = signing_key(derived)
    assert len(key) == 32 and derived.encryption_key.reveal().encode() not in key
    explicit = make_settings("redis://127.0.0.1:1/0", console_secret=Secret("s3cret-value"))
    assert signing_key(explicit) == b"s3cret-value"
    with pytest.raises(ValueError):
        signing_key(make_settings("redis://127.0.0.1:1/0", encryption_key=Secret("")))
