"""Real Redis servers reached through each URL form relay takes: ``redis://``, ``unix://``
(with a password and a db) and ``rediss://`` (a test CA, client certificates required).

A test module imports the fixture (``from tests.support.redis_forms import redis_form_fixture  #
noqa: F401``) and calls ``redis_form(form)``, getting a started :class:`RedisServer` and the
URL to reach it in that form. The server also listens on its plain TCP port, which the harness
uses to see it is up; the tests talk to it through the URL only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal
from urllib.parse import quote

import pytest

from relay.devtools.redis_server import RedisServer, find_redis_server
from tests.support.helpers import free_port
from tests.support.tls import Pki

Form = Literal["redis", "unix", "rediss"]
FORMS: tuple[Form, ...] = ("redis", "unix", "rediss")
RedisForm = Callable[[Form], tuple[RedisServer, str]]
PASSWORD = "s3cret/+@"  # characters a URL must escape


def tls_url(port: int, tmp: Path, pki: Pki, **options: str) -> str:
    """A ``rediss://`` URL trusting ``pki`` and presenting a client certificate it issued."""
    ca = pki.write_ca(tmp / "ca.pem")
    cert, key = pki.issue("relay-client", tmp, client=True)
    query = {
        "ssl_cert_reqs": "required",
        "ssl_ca_certs": str(ca),
        "ssl_certfile": str(cert),
        "ssl_keyfile": str(key),
        **options,
    }
    return f"rediss://127.0.0.1:{port}/0?" + "&".join(f"{k}={v}" for k, v in query.items())


@pytest.fixture(name="redis_form")
def redis_form_fixture(tmp_path: Path) -> Iterator[RedisForm]:
    if find_redis_server() is None:
        pytest.fail("redis-server is not installed (`make redis`)", pytrace=False)
    servers: list[RedisServer] = []

    def make(form: Form) -> tuple[RedisServer, str]:
        home = tmp_path / f"{form}-{len(servers)}"
        home.mkdir()
        extra: tuple[str, ...] = ()
        password = None
        if form == "unix":
            password = PASSWORD
            sock = home / "redis.sock"
            extra = ("--unixsocket", str(sock), "--unixsocketperm", "700")
            url = f"unix://:{quote(PASSWORD, safe='')}@{sock}?db=2"
        elif form == "rediss":
            pki = Pki()
            cert, key = pki.issue("127.0.0.1", home)
            tls_port = free_port()
            extra = (
                "--tls-port", str(tls_port),
                "--tls-cert-file", str(cert),
                "--tls-key-file", str(key),
                "--tls-ca-cert-file", str(pki.write_ca(home / "server-ca.pem")),
                "--tls-auth-clients", "yes",
            )  # fmt: skip
            url = tls_url(tls_port, home, pki)
        server = RedisServer(home, appendonly=True, password=password, extra_args=extra)
        servers.append(server)
        server.start()
        if form == "redis":
            url = server.url
        return server, url

    yield make
    for server in servers:
        server.stop()
