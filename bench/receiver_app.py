"""The webhook receiver of the benchmarks: a raw ASGI app, run in its own process with
``python -m uvicorn bench.receiver_app:app`` so it never competes with the benchmark's GIL.

Every POST (any path but the ``/_`` ones) is answered ``200 ok`` and recorded with its
arrival time (``time.time()`` once the whole body is in) and its exact body.

- ``GET /_count``: ``{"count": N}``, the POSTs received since the last reset;
- ``GET /_wait?n=N&timeout=S``: the same, answered once N POSTs are in (or after S seconds),
  so a benchmark can wait without polling;
- ``GET /_records``: ``[{"at", "webhook_id", "type", "batch_name", "completed_at"}, ...]``;
- ``POST /_reset``: forget everything.

At most ``MAX_RECORDS`` requests are kept (the count goes on).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_RECORDS = 200_000

_count = 0
_records: list[tuple[float, str, bytes]] = []
_waiters: list[tuple[int, asyncio.Future[None]]] = []


async def _reply(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"content-length", b"%d" % len(body))],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _records_json() -> bytes:
    out = []
    for at, webhook_id, body in _records:
        try:
            event = json.loads(body)
        except ValueError:
            event = {}
        data = event.get("data", {})
        out.append(
            {
                "at": at,
                "webhook_id": webhook_id,
                "type": event.get("type"),
                "batch_name": data.get("batch_name"),
                "completed_at": data.get("completed_at"),
            }
        )
    return json.dumps(out).encode()


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    global _count
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    at = time.time()
    path: str = scope["path"]
    method: str = scope["method"]
    if path == "/_count":
        await _reply(send, 200, b'{"count":%d}' % _count, b"application/json")
    elif path == "/_wait":
        query = parse_qs(scope.get("query_string", b"").decode())
        target = int(query.get("n", ["1"])[0])
        timeout = min(float(query.get("timeout", ["10"])[0]), 60.0)
        if _count < target:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            _waiters.append((target, future))
            try:
                await asyncio.wait_for(future, timeout)
            except TimeoutError:
                pass
            finally:
                _waiters[:] = [(n, f) for n, f in _waiters if f is not future]
        await _reply(send, 200, b'{"count":%d}' % _count, b"application/json")
    elif path == "/_records":
        await _reply(send, 200, _records_json(), b"application/json")
    elif path == "/_reset" and method == "POST":
        _count = 0
        _records.clear()
        await _reply(send, 200, b"reset", b"text/plain")
    elif method == "POST":
        _count += 1
        if len(_records) < MAX_RECORDS:
            webhook_id = next((v.decode() for k, v in scope["headers"] if k == b"webhook-id"), "")
            _records.append((at, webhook_id, b"".join(chunks)))
        for n, future in _waiters:
            if n <= _count and not future.done():
                future.set_result(None)
        await _reply(send, 200, b"ok", b"text/plain")
    else:
        await _reply(send, 404, b"not found", b"text/plain")
