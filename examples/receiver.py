"""A receiver for relay's batch-completion webhooks: verify, deduplicate, answer fast, work after.

    WEBHOOK_SECRET=whsec_... python examples/receiver.py --port 9000

Configuration (environment; the values come from relay's ``GET /api/v1/webhook-signing``):

    WEBHOOK_SECRET               "secret" (whsec_...): check the v1 (HMAC-SHA256) signature
    WEBHOOK_PREVIOUS_SECRET      "previous.secret", while a rotation's grace period lasts
    WEBHOOK_PUBLIC_KEY           "public_key" (whpk_...): check the v1a (Ed25519) signature too
    WEBHOOK_PREVIOUS_PUBLIC_KEY  "previous.public_key", while a rotation's grace period lasts

Set a secret, a public key or both; every kind you set must verify. The names do not start with
RELAY_ because relay refuses unknown RELAY_* settings and you may run both in one shell.

Catching up (optional): with

    EVENTS_API_URL               relay's API, e.g. http://127.0.0.1:8000/api/v1
    EVENTS_API_KEY               an API key of the account (rk_...)

the receiver keeps the id of the last event it processed in a file (``--state``, default
``.receiver-last-id``) and, when it starts, reads ``GET /events?after=<that id>``: whatever
completed while it was down is processed in order, each once. The catch-up runs in the
background: webhooks are served from the start, and both paths deduplicate on the id.

    EVENTS_RETRY_MAX_S           the longest wait between catch-up attempts (default 30)

- relay unreachable, a 5xx or a 429: tried again, waiting 0.5 s, 1 s, 2 s, ... up to
  EVENTS_RETRY_MAX_S, until it answers.
- a 404 for the saved id (relay does not know it: an event appended a moment after its
  webhook went out, or an id of another deployment or account): asked again a few times
  within about 3 s; then the catch-up stops with a message and the file keeps that id. The
  receiver does not start over from the oldest event kept: that would process every kept
  event again. (An id that aged out of the feed is not a 404: relay reads from the oldest kept.)
- any other 4xx (a wrong key, a malformed id): the catch-up stops with a message.
Until the catch-up has read the whole feed, webhooks are processed but do not move the saved
id, so a restart meanwhile resumes from where the feed was read, not past a gap.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import json
import os
import random
import sys
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

TOLERANCE_S = 5 * 60  # Standard Webhooks: refuse a webhook-timestamp more than 5 minutes off
MAX_BODY = 1 << 20  # relay's notifications are ~1 KB; refuse anything absurd
SEEN_MAX = 100_000  # webhook-ids remembered (oldest forgotten first)
RETRY_FIRST_S = 0.5  # the first wait after relay's API failed to answer the catch-up
RETRY_MAX_S = 30.0  # the longest (EVENTS_RETRY_MAX_S)
NOT_FOUND_WAITS_S = (0.1, 0.2, 0.4, 0.8, 1.5)  # asking again about a saved id relay answers 404 to


class Verifier:
    def __init__(self, secrets: list[str], public_keys: list[str]) -> None:
        self.webhooks = [Webhook(secret) for secret in secrets]
        self.keys = [
            Ed25519PublicKey.from_public_bytes(
                base64.b64decode(k.removeprefix("whpk_"), validate=True)
            )
            for k in public_keys
        ]

    def verify(self, body: bytes, headers: Mapping[str, str]) -> bool:
        """Whether ``body`` is signed by relay: every configured kind must have a matching entry."""
        if self.webhooks and not any(self._v1(wh, body, headers) for wh in self.webhooks):
            return False
        return not self.keys or self._v1a(body, headers)

    @staticmethod
    def _v1(webhook: Webhook, body: bytes, headers: Mapping[str, str]) -> bool:
        # standardwebhooks checks the timestamp (+-5 min) and skips the v1a entries it does not
        # know; a malformed entry raises ValueError instead of its own error.
        try:
            webhook.verify(body, dict(headers), json_parse=False)
        except (WebhookVerificationError, ValueError):
            return False
        return True

    def _v1a(self, body: bytes, headers: Mapping[str, str]) -> bool:
        msg_id = headers.get("webhook-id", "")
        timestamp = headers.get("webhook-timestamp", "")
        if not msg_id or not (timestamp.isascii() and timestamp.isdigit()):
            return False
        if abs(time.time() - int(timestamp)) > TOLERANCE_S:
            return False
        signed = f"{msg_id}.{timestamp}.".encode() + body
        for entry in headers.get("webhook-signature", "").split():
            version, _, encoded = entry.partition(",")
            if version != "v1a":
                continue
            try:
                signature = base64.b64decode(encoded, validate=True)
            except binascii.Error:
                continue
            for key in self.keys:
                try:
                    key.verify(signature, signed)
                    return True
                except InvalidSignature:
                    pass
        return False


# In production, deduplicate in your database instead: insert the webhook-id into a table with a
# UNIQUE constraint in the same transaction that records the event (or enqueues the job), and
# treat a unique violation as "already have it". This in-memory set forgets on restart.
seen: OrderedDict[str, None] = OrderedDict()


def first_time(msg_id: str) -> bool:
    if msg_id in seen:
        return False
    seen[msg_id] = None
    if len(seen) > SEEN_MAX:
        seen.popitem(last=False)
    return True


STATE: dict[str, str] = {"path": ".receiver-last-id"}
# False while a catch-up is pending: the saved id then moves with the feed only, never past an
# event the catch-up has not read yet.
CURSOR = {"follows_webhooks": True}


def last_processed() -> str | None:
    try:
        with open(STATE["path"]) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def remember(msg_id: str) -> None:
    """Keep the id of the last event processed (written aside, then renamed: never torn)."""
    tmp = STATE["path"] + ".tmp"
    with open(tmp, "w") as f:
        f.write(msg_id)
    os.replace(tmp, STATE["path"])


def handle(msg_id: str, event: dict[str, Any]) -> None:
    """The work itself (a real app hands it to a job queue)."""
    data = event["data"]
    # e.g. GET data["results_url"] with your API key and store the line items.
    print(f"processed {msg_id} batch={data['batch_name']} seq={data['completion_seq']}", flush=True)


async def process(msg_id: str, event: dict[str, Any]) -> None:
    """The slow part, run after the answer has gone out."""
    handle(msg_id, event)
    if CURSOR["follows_webhooks"]:
        remember(msg_id)


class Stop(Exception):
    """The catch-up cannot go on by itself (retrying would not help)."""


async def read_page(client: httpx.AsyncClient, after: str | None) -> dict[str, Any] | str:
    """One page of GET /events after ``after``, or why relay could not answer one now."""
    params: dict[str, Any] = {"limit": 100, **({"after": after} if after else {})}
    try:
        r = await client.get("/events", params=params)
    except httpx.TransportError as exc:
        return f"relay's API is unreachable ({type(exc).__name__}: {exc})"
    if r.status_code >= 500 or r.status_code == 429:
        return f"GET /events answered {r.status_code}"
    if r.status_code == 404 and after is not None:
        raise LookupError(after)
    if r.status_code >= 400:
        raise Stop(f"GET /events answered {r.status_code} {r.text[:300]}")
    try:
        page: dict[str, Any] = r.json()
        if isinstance(page["events"], list) and isinstance(page["has_more"], bool):
            return page
    except (ValueError, KeyError, TypeError):
        pass
    return f"GET /events answered {r.status_code} without an event page"  # e.g. a proxy's page


async def catch_up(api_url: str, api_key: str, retry_max_s: float) -> None:
    """Process every event after the last one processed (GET /events, page by page), trying
    again while relay is unreachable or failing; webhooks are served meanwhile."""
    after = last_processed()
    done, wait, not_found = 0, RETRY_FIRST_S, 0
    async with httpx.AsyncClient(
        base_url=api_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30
    ) as client:
        while True:
            try:
                page = await read_page(client, after)
            except LookupError:
                if not_found < len(NOT_FOUND_WAITS_S):  # it may be appended in a moment
                    await asyncio.sleep(NOT_FOUND_WAITS_S[not_found])
                    not_found += 1
                    continue
                print(
                    f"catch-up stopped: relay has no event {after} (saved in {STATE['path']}; "
                    "from another deployment or account?). Webhooks are still processed. To "
                    "catch up, put a known event id in that file, or delete it to process every "
                    "event relay keeps (again).",
                    flush=True,
                )
                return
            except Stop as exc:
                print(f"catch-up stopped: {exc}", flush=True)
                return
            if isinstance(page, str):
                pause = wait * random.uniform(0.8, 1.0)  # jittered: receivers restarted together
                print(f"catch-up: {page}; trying again in {pause:.1f}s", flush=True)
                await asyncio.sleep(pause)
                wait = min(wait * 2, retry_max_s)
                continue
            wait, not_found = RETRY_FIRST_S, 0
            for event in page["events"]:
                if first_time(event["id"]):
                    handle(event["id"], event)
                    done += 1
                remember(event["id"])  # every event up to here is processed, here or by a webhook
            after = page.get("next_cursor") or after
            if not page["has_more"]:
                CURSOR["follows_webhooks"] = True
                print(f"caught up: {done} event(s)", flush=True)
                return


async def hook(request: Request) -> PlainTextResponse:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            return PlainTextResponse("body too large", 413)
    verifier: Verifier = request.app.state.verifier
    if not verifier.verify(body, request.headers):
        print("rejected: invalid signature", flush=True)  # never act on an unverified body
        return PlainTextResponse("invalid signature", 400)
    msg_id = request.headers["webhook-id"]
    event = json.loads(body)
    if event.get("type") == "webhook.verify":
        # Endpoint verification (registered with "verify": true): echo the challenge.
        print(f"verified {event['data']['url']}", flush=True)
        return PlainTextResponse(event["data"]["challenge"])
    if event.get("type") != "batch.completed":  # webhook.test, or a type added later
        print(f"received {event.get('type')} {msg_id}", flush=True)
        return PlainTextResponse("ok")
    if not first_time(msg_id):  # a retry of a delivery we already have: just acknowledge it
        print(f"duplicate {msg_id}", flush=True)
        return PlainTextResponse("duplicate")
    # Answer 200 at once; Starlette runs the background task after the response is sent.
    return PlainTextResponse("ok", background=BackgroundTask(process, msg_id, event))


def _report(task: asyncio.Task[None]) -> None:
    """Print what ended a catch-up unexpectedly (a bug, or the state file is not writable)."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        print(f"catch-up failed: {exc!r}", flush=True)


def _env(*names: str) -> list[str]:
    return [value for name in names if (value := os.environ.get(name, "").strip())]


def main() -> None:
    parser = argparse.ArgumentParser(description="Receive relay's batch-completion webhooks.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--state", default=STATE["path"], help="the last processed id's file")
    args = parser.parse_args()
    STATE["path"] = args.state
    secrets = _env("WEBHOOK_SECRET", "WEBHOOK_PREVIOUS_SECRET")
    public_keys = _env("WEBHOOK_PUBLIC_KEY", "WEBHOOK_PREVIOUS_PUBLIC_KEY")
    if not secrets and not public_keys:
        sys.exit("set WEBHOOK_SECRET (whsec_...) and/or WEBHOOK_PUBLIC_KEY (whpk_...)")
    try:
        verifier = Verifier(secrets, public_keys)
    except ValueError as exc:  # binascii.Error is a ValueError
        sys.exit(f"unusable WEBHOOK_* value: {exc}")
    api_url, api_key = _env("EVENTS_API_URL"), _env("EVENTS_API_KEY")
    try:
        retry_max_s = float(os.environ.get("EVENTS_RETRY_MAX_S", "").strip() or RETRY_MAX_S)
    except ValueError:
        sys.exit("EVENTS_RETRY_MAX_S must be a number of seconds")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = None
        if api_url and api_key:
            CURSOR["follows_webhooks"] = False
            task = asyncio.create_task(catch_up(api_url[0], api_key[0], max(retry_max_s, 0.1)))
            task.add_done_callback(_report)
        yield
        if task is not None:
            task.cancel()

    app = Starlette(routes=[Route("/hook", hook, methods=["POST"])], lifespan=lifespan)
    app.state.verifier = verifier
    print(
        f"listening on http://{args.host}:{args.port}/hook "
        f"(v1 secrets: {len(secrets)}, v1a keys: {len(public_keys)})",
        flush=True,
    )
    # Ctrl-C or SIGTERM stops it within a few seconds even with a sender's request in flight.
    uvicorn.run(
        app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=3
    )


if __name__ == "__main__":
    main()
