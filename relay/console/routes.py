"""Every route of the console: its delivery pages (``relay.console.views``) and its review
pages (``relay.console.review``, built on the former's session and rendering). HTML for
browsers, not part of the JSON API: kept out of the OpenAPI document."""

from __future__ import annotations

from starlette.routing import BaseRoute

from relay.console import review, views


def routes() -> list[BaseRoute]:
    return [*review.routes(), *views.routes()]
