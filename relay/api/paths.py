"""What a request's path names: the batch of ``/batches/{name}``."""

from __future__ import annotations

from starlette.requests import Request

from relay.api.errors import NotFound
from relay.api.state import state
from relay.state.model import valid_batch_name
from relay.state.store import BatchRef


async def batch_ref(request: Request, account: str) -> BatchRef:
    """The account's batch named in the path, in the shard it lives in (where it would be
    created when there is none); NotFound for a name no batch can have."""
    name: str = request.path_params["name"]
    if not valid_batch_name(name):
        raise NotFound("no such batch")
    return await state(request).store.locate(account, name)
