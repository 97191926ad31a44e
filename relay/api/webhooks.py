"""Routes: a batch's webhook, its deliveries, and the account's signing material."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from relay import keys
from relay.api.batches import decode_position
from relay.api.context import (
    AppState,
    authenticate,
    batch_ref,
    json_response,
    page_params,
    read_json,
    state,
)
from relay.crypto import Encryptor, SigningMaterial
from relay.deliveries import AsyncWebhooks, wake
from relay.delivery.ssrf import TargetPolicy, vet_url
from relay.exceptions import NotFound, Unprocessable, UnsafeTarget
from relay.signing_keys import SigningKeys
from relay.store import BatchRef
from relay.timefmt import rfc3339

MAX_URL_CHARS = 2048


@dataclass
class WebhookState:
    hooks: AsyncWebhooks
    signing: SigningKeys
    policy: TargetPolicy
    drain_timeout: int


def _wstate(request: Request) -> tuple[AppState, WebhookState]:
    st = state(request)
    ws = getattr(request.app.state, "relay_webhooks", None)
    if not isinstance(ws, WebhookState):
        s = st.settings
        ws = WebhookState(
            hooks=AsyncWebhooks(st.redis),
            signing=SigningKeys(Encryptor.from_setting(s.encryption_key)),
            policy=TargetPolicy(
                allow_http=s.allow_http_targets, allow_private=s.allow_private_targets
            ),
            drain_timeout=int(s.delivery_timeout * 2) + 35,
        )
        request.app.state.relay_webhooks = ws
    return st, ws


async def _batch(request: Request) -> tuple[AppState, WebhookState, BatchRef]:
    account = await authenticate(request)
    st, ws = _wstate(request)
    ref = batch_ref(account, request.path_params["name"])
    if not await st.redis.exists(ref.key):
        raise NotFound(f"no batch named {ref.name!r}")
    return st, ws, ref


async def _wake(st: AppState, ws: WebhookState, ref: BatchRef) -> None:
    await run_in_threadpool(wake, st.sync_redis, ref.shard, timeout=ws.drain_timeout)


async def put_webhook(request: Request) -> Response:
    st, ws, ref = await _batch(request)
    body = await read_json(request)
    if not isinstance(body, dict) or set(body) != {"url"} or not isinstance(body["url"], str):
        raise Unprocessable('expected {"url": "https://..."}')
    url = body["url"]
    if len(url) > MAX_URL_CHARS:
        raise Unprocessable(
            f"url is longer than {MAX_URL_CHARS} characters", error_type="invalid_webhook_url"
        )
    try:
        # Resolving the host blocks: keep it off the event loop.
        await run_in_threadpool(vet_url, url, ws.policy)
    except UnsafeTarget as exc:
        raise Unprocessable(exc.message, error_type="invalid_webhook_url") from exc
    created, due = await ws.hooks.register(ref, url, st.settings.public_url)
    if due:
        await _wake(st, ws, ref)
    hook = await ws.hooks.get(ref)
    if hook is None:  # removed between the two calls by a concurrent DELETE
        raise NotFound("the webhook was removed meanwhile")
    return json_response(hook.to_json(), 201 if created else 200)


async def get_webhook(request: Request) -> Response:
    _, ws, ref = await _batch(request)
    hook = await ws.hooks.get(ref)
    if hook is None:
        raise NotFound(f"batch {ref.name!r} has no webhook")
    return json_response(hook.to_json())


async def delete_webhook(request: Request) -> Response:
    _, ws, ref = await _batch(request)
    hook = await ws.hooks.get(ref)
    if hook is None or not await ws.hooks.delete(ref):
        raise NotFound(f"batch {ref.name!r} has no webhook")
    return json_response(hook.to_json())


async def list_deliveries(request: Request) -> Response:
    _, ws, ref = await _batch(request)
    cursor, limit = page_params(request)
    found, next_start = await ws.hooks.deliveries(ref, start=decode_position(cursor), limit=limit)
    return json_response(
        {
            "deliveries": [d.to_json() for d in found],
            "next_cursor": None if next_start is None else str(next_start),
        }
    )


async def retry_delivery(request: Request) -> Response:
    st, ws, ref = await _batch(request)
    delivery = await ws.hooks.retry(ref, request.path_params["id"])
    await _wake(st, ws, ref)
    return json_response(delivery.to_json(), 202)


def _signing_json(materials: list[SigningMaterial], previous_until: int | None) -> dict[str, Any]:
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


async def _previous_until(st: AppState, account: str) -> int | None:
    raw = await st.redis.hget(keys.signing(account), "previous_until")
    return int(raw) if raw else None


async def get_signing(request: Request) -> Response:
    account = await authenticate(request)
    st, ws = _wstate(request)
    materials = await ws.signing.get(st.redis, account)
    return json_response(_signing_json(materials, await _previous_until(st, account)))


async def rotate_signing(request: Request) -> Response:
    account = await authenticate(request)
    st, ws = _wstate(request)
    materials = await ws.signing.rotate(
        st.redis, st.scripts, account, st.settings.signing_grace_seconds
    )
    return json_response(_signing_json(materials, await _previous_until(st, account)))


routes: list[BaseRoute] = [
    Route("/batches/{name}/webhook", put_webhook, methods=["PUT"]),
    Route("/batches/{name}/webhook", get_webhook, methods=["GET"]),
    Route("/batches/{name}/webhook", delete_webhook, methods=["DELETE"]),
    Route("/batches/{name}/webhook/deliveries", list_deliveries, methods=["GET"]),
    Route("/batches/{name}/webhook/deliveries/{id}/retry", retry_delivery, methods=["POST"]),
    Route("/webhook-signing", get_signing, methods=["GET"]),
    Route("/webhook-signing/rotate", rotate_signing, methods=["POST"]),
]
