"""The ASGI application ``relay serve`` runs: the HTTP API with the operator console beside it.

The API (``relay.api``) knows nothing of the console; the console (``relay.console``) is built
on the API process's state (``relay.api.state``). This module is the one place the two meet.
"""

from __future__ import annotations

from starlette.applications import Starlette

from relay.api.app import create_app as create_api
from relay.config import Settings
from relay.console.routes import routes as console_routes


def create_app(settings: Settings) -> Starlette:
    """The API for ``settings`` and, at ``/console``, the operator console (operator keys
    only; customer keys never open it)."""
    return create_api(settings, extra_routes=console_routes())
