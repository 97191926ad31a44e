"""Container health checks: ``python -m relay.runtime.healthcheck [api|worker|detector] [--port P]``.

Exit status 0 when healthy, 1 when not (with one line on stderr saying why), 2 on a usage or
configuration error. Without a role, the role is read from the command line of PID 1, the
container's ``relay <command>`` (the image's entrypoint), so the image's one ``HEALTHCHECK``
fits ``relay serve``, ``relay worker`` and ``relay detector`` alike.

- ``api``: ``GET /healthz`` on ``127.0.0.1`` at ``--port``, else the ``--port`` of PID 1's
  ``relay serve``, else ``RELAY_PORT``, answers 200 within 3 s;
- ``worker``: an RQ worker of this host (``socket.gethostname()``, the container's) is
  registered and its key alive: RQ renews the key with each heartbeat and lets it expire when
  they stop (worker TTL + 60 s: 8 minutes);
- ``detector``: Redis answers ``PING`` with the process's own settings (the detector writes
  no heartbeat of its own; a detector that exits stops the container).
"""

from __future__ import annotations

import argparse
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from relay.config import Settings, load_settings
from relay.exceptions import ConfigError

ROLES = {"serve": "api", "worker": "worker", "detector": "detector"}


class Unhealthy(Exception):
    """The check failed; the message says why."""


def pid1_command(proc: Path = Path("/proc/1/cmdline")) -> list[str]:
    """PID 1's arguments after ``relay`` (``["serve", "--host", "0.0.0.0"]``), or ``[]``."""
    try:
        argv = proc.read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []
    for i, arg in enumerate(argv):
        if Path(arg).name == "relay":  # the console script: python /usr/local/bin/relay ...
            return [a for a in argv[i + 1 :] if a]
        if arg == "-m" and argv[i + 1 : i + 2] == ["relay"]:  # python -m relay ...
            return [a for a in argv[i + 2 :] if a]
    return []


def role_of(command: list[str]) -> str | None:
    """``api``, ``worker`` or ``detector`` for a ``relay`` command line, else None."""
    return ROLES.get(command[0]) if command else None


def port_of(command: list[str]) -> int | None:
    """The ``--port`` of a ``relay serve`` command line, if it has one."""
    for i, arg in enumerate(command):
        if arg == "--port" and i + 1 < len(command) and command[i + 1].isdigit():
            return int(command[i + 1])
        if arg.startswith("--port=") and arg[7:].isdigit():
            return int(arg[7:])
    return None


def check_api(port: int, timeout: float = 3.0) -> str:
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            status = int(reply.status)
    except urllib.error.HTTPError as exc:
        raise Unhealthy(f"{url} answered {exc.code}") from None
    except (OSError, ValueError) as exc:
        raise Unhealthy(f"{url}: {exc}") from None
    if status != 200:
        raise Unhealthy(f"{url} answered {status}")
    return f"api: {url} answered 200"


def check_worker(settings: Settings, hostname: str | None = None) -> str:
    from rq.worker import Worker

    from relay.redis.clients import RedisTarget, sync_client

    host = hostname or socket.gethostname()
    client = sync_client(RedisTarget.queues_from_settings(settings), retries=1)
    try:
        workers = [w for w in Worker.all(connection=client) if w.hostname == host]
    except Exception as exc:  # any Redis or RQ failure means not healthy
        raise Unhealthy(f"worker: cannot read RQ's workers: {exc}") from None
    finally:
        client.close()
    if not workers:
        raise Unhealthy(f"worker: no RQ worker of host {host!r} is registered with a live key")
    return f"worker: {len(workers)} RQ worker(s) of host {host!r} registered"


def check_detector(settings: Settings) -> str:
    from relay.redis.clients import RedisTarget, sync_client

    client = sync_client(RedisTarget.from_settings(settings), retries=1)
    try:
        client.ping()
    except Exception as exc:  # any Redis failure means not healthy
        raise Unhealthy(f"detector: Redis does not answer PING: {exc}") from None
    finally:
        client.close()
    return "detector: Redis answers PING"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m relay.runtime.healthcheck", description=__doc__
    )
    parser.add_argument("role", nargs="?", choices=sorted(set(ROLES.values())))
    parser.add_argument("--port", type=int, help="the API's port (api only)")
    args = parser.parse_args(argv)
    command = pid1_command()
    role = args.role or role_of(command)
    if role is None:
        print(
            "healthcheck: name a role (api, worker, detector): PID 1 is not relay", file=sys.stderr
        )
        return 2
    try:
        settings = load_settings()
        if role == "api":
            port = args.port or port_of(command) or settings.port
            message = check_api(port)
        elif role == "worker":
            message = check_worker(settings)
        else:
            message = check_detector(settings)
    except ConfigError as exc:
        print(f"healthcheck: configuration error: {exc}", file=sys.stderr)
        return 2
    except Unhealthy as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    print(message)
    return 0


if __name__ == "__main__":
    sys.exit(main())
