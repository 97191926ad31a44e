"""The status benchmark's baselines: bare Starlette JSON endpoints, served as ``relay serve``
serves relay (``uvicorn.run(app, access_log=False, server_header=False, log_level=...)``).

- ``GET /bare``: a fixed batch-shaped JSON object, no I/O;
- ``GET /redis``: one pipelined Redis round trip (``HMGET`` of the API key record and
  ``HGETALL`` of the batch, relay's reads without its rate-limit script), rendered as JSON.

``python -m bench.bare_app --port P --redis-url URL --batch-key K --apikey-key K``
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

BATCH: dict[str, Any] = {
    "batch_name": "status",
    "status": "queued",
    "all_done": False,
    "document_count": 3,
    "counts": {"queued": 3, "processing": 0, "succeeded": 0, "failed": 0, "canceled": 0},
    "created_at": "2026-11-30T04:00:00.123Z",
    "started_at": None,
    "completed_at": None,
    "deleted_at": None,
    "completion_seq": 0,
}


def create_app(redis_url: str, batch_key: str, apikey_key: str) -> Starlette:
    clients: dict[str, redis.asyncio.Redis] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        clients["redis"] = redis.asyncio.Redis.from_url(redis_url, max_connections=64)
        try:
            yield
        finally:
            await clients["redis"].aclose()

    async def bare(request: Request) -> JSONResponse:
        return JSONResponse(BATCH)

    async def one_round_trip(request: Request) -> JSONResponse:
        async with clients["redis"].pipeline(transaction=False) as pipe:
            pipe.hmget(apikey_key, ["hash", "account", "revoked_at"])
            pipe.hgetall(batch_key)
            _, h = await pipe.execute()
        return JSONResponse({k.decode(): v.decode() for k, v in h.items()})

    return Starlette(
        routes=[Route("/bare", bare), Route("/redis", one_round_trip)], lifespan=lifespan
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--batch-key", required=True)
    parser.add_argument("--apikey-key", required=True)
    args = parser.parse_args()
    uvicorn.run(
        create_app(args.redis_url, args.batch_key, args.apikey_key),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        server_header=False,
    )


if __name__ == "__main__":
    main()
