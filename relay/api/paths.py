"""What a request's path names: the batch of ``/batches/{name}``."""

from __future__ import annotations

from starlette.requests import Request

from relay.api.errors import NotFound
from relay.model import valid_batch_name
from relay.store import BatchRef


def path_batch(request: Request, account: str) -> BatchRef | None:
    """The account's batch named in the path; None for a name no batch can have."""
    name: str = request.path_params["name"]
    return BatchRef(account, name) if valid_batch_name(name) else None


def batch_ref(request: Request, account: str) -> BatchRef:
    """The account's batch named in the path; NotFound for a name no batch can have."""
    ref = path_batch(request, account)
    if ref is None:
        raise NotFound("no such batch")
    return ref
