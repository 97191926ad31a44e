"""Console sessions and CSRF tokens.

A session is a cookie ``relay_console`` holding ``{"op", "key", "csrf", "sid"}`` (the
operator's name, their key's public prefix, a random CSRF token and a random session id)
signed with itsdangerous (HMAC-SHA256, timestamped): HttpOnly, SameSite=Strict, Secure when
the request came over https, expiring after ``RELAY_CONSOLE_SESSION``.

A signature alone cannot be taken back, so the session also lives in Redis
(``keys.console_session(sid)``: the key prefix, expiring with the cookie) and every request
checks it there together with the key record. Logout deletes it, and revoking the operator
key deletes every session of that key (``keys.console_key_sessions``) besides marking the key
revoked, which every request also reads: from then on the old cookie, and the CSRF token
bound to it, open nothing.

CSRF: every form that changes state carries the session's token in a hidden ``csrf`` field,
compared in constant time (session-bound tokens). The login form, before any session exists,
uses a double-submit token: a random value in the signed, HttpOnly ``relay_console_login``
cookie and the same value in the form. A POST without a matching token is 403.

The signing key is ``RELAY_CONSOLE_SECRET`` or, when that is empty, an HMAC-SHA256 of a fixed
label under the first ``RELAY_ENCRYPTION_KEY`` (so rotating that key also ends the sessions).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from relay.config import Settings

SESSION_COOKIE = "relay_console"
LOGIN_COOKIE = "relay_console_login"
PATH = "/console"
_LOGIN_MAX_AGE = 3600


def signing_key(settings: Settings) -> bytes:
    """The session signing key (see the module docstring); ValueError when neither setting
    is there."""
    explicit = settings.console_secret.reveal()
    if explicit:
        return explicit.encode()
    first = settings.encryption_key.reveal().split(",")[0].strip()
    if not first:
        raise ValueError("the console needs RELAY_CONSOLE_SECRET or RELAY_ENCRYPTION_KEY")
    return hmac.new(first.encode(), b"relay console session v1", hashlib.sha256).digest()


@dataclass(frozen=True)
class Session:
    operator: str
    key_prefix: str
    csrf: str
    sid: str


class Sessions:
    """Issues and checks the console's cookies."""

    def __init__(self, settings: Settings) -> None:
        key = signing_key(settings)
        self.max_age = int(settings.console_session)
        self._session = URLSafeTimedSerializer(key, salt="relay-console-session")
        self._login = URLSafeTimedSerializer(key, salt="relay-console-login")

    @staticmethod
    def _cookie(request: Request, response: Response, name: str, value: str, age: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=age,
            path=PATH,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def read(self, request: Request) -> Session | None:
        """The request's session when its cookie is there, signed by us and not expired."""
        raw = request.cookies.get(SESSION_COOKIE)
        if not raw:
            return None
        try:
            data: Any = self._session.loads(raw, max_age=self.max_age)
        except BadSignature:  # also SignatureExpired
            return None
        if not isinstance(data, dict):
            return None
        fields = [data.get(name) for name in ("op", "key", "csrf", "sid")]
        strings = [value for value in fields if isinstance(value, str) and value]
        if len(strings) != len(fields):
            return None
        return Session(*strings)

    def start(self, request: Request, response: Response, operator: str, prefix: str) -> str:
        """Set the session cookie on ``response``; the new session id, which the caller
        stores with ``relay.state.api_keys.open_console_session`` (the cookie opens nothing until then)."""
        token, sid = secrets.token_urlsafe(32), secrets.token_urlsafe(24)
        value = self._session.dumps({"op": operator, "key": prefix, "csrf": token, "sid": sid})
        self._cookie(request, response, SESSION_COOKIE, value, self.max_age)
        response.delete_cookie(LOGIN_COOKIE, path=PATH)
        return sid

    def end(self, response: Response) -> None:
        response.delete_cookie(SESSION_COOKIE, path=PATH, httponly=True, samesite="strict")

    # -- the login form's double-submit token ---------------------------------------------

    def login_token(self, request: Request) -> tuple[str, str | None]:
        """The login form's token, and a new cookie value when the request has none."""
        raw = request.cookies.get(LOGIN_COOKIE)
        if raw:
            try:
                token = self._login.loads(raw, max_age=_LOGIN_MAX_AGE)
                if isinstance(token, str):
                    return token, None
            except BadSignature:
                pass
        token = secrets.token_urlsafe(32)
        return token, self._login.dumps(token)

    def set_login_cookie(self, request: Request, response: Response, value: str) -> None:
        self._cookie(request, response, LOGIN_COOKIE, value, _LOGIN_MAX_AGE)

    def login_token_ok(self, request: Request, presented: str) -> bool:
        raw = request.cookies.get(LOGIN_COOKIE)
        if not raw or not presented:
            return False
        try:
            token = self._login.loads(raw, max_age=_LOGIN_MAX_AGE)
        except BadSignature:
            return False
        return isinstance(token, str) and hmac.compare_digest(token, presented)


def csrf_ok(session: Session, presented: str) -> bool:
    return bool(presented) and hmac.compare_digest(session.csrf, presented)
