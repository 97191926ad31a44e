"""Who is calling: the API key of ``Authorization: Bearer`` and the account it belongs to.

The polled status endpoints authenticate inside their one round trip (``relay.api.gate``);
every other endpoint calls :func:`authenticate`.
"""

from __future__ import annotations

from starlette.requests import Request

from relay.api.errors import Unauthorized
from relay.api.state import state
from relay.auth import PresentedKey, lookup_key_async, parse_key


def presented_key(request: Request) -> PresentedKey:
    """The well-formed key of ``Authorization: Bearer <key>``; Unauthorized otherwise."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    presented = parse_key(token.strip()) if scheme.lower() == "bearer" else None
    if presented is None:
        raise Unauthorized("missing or malformed API key (Authorization: Bearer rk_...)")
    return presented


async def authenticate(request: Request) -> str:
    """The account of the request's API key; Unauthorized when missing, malformed, unknown
    or revoked. Always checks Redis (one HMGET), so a revocation applies at once."""
    presented = presented_key(request)
    st = state(request)
    account = await lookup_key_async(st.redis, presented)
    if account is None:
        st.key_cache.drop(presented.prefix)
        raise Unauthorized("unknown or revoked API key")
    st.key_cache.put(presented, account)
    return account
