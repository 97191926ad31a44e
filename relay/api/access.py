"""Who is calling: the API key of ``Authorization: Bearer`` and the account it belongs to.

The polled status endpoints authenticate inside their one round trip (``relay.api.gate``);
every other endpoint calls :func:`authenticate`. Both answer a failed authentication
through :func:`refuse`: 401, or 429 once the client's address has sent too many bad keys
(``relay.api.limits``).
"""

from __future__ import annotations

from starlette.requests import Request

from relay.api.errors import ApiError, Unauthorized
from relay.api.state import state
from relay.auth import PresentedKey, parse_key


def presented_key(request: Request) -> PresentedKey:
    """The well-formed key of ``Authorization: Bearer <key>``; Unauthorized otherwise."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    presented = parse_key(token.strip()) if scheme.lower() == "bearer" else None
    if presented is None:
        raise Unauthorized("missing or malformed API key (Authorization: Bearer rk_...)")
    return presented


async def refuse(request: Request, exc: Unauthorized) -> ApiError:
    """The answer to a failed authentication: ``exc`` (401), or a 429 past the client
    address's limit of bad keys. Costs one round trip, on failures only."""
    st = state(request)
    return await st.limits.bad_key(request, exc)


async def authenticate(request: Request) -> str:
    """The account of the request's API key. Unauthorized when missing, malformed, unknown
    or revoked (RateLimited past the address's limit of bad keys). Always checks Redis (one
    HMGET), so a revocation applies at once."""
    st = state(request)
    try:
        presented = presented_key(request)
        account = await st.edge.lookup_key(presented)
        if account is None:
            st.key_cache.drop(presented.prefix)
            raise Unauthorized("unknown or revoked API key")
    except Unauthorized as exc:
        raise await refuse(request, exc) from None
    st.key_cache.put(presented, account)
    return account
