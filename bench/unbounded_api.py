"""relay's app on uvicorn's stock httptools protocol, without ``relay.api.server``'s bounds.

The ``http_bounds`` benchmark serves it beside ``relay serve`` to measure, in the same run, what the
HTTP bounds cost: the same app and settings, only the protocol class differs.
"""

from __future__ import annotations

import argparse

import uvicorn

from relay.app import create_app
from relay.config import load_settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    settings = load_settings()
    uvicorn.run(
        create_app(settings),
        host="127.0.0.1",
        port=args.port,
        http="httptools",
        log_level="warning",
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=True,
        forwarded_allow_ips=settings.forwarded_allow_ips,
    )


if __name__ == "__main__":
    main()
