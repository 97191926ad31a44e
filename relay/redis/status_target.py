"""``RELAY_REDIS_URL`` to the status endpoints' Redis: the lane, or redis-py as a fallback.

The URL is read by redis-py's own parser (``redis.connection.parse_url``), so the lane takes
exactly the forms every other relay process takes. The lane implements:

- ``redis://``, ``unix://`` and ``rediss://`` with redis-py's certificate options
  (``ssl_cert_reqs``, ``ssl_ca_certs``, ``ssl_ca_path``, ``ssl_ca_data``, ``ssl_certfile``,
  ``ssl_keyfile``, ``ssl_password``, ``ssl_check_hostname``, ``ssl_min_version``,
  ``ssl_ciphers``, ``ssl_include_verify_flags``, ``ssl_exclude_verify_flags``), the
  ``ssl.SSLContext`` built as redis-py's ``SSLConnection`` builds it;
- username and password, ``db`` (path or query), ``client_name``, ``protocol=2``;
- ``socket_timeout`` and ``socket_connect_timeout`` as its own two timeouts;
- options of redis-py's pool and retries (``max_connections``, ``health_check_interval``...)
  mean nothing for one multiplexed connection with its own failure handling: ignored.

Any other option (``protocol=3``, OCSP checks, ...) makes :func:`status_client` fall back to a
:class:`relay.redis.status_lane.PipelineClient` over the API's ``redis.asyncio`` client, and log why.

Through Sentinel (``RELAY_REDIS_SENTINELS``) the lane takes the same options from the URL but
its address from :func:`sentinel_locate`: the Sentinels are asked for the current primary at
every reconnect, so the status path follows a failover as the redis-py clients do.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

import redis.asyncio
import redis.asyncio.sentinel
import redis.connection

from relay.exceptions import ConfigError
from relay.redis.clients import RedisTarget
from relay.redis.status_lane import Address, Locate, PipelineClient, StatusClient, StatusLane, fixed

log = logging.getLogger("relay.api")

_CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_TLS = frozenset(
    {
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_check_hostname",
        "ssl_min_version",
        "ssl_ciphers",
        "ssl_include_verify_flags",
        "ssl_exclude_verify_flags",
    }
)
_USED = frozenset(
    {"host", "port", "path", "username", "password", "db", "client_name", "connection_class"}
    | {"socket_timeout", "socket_connect_timeout", "protocol"}
)
_IGNORED = frozenset(
    {
        "max_connections",
        "health_check_interval",
        "socket_keepalive",
        "socket_read_size",
        "retry_on_timeout",
        "retry_on_error",
        "timeout",  # BlockingConnectionPool's wait for a free connection
    }
)


def _parse(url: str) -> dict[str, Any]:
    try:
        kwargs: dict[str, Any] = redis.connection.parse_url(url)
    except ValueError as exc:
        raise ConfigError(f"RELAY_REDIS_URL: {exc}") from exc
    return kwargs


def _unsupported(kwargs: dict[str, Any]) -> list[str]:
    tls = kwargs.get("connection_class") is redis.connection.SSLConnection
    out = sorted(
        name
        for name in kwargs
        if name not in _USED and name not in _IGNORED and not (tls and name in _TLS)
    )
    if kwargs.get("protocol", 2) != 2:  # the lane speaks RESP2, as redis-py by default
        out.append(f"protocol={kwargs['protocol']}")
    return out


def unsupported_options(url: str) -> list[str]:
    """The options of ``url`` the lane does not implement (empty when it can serve it)."""
    return _unsupported(_parse(url))


def _tls_context(kwargs: dict[str, Any]) -> ssl.SSLContext:
    """The context redis-py's ``SSLConnection`` would build from the same options."""
    reqs = kwargs.get("ssl_cert_reqs", "required")
    if isinstance(reqs, str):
        if reqs not in _CERT_REQS:
            raise ConfigError(f"RELAY_REDIS_URL: ssl_cert_reqs must be one of {sorted(_CERT_REQS)}")
        reqs = _CERT_REQS[reqs]
    context = ssl.create_default_context()
    context.check_hostname = bool(kwargs.get("ssl_check_hostname", True)) and (
        reqs != ssl.CERT_NONE
    )
    context.verify_mode = reqs
    for flag in kwargs.get("ssl_include_verify_flags") or ():
        context.verify_flags |= flag
    for flag in kwargs.get("ssl_exclude_verify_flags") or ():
        context.verify_flags &= ~flag
    try:
        if kwargs.get("ssl_certfile") or kwargs.get("ssl_keyfile"):
            context.load_cert_chain(
                certfile=kwargs.get("ssl_certfile") or kwargs["ssl_keyfile"],
                keyfile=kwargs.get("ssl_keyfile"),
                password=kwargs.get("ssl_password"),
            )
        cafile, capath, cadata = (kwargs.get(f"ssl_ca_{k}") for k in ("certs", "path", "data"))
        if cafile or capath or cadata:
            context.load_verify_locations(cafile=cafile, capath=capath, cadata=cadata)
        if kwargs.get("ssl_min_version") is not None:
            context.minimum_version = ssl.TLSVersion(kwargs["ssl_min_version"])
        if kwargs.get("ssl_ciphers"):
            context.set_ciphers(kwargs["ssl_ciphers"])
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise ConfigError(f"RELAY_REDIS_URL: cannot set up TLS: {exc}") from exc
    return context


class SentinelLocate:
    """A :data:`relay.redis.status_lane.Locate` asking the Sentinels of ``target`` for the current primary
    (the first Sentinel that knows one not marked down; ``MasterNotFoundError``, a
    ``ConnectionError``, when none does: the request answers 503)."""

    def __init__(self, target: RedisTarget, tls: ssl.SSLContext | None) -> None:
        self.service = target.service
        self.tls = tls
        self.sentinel = redis.asyncio.sentinel.Sentinel(
            list(target.sentinels), sentinel_kwargs=target.sentinel_kwargs(for_asyncio=True)
        )

    async def __call__(self) -> Address:
        host, port = await self.sentinel.discover_master(self.service)
        return Address(host=str(host), port=int(port), tls=self.tls)

    async def aclose(self) -> None:
        for client in self.sentinel.sentinels:
            await client.aclose()


def sentinel_locate(target: RedisTarget, tls: ssl.SSLContext | None = None) -> SentinelLocate:
    """The lane's address through the Sentinels of ``target``."""
    return SentinelLocate(target, tls)


def lane_from_url(
    url: str,
    *,
    timeout: float | None = None,
    connect_timeout: float | None = None,
    target: RedisTarget | None = None,
) -> StatusLane:
    """The lane for ``url``; ConfigError when the URL is invalid or has options the lane does
    not implement (:func:`unsupported_options`). The two timeouts default to the ``target``'s
    (``RELAY_REDIS_SOCKET_TIMEOUT``, ``RELAY_REDIS_CONNECT_TIMEOUT``); the URL's
    ``socket_timeout`` and ``socket_connect_timeout`` override them. With a ``target`` that
    goes through Sentinel, the address comes from the Sentinels (the URL's host is ignored)."""
    bounds = target or RedisTarget(url)
    timeout = bounds.socket_timeout if timeout is None else timeout
    connect_timeout = bounds.connect_timeout if connect_timeout is None else connect_timeout
    kwargs = _parse(url)
    missing = _unsupported(kwargs)
    if missing:
        raise ConfigError(f"RELAY_REDIS_URL: the status lane does not implement {missing}")
    tls = kwargs.get("connection_class") is redis.connection.SSLConnection
    locate: Locate
    if target is not None and target.via_sentinel:
        if kwargs.get("connection_class") is redis.connection.UnixDomainSocketConnection:
            raise ConfigError("RELAY_REDIS_URL: with RELAY_REDIS_SENTINELS it cannot be unix://")
        locate = sentinel_locate(target, _tls_context(kwargs) if tls else None)
    elif kwargs.get("connection_class") is redis.connection.UnixDomainSocketConnection:
        if not kwargs.get("path"):
            raise ConfigError("RELAY_REDIS_URL: a unix:// URL needs a socket path")
        locate = fixed(Address(path=kwargs["path"]))
    else:
        locate = fixed(
            Address(
                host=kwargs.get("host", "localhost"),
                port=int(kwargs.get("port", 6379)),
                tls=_tls_context(kwargs) if tls else None,
            )
        )
    return StatusLane(
        locate,
        username=kwargs.get("username"),
        password=kwargs.get("password"),
        db=int(kwargs.get("db", 0)),
        client_name=kwargs.get("client_name"),
        timeout=float(kwargs.get("socket_timeout") or timeout),
        connect_timeout=float(kwargs.get("socket_connect_timeout") or connect_timeout),
    )


def status_client(target: str | RedisTarget, fallback: redis.asyncio.Redis) -> StatusClient:
    """The lane for ``target`` (a URL, or the settings' :class:`RedisTarget`), or ``fallback``
    (the API's own ``redis.asyncio`` client, which takes every form redis-py takes, Sentinel
    included) wrapped as a pipeline when the lane cannot serve it."""
    where = RedisTarget(target) if isinstance(target, str) else target
    if where.is_cluster:
        # The lane speaks to one node; a Cluster's status reads go where their slots live,
        # through redis-py's cluster pipeline (one round trip per node).
        return PipelineClient(fallback)
    missing = unsupported_options(where.url)
    if missing:
        log.warning(
            "the status endpoints use a redis-py pipeline: the lane does not implement %s",
            ", ".join(missing),
        )
        return PipelineClient(fallback)
    return lane_from_url(where.url, target=where)
