"""Who is calling: the API key of ``Authorization: Bearer`` and the account it belongs to.

The polled status endpoints authenticate inside their one round trip (``relay.api.fast_path``);
the rate-limited writes (uploads, process calls, manual retries) authenticate inside theirs
(:func:`admit_write`); every other endpoint calls :func:`authenticate`. All answer a failed
authentication through :func:`refuse`: 401, or 429 once the client's address has sent too
many bad keys (``relay.api.throttles``). And all read, in the same round trip, how many bad keys
the client's address sent: past the limit the address is blocked and a valid key is refused
too, with the same 429 (``relay.state.address_blocks``; :func:`check_blocked`).

:func:`admit_write` is the status gate's scheme applied to a write: the account comes from
:class:`relay.state.api_keys.KeyCache` (a miss looks the key up first: one more round trip), and one
pipelined round trip reads the key record, counts the request in the account's window of
its kind and, for an upload, holds its declared size on the account's pending total
(``relay.api.resources.ApiResources.write_round``). Nothing is written for the request until the
fresh record is checked (exists, hash matches in constant time, unrevoked, names the cached
account): a revoked key is refused on its very next request, as before. What that round trip itself
did for a key that turns out revoked is bounded: the held bytes are given back, and the request
stays counted in the account's window - once per revoked key per API process, since the refusal
drops the key from the cache and its next request is looked up first (and refused) without touching
the window.

Each of the three also counts the request against its account's requests in flight in this
process (``relay.api.inflight``): before any round trip when the key is cached, after the
lookup otherwise; past ``RELAY_ACCOUNT_MAX_INFLIGHT`` the answer is a 429.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from starlette.requests import Request

from relay.api.errors import ApiError, Unauthorized, Unprocessable
from relay.api.state import AppState, state
from relay.api.throttles import client_address
from relay.state.api_keys import PresentedKey, check_record, parse_key
from relay.state.rate_limits import Decision


def presented_key(request: Request) -> PresentedKey:
    """The well-formed key of ``Authorization: Bearer <key>``; Unauthorized otherwise."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    presented = parse_key(token.strip()) if scheme.lower() == "bearer" else None
    if presented is None:
        raise Unauthorized("missing or malformed API key (Authorization: Bearer rk_...)")
    return presented


async def cached_account(st: AppState, presented: PresentedKey) -> str:
    """The account :class:`relay.state.api_keys.KeyCache` guesses for ``presented``, looked up (one
    more round trip) and remembered on a miss; Unauthorized for an unknown or revoked key.
    Only a guess to build the request's one round trip: the caller checks the record read
    there (``check_record``) before trusting it."""
    account = st.key_cache.get(presented)
    if account is None:
        account = await st.resources.lookup_key(presented)
        if account is None:
            raise Unauthorized("unknown or revoked API key")
        st.key_cache.put(presented, account)
    return account


async def refuse(request: Request, exc: Unauthorized) -> ApiError:
    """The answer to a failed authentication: ``exc`` (401), or a 429 past the client
    address's limit of bad keys. Costs one round trip, on failures only."""
    st = state(request)
    return await st.limits.bad_key(request, exc)


async def check_blocked(request: Request, failures: int) -> None:
    """Raise the bad-key 429 when the request's client address is blocked (``failures``: its
    window's ``ZCARD``, read in the request's round trip); for a key that passed."""
    blocked = await state(request).limits.blocked(request, failures)
    if blocked is not None:
        raise blocked


async def authenticate(request: Request) -> str:
    """The account of the request's API key. Unauthorized when missing, malformed, unknown
    or revoked; RateLimited past the address's limit of bad keys, whatever the key. Always
    checks Redis (one HMGET, with the address's count of bad keys), so a revocation applies
    at once. The request counts against its account's requests in flight
    (``relay.api.inflight``): a 429 past the cap, before that HMGET when the key is cached."""
    st = state(request)
    try:
        presented = presented_key(request)
        guess = st.key_cache.get(presented)
        if guess is not None:
            st.inflight.enter(request.scope, guess)
        account, failures = await st.resources.lookup_key_from(presented, client_address(request))
        if account is None:
            st.key_cache.drop(presented.prefix)
            raise Unauthorized("unknown or revoked API key")
    except Unauthorized as exc:
        raise await refuse(request, exc) from None
    await check_blocked(request, failures)
    st.key_cache.put(presented, account)
    st.inflight.enter(request.scope, account)
    return account


@dataclass(frozen=True)
class Admitted:
    """A write let through by :func:`admit_write`: the account, its window's ``RateLimit-*``
    headers, and the bytes held on the account's total (``held``; ``within_quota``: the
    total after holding them admits the upload by itself); ``decision``: the window's, to
    give its slot back when the write is refused after all (:func:`weigh_write`)."""

    account: str
    headers: dict[str, str]
    held: int = 0
    within_quota: bool = False
    decision: Decision | None = None


async def weigh_write(request: Request, admitted: Admitted, kind: str, weight: int) -> Admitted:
    """A write admitted for one slot that weighs ``weight`` (an upload of ``weight`` files):
    its other ``weight - 1`` slots counted in the account's window, all or none. Refused:
    RateLimited (429), and the first slot given back too, so a refused request counts nothing,
    as one the window refused at once; more than the window ever holds: Unprocessable (422
    ``too_many_files``), nothing counted either. The bytes the request holds stay the
    caller's to give back. Admitted: ``admitted`` with the window's headers after the whole
    weight."""
    if weight <= 1:
        return admitted
    st = state(request)
    limit = st.resources.write_limits[kind].rate.limit
    if weight > limit:
        # No wait would let it through: said as what it is, not as a 429 to retry.
        if admitted.decision is not None:
            st.resources.give_back_write(kind, admitted.account, admitted.decision)
        raise Unprocessable(
            f"this request counts {weight} against the account's rate limit of {limit} per "
            "window (one a file): send fewer files a request",
            error_type="too_many_files",
        )
    decision = await st.resources.count_more_writes(kind, admitted.account, weight - 1)
    if decision.allowed:
        return replace(admitted, headers=decision.headers())
    if admitted.decision is not None:
        st.resources.give_back_write(kind, admitted.account, admitted.decision)
    raise st.limits.refused(kind, decision, weight)


async def admit_write(request: Request, kind: str, hold: int = 0) -> Admitted:
    """Authenticate and count a write of ``kind`` in one round trip (module docstring);
    with ``hold`` > 0, also hold that many bytes on the account's pending total (an upload's
    declared size). Unauthorized (or the bad-key 429) as :func:`authenticate`; RateLimited
    (429, ``Retry-After``, ``RateLimit-*``) past the account's window, nothing held then, or
    past its requests in flight (``relay.api.inflight``), nothing sent then; the bad-key 429
    from a blocked address, nothing held and the window's slot given back."""
    st = state(request)
    try:
        presented = presented_key(request)
        account = await cached_account(st, presented)
        st.inflight.enter(request.scope, account)
        sent = await st.resources.write_round(
            presented, account, kind, client_address(request), hold
        )
        if check_record(sent.record, presented) != account:
            st.key_cache.drop(presented.prefix)
            await st.resources.release_hold(account, sent.held)
            raise Unauthorized("unknown or revoked API key")
    except Unauthorized as exc:
        raise await refuse(request, exc) from None
    try:
        await check_blocked(request, sent.failures)
    except ApiError:
        await st.resources.release_hold(account, sent.held)
        st.resources.give_back_write(kind, account, sent.decision)
        raise
    if not sent.decision.allowed:
        await st.resources.release_hold(account, sent.held)
        raise st.limits.refused(kind, sent.decision)
    return Admitted(
        account,
        sent.decision.headers(),
        sent.held,
        st.store.within_quota(sent.total),
        sent.decision,
    )
