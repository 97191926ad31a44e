"""Routes: a batch's webhook, its deliveries, and the account's signing material.

What these routes send out is bounded off the request path: a callback URL's DNS check and
a test send run on lanes of threads of their own (``relay.delivery.outbound``: a bounded
number per process and per account, refused at once past it), never on the executor the
rest of the process shares; an endpoint verification's challenge goes out through the
delivery engine, counted first per account and per callback host (``relay.api.throttles``),
and a registration that repeats the verification in progress starts none; a test send goes
only to a webhook that could receive a notification (409 otherwise); a signing rotation is
counted per account and refused while the previous rotation's grace period runs.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, NamedTuple

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from relay.api.access import admit_write, authenticate
from relay.api.bodies import json_response, read_json
from relay.api.errors import (
    ApiError,
    NotFound,
    Unprocessable,
    from_outbound_busy,
    from_state_error,
)
from relay.api.paging import decode_position, encode_position, page_params
from relay.api.paths import batch_ref
from relay.api.responses import delivery_list
from relay.api.state import AppState, state
from relay.api.throttles import RETRIES, ROTATIONS
from relay.crypto import SigningMaterial
from relay.delivery.probe import ProbeResult
from relay.delivery.ssrf import TargetUrl, in_documented_form, validate_url, vet_url
from relay.exceptions import (
    OutboundBusy,
    RotationInProgress,
    UnsafeTarget,
    WebhookDisabled,
    WebhookNotFound,
    WebhookNotVerified,
)
from relay.state.model import (
    DEFAULT_WEBHOOK_EVENTS,
    WEBHOOK_EVENT_TYPES,
    SigningMaterialJSON,
    Webhook,
)
from relay.state.store import BatchRef
from relay.state.webhooks import operational_ref
from relay.timefmt import rfc3339

log = logging.getLogger("relay.delivery")
MAX_URL_CHARS = 2048
# How long a registration waits for its callback host's DNS lookup.
URL_CHECK_TIMEOUT_S = 5.0


async def _existing(st: AppState, ref: BatchRef) -> BatchRef:
    if not await st.store.batch_exists(ref):
        raise NotFound(f"no batch named {ref.name!r}")
    return ref


async def _batch(request: Request) -> tuple[AppState, BatchRef]:
    account = await authenticate(request)
    st = state(request)
    return st, await _existing(st, await batch_ref(request, account))


async def _wake(st: AppState, ref: BatchRef) -> None:
    await st.resources.wake(ref.shard)


async def _check_url(st: AppState, account: str, url: str) -> str:
    """Vet ``url`` as every callback URL is (UnsafeTarget); its host. A host name is looked
    up on the URL checks' own threads, within the account's share of them (OutboundBusy).
    The lookup runs on the lane's thread itself: one that hangs past the request's wait
    keeps its slot until it ends, so hanging lookups fill the account's share of the lane
    (then refused at once), never a pool other requests use."""
    try:
        target: TargetUrl | None = validate_url(url, st.policy)
    except UnsafeTarget:
        target = None
    if target is None or target.ip is not None:
        # Nothing to look up: checked here, and a refusal logged as every registration's is.
        return vet_url(url, st.policy, timeout=None).host
    check = functools.partial(vet_url, url, st.policy, timeout=None)
    try:
        await st.resources.url_checks.run(account, URL_CHECK_TIMEOUT_S, check)
    except TimeoutError:
        log.info("callback URL refused at registration (dns): %s did not answer", target.host)
        raise UnsafeTarget(
            "dns", f"DNS lookup for {target.host} did not answer within {URL_CHECK_TIMEOUT_S:g} s"
        ) from None
    return target.host


def _events(body: dict[str, Any]) -> tuple[str, ...]:
    """A batch registration's ``events``: a non-empty list of distinct event types (422
    otherwise, naming them), in their canonical order; batch.completed alone when absent."""
    if "events" not in body:
        return DEFAULT_WEBHOOK_EVENTS
    given = body["events"]
    if (
        not isinstance(given, list)
        or not given
        or not all(isinstance(t, str) and t in WEBHOOK_EVENT_TYPES for t in given)
        or len(set(given)) != len(given)
    ):
        raise Unprocessable(
            "events must be a non-empty list of distinct event types, each one of "
            + ", ".join(WEBHOOK_EVENT_TYPES)
        )
    return tuple(t for t in WEBHOOK_EVENT_TYPES if t in given)


class Registering(NamedTuple):
    """What a registration's body asks for, its URL vetted."""

    url: str
    verify: bool
    host: str  # the URL's host (the verifications' rate is counted per host too)
    events: tuple[str, ...]  # a batch's: the event types to POST


async def _callback_url(
    request: Request, st: AppState, account: str, *, batch: bool
) -> Registering:
    """The ``{"url": ..., "verify": ..., "events": ...}`` of a registration (``events`` on a
    batch's only) and the URL's host, the URL vetted as every callback URL is (422); verify
    is on for every registration with RELAY_REQUIRE_VERIFIED_WEBHOOKS."""
    body = await read_json(request)
    allowed = {"url", "verify", "events"} if batch else {"url", "verify"}
    if (
        not isinstance(body, dict)
        or "url" not in body
        or not set(body) <= allowed
        or not isinstance(body["url"], str)
        or not isinstance(body.get("verify", False), bool)
    ):
        raise Unprocessable(
            'expected {"url": "https://...", "verify": true|false (optional)'
            + (', "events": ["batch.completed", ...] (optional)}' if batch else "}")
        )
    events = _events(body) if batch else DEFAULT_WEBHOOK_EVENTS
    verify = bool(body.get("verify", False)) or st.settings.require_verified_webhooks
    url = body["url"]
    if len(url) > MAX_URL_CHARS:
        raise Unprocessable(
            f"url is longer than {MAX_URL_CHARS} characters", error_type="invalid_webhook_url"
        )
    try:
        host = await _check_url(st, account, url)
    except UnsafeTarget as exc:
        # One answer for every refusal that depends on DNS or addresses (the reason is in
        # the log): a tenant must not learn which internal names exist.
        raise Unprocessable(exc.answer, error_type="invalid_webhook_url") from exc
    if not (st.policy.allow_http or st.policy.allow_private or in_documented_form(url)):
        # Safe, but not of the form the OpenAPI document promises (an IP literal, a character
        # to percent-encode): production takes the documented form only.
        raise Unprocessable(
            "the callback URL must be https://<host name>[:port][/path][?query]: a DNS name, "
            "not an IP address, and RFC 3986 characters (percent-encode any other)",
            error_type="invalid_webhook_url",
        )
    return Registering(url, verify, host, events)


async def put_webhook(request: Request) -> Response:
    """Register or replace the batch's webhook: 201 or 200, the webhook. The registration
    script checks that the batch exists (404) and answers the webhook as it left it: with
    the key's round trip, two in all. A refused body is looked at with the batch first: a
    missing batch is a 404 whatever the body, as on every route of a batch.

    With verify: a registration that repeats the verification in progress (the same URL,
    its challenge still pending) answers the webhook as it is (200) and starts nothing;
    any other starts a verification, counted first per account and per callback host (429
    past either, nothing written).

    ``events`` chooses the event types POSTed (batch.completed alone by default; 422 for an
    unknown one); with document.succeeded or document.failed the batch raises those events
    for its documents that end from now on."""
    account = await authenticate(request)
    st = state(request)
    ref = await batch_ref(request, account)
    try:
        url, verify, host, events = await _callback_url(request, st, account, batch=True)
    except ApiError:
        await _existing(st, ref)
        raise
    if verify:
        pending = await st.webhooks.pending_verification(ref, url, events)
        if pending is not None:
            return json_response(pending.to_json())
        await _existing(st, ref)  # a 404 uses up no verification (the host's is shared)
        await st.limits.verification(account, host)
    done = await st.webhooks.register(
        ref, url, st.settings.public_url, verify=verify, events=events
    )
    if done.repeated:  # a concurrent registration started the same verification meanwhile
        return json_response(done.hook.to_json())
    if done.due:
        await _wake(st, ref)
    await st.resources.replicated(f"webhook of batch {ref.name!r}", ref.shard)
    return json_response(done.hook.to_json(), 201 if done.created else 200)


async def get_webhook(request: Request) -> Response:
    st, ref = await _batch(request)
    hook = await st.webhooks.get(ref)
    if hook is None:
        raise NotFound(f"batch {ref.name!r} has no webhook")
    return json_response(hook.to_json())


async def delete_webhook(request: Request) -> Response:
    st, ref = await _batch(request)
    hook = await st.webhooks.get(ref)
    if hook is None or not await st.webhooks.delete(ref):
        raise NotFound(f"batch {ref.name!r} has no webhook")
    await st.resources.replicated(f"removal of the webhook of batch {ref.name!r}", ref.shard)
    return json_response(hook.to_json())


async def list_deliveries(request: Request) -> Response:
    st, ref = await _batch(request)
    cursor, limit = page_params(request)
    found, next_start = await st.webhooks.deliveries(
        ref, start=decode_position(cursor), limit=limit
    )
    return json_response(delivery_list(found, encode_position(next_start)))


async def retry_delivery(request: Request) -> Response:
    """Send a delivery again now: 202. Counted against the account's retry rate first."""
    st = state(request)
    admitted = await admit_write(request, RETRIES)
    account, rate_headers = admitted.account, admitted.headers
    ref = await _existing(st, await batch_ref(request, account))
    delivery = await st.webhooks.retry(ref, request.path_params["id"])
    await _wake(st, ref)
    return json_response(delivery.to_json(), 202, headers=rate_headers)


async def _test_send(
    st: AppState, ref: BatchRef, missing: str, rate_headers: dict[str, str]
) -> ProbeResult:
    """The test send of ``ref``'s webhook; every refusal carries ``rate_headers``: 404
    ``missing``, 409 when the webhook could not receive a notification now (its
    verification pending or failed, or it is disabled), 429/503 when no slot is free."""
    try:
        return await st.resources.prober.send(ref)
    except WebhookNotFound as exc:
        raise NotFound(missing, headers=rate_headers) from exc
    except (WebhookNotVerified, WebhookDisabled) as exc:
        err = from_state_error(exc)
        err.headers.update(rate_headers)
        raise err from exc
    except OutboundBusy as exc:
        raise from_outbound_busy(exc, rate_headers) from exc


async def test_webhook(request: Request) -> Response:
    """Send a signed webhook.test event to the batch's webhook now and answer with the
    attempt; the batch's deliveries are untouched. Counted against the account's retry rate
    (each is a signed POST to the receiver)."""
    st = state(request)
    admitted = await admit_write(request, RETRIES)
    account, rate_headers = admitted.account, admitted.headers
    ref = await _existing(st, await batch_ref(request, account))
    result = await _test_send(st, ref, f"batch {ref.name!r} has no webhook", rate_headers)
    return json_response(result.to_json(), headers=rate_headers)


# -- the account's operational webhook (events about its webhooks; the ~ops batch) --------


async def test_operational_webhook(request: Request) -> Response:
    """The test send of the operational webhook."""
    st = state(request)
    admitted = await admit_write(request, RETRIES)
    account, rate_headers = admitted.account, admitted.headers
    ref = operational_ref(account)
    result = await _test_send(st, ref, "no operational webhook is registered", rate_headers)
    return json_response(result.to_json(), headers=rate_headers)


def _ops_json(hook: Webhook) -> dict[str, Any]:
    """The operational webhook: no batch, and its events are the operational ones."""
    return {k: v for k, v in hook.to_json().items() if k not in ("batch_name", "events")}


async def put_operational_webhook(request: Request) -> Response:
    """Register or replace the operational webhook: 201 or 200, the webhook; a verification
    repeated or counted as for a batch's (``put_webhook``)."""
    account = await authenticate(request)
    st = state(request)
    url, verify, host, _ = await _callback_url(request, st, account, batch=False)
    ref = operational_ref(account)
    if verify:
        pending = await st.webhooks.pending_verification(ref, url)
        if pending is not None:
            return json_response(_ops_json(pending))
        await st.limits.verification(account, host)
    done = await st.webhooks.register_operational_webhook(account, url, verify=verify)
    if done.challenged:
        await _wake(st, ref)
    hook = await st.webhooks.get(ref)
    if hook is None:  # removed between the two calls by a concurrent DELETE
        raise NotFound("the operational webhook was removed meanwhile")
    await st.resources.replicated("operational webhook", operational_ref(account).shard)
    return json_response(_ops_json(hook), 201 if done.created else 200)


async def get_operational_webhook(request: Request) -> Response:
    account = await authenticate(request)
    hook = await state(request).webhooks.get(operational_ref(account))
    if hook is None:
        raise NotFound("no operational webhook is registered")
    return json_response(_ops_json(hook))


async def delete_operational_webhook(request: Request) -> Response:
    account = await authenticate(request)
    st = state(request)
    ref = operational_ref(account)
    hook = await st.webhooks.get(ref)
    if hook is None or not await st.webhooks.delete(ref):
        raise NotFound("no operational webhook is registered")
    await st.resources.replicated("removal of the operational webhook", ref.shard)
    return json_response(_ops_json(hook))


async def list_operational_deliveries(request: Request) -> Response:
    account = await authenticate(request)
    st = state(request)
    cursor, limit = page_params(request)
    found, next_start = await st.webhooks.deliveries(
        operational_ref(account), start=decode_position(cursor), limit=limit
    )
    return json_response(delivery_list(found, encode_position(next_start)))


def _signing_json(
    materials: list[SigningMaterial], previous_until: int | None
) -> SigningMaterialJSON:
    current = materials[0]
    previous = materials[1] if len(materials) > 1 else None
    return {
        "secret": current.whsec,
        "public_key": current.whpk,
        "created_at": rfc3339(current.created_at_ms),
        "previous": None
        if previous is None
        else {
            "secret": previous.whsec,
            "public_key": previous.whpk,
            "created_at": rfc3339(previous.created_at_ms),
            "expires_at": rfc3339(previous_until),
        },
    }


async def get_signing(request: Request) -> Response:
    account = await authenticate(request)
    return json_response(_signing_json(*await state(request).resources.signing_material(account)))


async def rotate_signing(request: Request) -> Response:
    """New signing material: 200. Counted against the account's rotation rate first; 409
    ``rotation_in_progress`` (nothing changed) while the previous rotation's grace runs."""
    admitted = await admit_write(request, ROTATIONS)
    try:
        rotated = await state(request).resources.rotate_signing(admitted.account)
    except RotationInProgress as exc:
        err = from_state_error(exc)
        err.headers.update(admitted.headers)
        raise err from exc
    return json_response(_signing_json(*rotated), headers=admitted.headers)


routes: list[BaseRoute] = [
    Route("/batches/{name}/webhook", put_webhook, methods=["PUT"]),
    Route("/batches/{name}/webhook", get_webhook, methods=["GET"]),
    Route("/batches/{name}/webhook", delete_webhook, methods=["DELETE"]),
    Route("/batches/{name}/webhook/deliveries", list_deliveries, methods=["GET"]),
    Route("/batches/{name}/webhook/deliveries/{id}/retry", retry_delivery, methods=["POST"]),
    Route("/batches/{name}/webhook/test", test_webhook, methods=["POST"]),
    Route("/operational-webhook/test", test_operational_webhook, methods=["POST"]),
    Route("/operational-webhook", put_operational_webhook, methods=["PUT"]),
    Route("/operational-webhook", get_operational_webhook, methods=["GET"]),
    Route("/operational-webhook", delete_operational_webhook, methods=["DELETE"]),
    Route("/operational-webhook/deliveries", list_operational_deliveries, methods=["GET"]),
    Route("/webhook-signing", get_signing, methods=["GET"]),
    Route("/webhook-signing/rotate", rotate_signing, methods=["POST"]),
]
