"""Callback URL safety: address rules, URL syntax, and the pinned client against real servers.

The servers are real sockets on 127.0.0.1 (``http.server`` in a thread, TLS via ``ssl`` with a
CA made by ``cryptography``). The only substitution is the stdlib resolver in the rebinding
tests: ``socket.getaddrinfo`` is swapped for one that answers like a hostile DNS server, since
this machine has no DNS to configure.
"""

from __future__ import annotations

import contextlib
import http.server
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from relay.delivery.ssrf import (
    MAX_URL_LENGTH,
    GuardedTransport,
    TargetPolicy,
    check_address,
    classify_error,
    make_client,
    resolve_and_check,
    validate_url,
    vet_url,
)
from relay.exceptions import REFUSED_TARGET, UnsafeTarget
from tests.support.tls import Pki

STRICT = TargetPolicy()
LOCAL_HTTP = TargetPolicy(allow_http=True)  # http allowed, private still refused
OPEN = TargetPolicy(allow_http=True, allow_private=True)
UA = "relay-test/1"

# --------------------------------------------------------------------------- addresses

# Teredo: 2001:0:<server>:<flags>:<port>:<client XOR ffffffff>. 65.54.227.120 = 4136:e378.
TEREDO_CLIENT_LOOPBACK = "2001:0:4136:e378:8000:63bf:80ff:fffe"  # ~0x7f000001 = 0x80fffffe
TEREDO_SERVER_PRIVATE = "2001:0:a00:1:8000:63bf:f7f7:f7f7"  # server 10.0.0.1, client 8.8.8.8
TEREDO_PUBLIC = "2001:0:4136:e378:8000:63bf:f7f7:f7f7"  # server 65.54.227.120, client 8.8.8.8

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("10.0.0.1", "private"),
    ("172.16.0.1", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("0.0.0.0", "this network"),
    ("0.1.2.3", "this network"),
    ("224.0.0.1", "multicast"),  # is_global is True in Python: the table must catch it
    ("239.255.255.250", "multicast"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("192.0.0.8", "IETF protocol"),
    ("192.0.2.1", "documentation"),
    ("198.51.100.7", "documentation"),
    ("203.0.113.9", "documentation"),
    ("198.18.0.1", "benchmarking"),
    ("192.88.99.1", "6to4 relay"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fe80::1", "link-local"),
    ("fc00::1", "unique local"),
    ("fd12:3456::1", "unique local"),
    ("fec0::1", "site-local"),  # is_global is True in Python 3.11
    ("ff02::1", "multicast"),
    ("2001:db8::1", "documentation"),
    ("3fff::1", "documentation"),  # RFC 9637; is_global is True in Python 3.11
    ("100::1", "discard"),
    ("::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1"),
    ("::ffff:10.0.0.1", "IPv4-mapped form of 10.0.0.1"),
    ("::ffff:169.254.169.254", "IPv4-mapped form of 169.254.169.254"),
    ("2002:7f00:1::", "6to4 form of 127.0.0.1"),
    ("2002:a00:1::1", "6to4 form of 10.0.0.1"),
    ("64:ff9b::7f00:1", "NAT64 form of 127.0.0.1"),
    ("64:ff9b::a00:1", "NAT64 form of 10.0.0.1"),
    ("64:ff9b::e000:1", "NAT64 form of 224.0.0.1"),
    ("64:ff9b:1::808:808", "local-use NAT64"),  # operator-defined prefix: always refused
    (TEREDO_CLIENT_LOOPBACK, "Teredo form of 127.0.0.1"),
    (TEREDO_SERVER_PRIVATE, "Teredo form of 10.0.0.1"),
    ("::7f00:1", "IPv4-compatible form of 127.0.0.1"),
    ("::808:808", "IPv4-compatible form of 8.8.8.8"),  # deprecated form, refused outright
    ("::ffff:0:808:808", "IPv4-translated"),
    ("5f00::1", "SRv6"),
    ("4000::1", "2000::/3"),  # unassigned IPv6 space
]

ALLOWED = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.215.14",
    "2606:4700:4700::1111",
    "2a00:1450:4001:80b::200e",
    # Tunnelled/translated forms are judged by the IPv4 address the packets end up at:
    "64:ff9b::808:808",  # NAT64 (well-known prefix) of 8.8.8.8
    "2002:808:808::",  # 6to4 of 8.8.8.8
    "::ffff:8.8.8.8",  # IPv4-mapped 8.8.8.8
    TEREDO_PUBLIC,  # Teredo whose server and client are both public
]


@pytest.mark.parametrize(("address", "why"), REFUSED)
def test_check_address_refuses(address: str, why: str) -> None:
    ip = ipaddress.ip_address(address)
    with pytest.raises(UnsafeTarget) as info:
        check_address(ip, STRICT)
    assert info.value.kind == "private_address"
    assert str(ip) in info.value.message
    assert why in info.value.message
    # allow_private lets everything through
    check_address(ip, TargetPolicy(allow_private=True))


@pytest.mark.parametrize("address", ALLOWED)
def test_check_address_allows_public(address: str) -> None:
    check_address(ipaddress.ip_address(address), STRICT)


# --------------------------------------------------------------------------- URLs


@pytest.mark.parametrize(
    ("url", "kind", "fragment"),
    [
        ("http://example.com/hook", "scheme", "RELAY_ALLOW_HTTP_TARGETS"),
        ("ftp://example.com/hook", "scheme", "https://"),
        ("example.com/hook", "scheme", "https://"),
        ("https://user:pw@example.com/hook", "userinfo", "credentials"),
        ("https://user@example.com/hook", "userinfo", "credentials"),
        ("https://example.com/" + "a" * MAX_URL_LENGTH, "too_long", "2048"),
        ("https:///hook", "host", "no host"),
        ("https://:443/hook", "host", "no host"),
        ("https://example.com:0/hook", "port", "1 to 65535"),
        ("https://example.com:65536/hook", "port", "1 to 65535"),
        ("https://example.com:http/hook", "port", "1 to 65535"),
        ("https://example.com:/hook", "port", "1 to 65535"),
        ("https://exa mple.com/hook", "syntax", "whitespace"),
        ("https://example.com/ho ok", "syntax", "whitespace"),
        ("https://example.com/hook\n", "syntax", "U+000A"),
        ("https://example.com/\x00", "syntax", "U+0000"),
        ("https://example.com/\u200bx", "syntax", "U+200B"),
        ("https://example.com\\@evil.test/", "syntax", "backslash"),
        ("https://example.com/hook#frag", "fragment", "never sent"),
        ("https://example.com/hook#", "fragment", "never sent"),
        ("https://ex_ample..com/", "host", "not a valid hostname"),
        ("https://-bad.example.com/", "host", "not a valid hostname"),
        ("https://" + "a" * 64 + ".com/", "host", "not a valid hostname"),
        ("https://exa%6dple.com/", "host", "not a valid hostname"),
        ("https://[::1/", "syntax", "does not parse"),
        ("https://[fe80::1%25eth0]/", "host", "zone"),
        ("https://127.0.0.1/hook", "private_address", "loopback"),
        ("https://10.1.2.3:8443/hook", "private_address", "private"),
        ("https://[::1]/hook", "private_address", "loopback"),
        ("https://[::ffff:127.0.0.1]/hook", "private_address", "IPv4-mapped form of 127.0.0.1"),
        ("https://[64:ff9b::a9fe:a9fe]/", "private_address", "169.254.169.254"),
        # Numeric hosts that resolvers read as IPv4: refused before any lookup.
        ("https://2130706433/", "host", "127.0.0.1"),
        ("https://0x7f.1/", "host", "127.0.0.1"),
        ("https://127.1/", "host", "127.0.0.1"),
        ("https://017700000001/", "host", "127.0.0.1"),
        ("https://134744072/", "host", "8.8.8.8"),  # even a public one: ambiguous form
        ("https://1.2.3.4.5/", "host", "numeric"),
    ],
)
def test_validate_url_refuses(url: str, kind: str, fragment: str) -> None:
    with pytest.raises(UnsafeTarget) as info:
        validate_url(url, STRICT)
    assert info.value.kind == kind
    assert fragment in info.value.message


@pytest.mark.parametrize(
    ("policy", "url", "message"),
    [
        (STRICT, "ftp://example.com/hook", "the callback URL must use https://, not ftp://"),
        (STRICT, "example.com/hook", "the callback URL must use https://, not no scheme"),
        # Where http:// is allowed (relay dev), the refusal says so instead of "https only".
        (
            OPEN,
            "ftp://example.com/hook",
            "the callback URL must use https:// or http://, not ftp://",
        ),
        (LOCAL_HTTP, "gopher://x/", "the callback URL must use https:// or http://, not gopher://"),
    ],
)
def test_scheme_refusal_names_what_is_allowed(policy: TargetPolicy, url: str, message: str) -> None:
    with pytest.raises(UnsafeTarget) as info:
        validate_url(url, policy)
    assert (info.value.kind, info.value.message) == ("scheme", message)


def test_validate_url_refuses_non_string() -> None:
    with pytest.raises(UnsafeTarget) as info:
        validate_url(b"https://example.com/", STRICT)  # type: ignore[arg-type]
    assert info.value.kind == "syntax"


def test_validate_url_accepts_and_normalises() -> None:
    t = validate_url("https://Example.COM/hooks?x=1", STRICT)
    assert (t.scheme, t.host, t.port, t.ip) == ("https", "example.com", 443, None)
    t = validate_url("https://bücher.example:8443/h", STRICT)
    assert (t.host, t.port) == ("xn--bcher-kva.example", 8443)
    t = validate_url("https://[2606:4700:4700::1111]/h", STRICT)
    assert t.ip == ipaddress.ip_address("2606:4700:4700::1111")
    t = validate_url("https://8.8.8.8/h", STRICT)
    assert t.ip == ipaddress.ip_address("8.8.8.8")
    t = validate_url("https://hooks.example.com./h", STRICT)  # FQDN trailing dot
    assert t.host == "hooks.example.com."
    url = "https://example.com/" + "a" * (MAX_URL_LENGTH - len("https://example.com/"))
    assert validate_url(url, STRICT).url == url


def test_http_only_with_allow_http() -> None:
    t = validate_url("http://example.com/h", LOCAL_HTTP)
    assert (t.scheme, t.port) == ("http", 80)
    with pytest.raises(UnsafeTarget):
        validate_url("http://127.0.0.1/h", LOCAL_HTTP)  # http does not imply private


def test_localhost_refused_at_resolve_time() -> None:
    validate_url("https://localhost/hook", STRICT)  # syntax alone is fine
    with pytest.raises(UnsafeTarget) as info:
        vet_url("https://localhost/hook", STRICT)
    assert info.value.kind == "private_address"
    assert info.value.message == (
        "localhost resolves to a non-public address; callbacks may only go to public addresses"
    )
    assert "127.0.0.1" not in info.value.message


def test_decimal_and_hex_hosts_really_are_loopback() -> None:
    # What the refused numeric forms would have reached had they been looked up.
    for host in ("2130706433", "0x7f.1"):
        assert socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)[0][4][0] == "127.0.0.1"


def test_allow_private_lets_loopback_through() -> None:
    policy = TargetPolicy(allow_private=True)
    assert vet_url("https://localhost/hook", policy).host == "localhost"
    assert vet_url("https://127.0.0.1/hook", policy).ip == ipaddress.ip_address("127.0.0.1")
    assert vet_url("https://[::ffff:127.0.0.1]/", policy).ip is not None
    assert resolve_and_check("localhost", 443, policy) == [ipaddress.ip_address("127.0.0.1")]


def test_unresolvable_name_fails_fast_as_dns() -> None:
    started = time.monotonic()
    with pytest.raises(UnsafeTarget) as info:
        vet_url("https://nonexistent.invalid/hook", STRICT, timeout=3.0)
    assert info.value.kind == "dns"
    assert "nonexistent.invalid" in info.value.message
    assert time.monotonic() - started < 3.5


# --------------------------------------------------------------------------- fake resolver

Answer = list[str] | Callable[[], list[str]]


@contextmanager
def hostile_dns(
    monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[Answer]]
) -> Iterator[None]:
    """Make ``socket.getaddrinfo`` answer ``answers[name]`` in turn (last answer repeats)."""
    real = socket.getaddrinfo
    lock = threading.Lock()

    def fake(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in answers:
            return real(host, port, *args, **kwargs)
        with lock:
            queue = answers[host]
            answer = queue.pop(0) if len(queue) > 1 else queue[0]
        addresses = answer() if callable(answer) else answer
        out = []
        for a in addresses:
            family = socket.AF_INET6 if ":" in a else socket.AF_INET
            sockaddr = (a, port, 0, 0) if family == socket.AF_INET6 else (a, port)
            out.append((family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr))
        return out

    with monkeypatch.context() as m:
        m.setattr(socket, "getaddrinfo", fake)
        yield


def test_mixed_answer_refuses_all(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: dict[str, list[Answer]] = {"mixed.example": [["93.184.215.14", "10.0.0.5"]]}
    with hostile_dns(monkeypatch, answers), pytest.raises(UnsafeTarget) as info:
        vet_url("https://mixed.example/h", STRICT)
    assert info.value.kind == "private_address"
    assert "mixed.example resolves to a non-public address" in info.value.message
    assert "10.0.0.5" not in info.value.message


def test_public_answer_passes_and_dedupes(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = ["93.184.215.14", "93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"]
    with hostile_dns(monkeypatch, {"public.example": [answer]}):
        addresses = resolve_and_check("public.example", 443, STRICT)
        assert [str(a) for a in addresses] == answer[1:]
        assert vet_url("https://public.example/h", STRICT).host == "public.example"


def test_slow_dns_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow() -> list[str]:
        time.sleep(1.0)
        return ["93.184.215.14"]

    with hostile_dns(monkeypatch, {"slow.example": [slow]}):
        started = time.monotonic()
        with pytest.raises(UnsafeTarget) as info:
            resolve_and_check("slow.example", 443, STRICT, timeout=0.2)
        assert time.monotonic() - started < 0.8
    assert info.value.kind == "dns"
    assert "did not answer within 0.2 s" in info.value.message


# --------------------------------------------------------------------------- real servers


class Recorder(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: list[str] = []
        self.sni: list[str | None] = []

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class Handler(http.server.BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _answer(self) -> None:
        self.server.seen.append(f"{self.command} {self.path} host={self.headers['host']}")
        if self.path == "/slow":
            time.sleep(1.5)
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("content-length", "0")
            self.end_headers()
            return
        body = b"ok"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = _answer
    do_POST = _answer


@contextmanager
def serving(server: http.server.HTTPServer) -> Iterator[None]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        thread.join(timeout=5)
        server.server_close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    with serving(server):
        yield server


def request(policy: TargetPolicy, url: str, timeout: float = 2.0, **kw: Any) -> httpx.Response:
    with make_client(policy, timeout, user_agent=UA, **kw) as client:
        return client.post(url, content=b"{}")


def refused(policy: TargetPolicy, url: str, timeout: float = 2.0, **kw: Any) -> tuple[str, str]:
    """The (kind, message) of the exception a request raises; fails the test if none."""
    try:
        response = request(policy, url, timeout, **kw)
    except Exception as exc:
        return classify_error(exc)
    pytest.fail(f"expected the request to fail, got {response.status_code}")


def test_pinned_client_refuses_loopback_name(recorder: Recorder) -> None:
    # "localhost" stands for a customer hostname re-pointed at an internal address after it was
    # registered: the check happens in connect, so the request never leaves.
    with (
        make_client(LOCAL_HTTP, 2.0, user_agent=UA) as client,
        pytest.raises(UnsafeTarget) as info,
    ):
        client.post(f"http://localhost:{recorder.port}/hook", content=b"{}")
    # httpx re-raises exceptions it does not know, so UnsafeTarget arrives unwrapped.
    assert type(info.value) is UnsafeTarget
    assert classify_error(info.value) == (
        "blocked_destination",
        "localhost resolves to a non-public address; callbacks may only go to public addresses",
    )
    assert refused(LOCAL_HTTP, f"http://127.0.0.1:{recorder.port}/")[0] == "blocked_destination"
    assert recorder.seen == []


def test_pinned_client_reaches_loopback_when_allowed(recorder: Recorder) -> None:
    response = request(OPEN, f"http://localhost:{recorder.port}/hook")
    assert response.status_code == 200
    assert response.text == "ok"
    # The Host header keeps the name even though the socket went to the vetted IP.
    assert recorder.seen == [f"POST /hook host=localhost:{recorder.port}"]


def test_dns_rebinding_between_registration_and_delivery(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers: dict[str, list[Answer]] = {"rebind.example": [["93.184.215.14"], ["127.0.0.1"]]}
    with hostile_dns(monkeypatch, answers):
        url = f"http://rebind.example:{recorder.port}/hook"
        vet_url(url, LOCAL_HTTP)  # registration sees a public address
        kind, message = refused(LOCAL_HTTP, url)  # delivery gets the loopback answer
    assert kind == "blocked_destination"
    assert "rebind.example resolves to a non-public address" in message
    assert "127.0.0.1" not in message
    assert recorder.seen == []


def test_connection_pinned_to_the_vetted_address(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The name resolves once, to the server; the connect must use that answer (no second
    # lookup that a rebinding server could answer differently).
    calls: list[str] = []

    def answer() -> list[str]:
        calls.append("lookup")
        return ["127.0.0.1"] if len(calls) == 1 else ["10.9.9.9"]

    with hostile_dns(monkeypatch, {"pinned.example": [answer]}):
        response = request(OPEN, f"http://pinned.example:{recorder.port}/p")
    assert response.status_code == 200
    assert calls == ["lookup"]


def test_environment_proxy_is_ignored(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    # If the client honoured HTTP(S)_PROXY, the recorder (acting as proxy) would get the request
    # for a documentation address that the guard refuses.
    proxy = f"http://127.0.0.1:{recorder.port}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, proxy)
    assert refused(LOCAL_HTTP, "http://203.0.113.10/hook")[0] == "blocked_destination"
    assert recorder.seen == []


def test_client_rechecks_scheme_and_userinfo(recorder: Recorder) -> None:
    https_only = TargetPolicy(allow_private=True)
    kind, message = refused(https_only, f"http://localhost:{recorder.port}/hook")
    assert (kind, message) == (
        "blocked_destination",
        "refusing a callback over http://; only https:// is allowed",
    )
    kind, _ = refused(OPEN, f"http://user:pw@localhost:{recorder.port}/hook")
    assert kind == "blocked_destination"
    assert recorder.seen == []


def test_redirects_are_not_followed(recorder: Recorder) -> None:
    response = request(OPEN, f"http://localhost:{recorder.port}/redirect")
    assert response.status_code == 302
    assert recorder.seen == [f"POST /redirect host=localhost:{recorder.port}"]


def test_closed_port_is_connection() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kind, message = refused(OPEN, f"http://127.0.0.1:{port}/")
    assert kind == "connection"
    assert "refused" in message.lower()


def test_slow_receiver_is_timeout(recorder: Recorder) -> None:
    started = time.monotonic()
    kind, message = refused(OPEN, f"http://127.0.0.1:{recorder.port}/slow", timeout=0.5)
    assert time.monotonic() - started < 1.4
    assert (kind, message) == ("timeout", "timed out waiting for the response")


def test_unresolvable_name_is_dns() -> None:
    started = time.monotonic()
    kind, message = refused(OPEN, "http://nonexistent.invalid/", timeout=2.0)
    assert time.monotonic() - started < 2.5
    assert kind == "dns"
    assert "nonexistent.invalid" in message


def test_garbage_response_is_connection() -> None:
    with answering(b"this is not HTTP\r\n\r\n") as port:
        kind, message = refused(OPEN, f"http://127.0.0.1:{port}/")
    assert kind == "connection"
    assert "protocol" in message


@contextmanager
def answering(raw: bytes) -> Iterator[int]:
    """A one-connection server that reads the request and answers ``raw``; yields its port."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(5)

        def answer() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(5)
                conn.recv(65536)
                conn.sendall(raw)
                # Close only once the client is done: closing with its bytes unread would
                # reset the connection (ECONNRESET) before the client reads the answer.
                conn.shutdown(socket.SHUT_WR)
                with contextlib.suppress(OSError):
                    while conn.recv(65536):
                        pass

        thread = threading.Thread(target=answer)
        thread.start()
        try:
            yield listener.getsockname()[1]
        finally:
            thread.join(timeout=5)


def test_transport_raises_httpx_errors(recorder: Recorder) -> None:
    """The transport sits on public API (BaseTransport over httpcore's pool) and maps
    httpcore's errors to httpx's, as httpx's own transport does, body reads included."""
    assert not issubclass(GuardedTransport, httpx.HTTPTransport)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    with pytest.raises(httpx.ConnectError):
        request(OPEN, f"http://127.0.0.1:{closed}/")
    with pytest.raises(httpx.ReadTimeout):
        request(OPEN, f"http://127.0.0.1:{recorder.port}/slow", timeout=0.3)
    with answering(b"this is not HTTP\r\n\r\n") as port, pytest.raises(httpx.RemoteProtocolError):
        request(OPEN, f"http://127.0.0.1:{port}/")
    cut_short = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this"
    with (
        answering(cut_short) as port,
        make_client(OPEN, 2.0, user_agent=UA) as client,
        client.stream("POST", f"http://127.0.0.1:{port}/", content=b"{}") as response,
    ):
        assert response.status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):
            response.read()


def test_classify_other_errors() -> None:
    assert classify_error(UnsafeTarget("dns", "x")) == ("dns", "x")
    assert classify_error(UnsafeTarget("scheme", "y"))[0] == "blocked_destination"
    assert classify_error(httpx.PoolTimeout("p"))[0] == "timeout"
    assert classify_error(httpx.UnsupportedProtocol("ftp"))[0] == "blocked_destination"
    assert classify_error(RuntimeError("boom")) == ("connection", "unexpected RuntimeError: boom")


# --------------------------------------------------------------------------- TLS


@contextmanager
def tls_recorder(context: ssl.SSLContext) -> Iterator[Recorder]:
    server = Recorder()

    def remember_sni(sock: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> None:
        server.sni.append(name)

    context.sni_callback = remember_sni
    # Handshake per connection in the handler thread, not in accept() (which would stall the
    # serve loop on a client that never completes it).
    server.socket = context.wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False
    )
    with serving(server):
        yield server


@pytest.fixture(scope="module")
def pki() -> Pki:
    return Pki()


def test_tls_verifies_certificate_against_hostname(pki: Pki, tmp_path: Path) -> None:
    with tls_recorder(pki.server_context("localhost", tmp_path)) as server:
        url = f"https://localhost:{server.port}/hook"
        response = request(OPEN, url, ssl_context=pki.client_context())
        assert response.status_code == 200
        # The socket went to the pinned 127.0.0.1, yet SNI carried the hostname.
        assert server.sni == ["localhost"]
        assert server.seen == [f"POST /hook host=localhost:{server.port}"]
        # Without allow_private the same URL never reaches TLS.
        kind, _ = refused(TargetPolicy(), url, ssl_context=pki.client_context())
        assert kind == "blocked_destination"
        assert server.sni == ["localhost"]


def test_tls_refuses_certificate_for_another_name(pki: Pki, tmp_path: Path) -> None:
    with tls_recorder(pki.server_context("other.example", tmp_path)) as server:
        kind, message = refused(
            OPEN, f"https://localhost:{server.port}/hook", ssl_context=pki.client_context()
        )
        assert kind == "connection"
        assert "TLS certificate verification failed" in message
        assert "localhost" in message  # "Hostname mismatch, certificate is not valid for ..."
        assert server.seen == []


def test_tls_refuses_untrusted_ca(pki: Pki, tmp_path: Path) -> None:
    with tls_recorder(pki.server_context("localhost", tmp_path)) as server:
        # Default trust store (certifi): the test CA is unknown.
        kind, message = refused(OPEN, f"https://localhost:{server.port}/hook")
        assert kind == "connection"
        assert "TLS" in message
        assert server.seen == []


# --------------------------------------------------------------------------- what a tenant is told


def test_every_refusal_that_depends_on_dns_or_addresses_answers_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def slow() -> list[str]:
        time.sleep(1.0)
        return ["93.184.215.14"]

    answers: dict[str, list[Answer]] = {
        "private.example": [["10.0.0.5"]],
        "mixed.example": [["93.184.215.14", "fd00::1"]],
        "slow.example": [slow],
    }
    refusals = []
    with hostile_dns(monkeypatch, answers):
        for url in (
            "https://private.example/h",
            "https://mixed.example/h",
            "https://slow.example/h",  # the lookup times out
            "https://nonexistent.invalid/h",
            "https://localhost/h",
            "https://10.0.0.5/h",  # an IP literal's address is judged too
            "https://[::1]/h",
        ):
            with pytest.raises(UnsafeTarget) as info:
                vet_url(url, STRICT, timeout=0.2)
            refusals.append(info.value)
    assert {r.kind for r in refusals} == {"dns", "private_address"}
    assert {r.answer for r in refusals} == {REFUSED_TARGET}
    # The messages (for the log) still say why.
    assert len({r.message for r in refusals}) == len(refusals)


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("ftp://example.com/h", "scheme"),
        ("https://u:p@example.com/h", "userinfo"),
        ("https://example.com/h#x", "fragment"),
        ("https://example.com:0/h", "port"),
        ("https://exa mple.com/h", "syntax"),
        ("https://93.184.215.14/h", "form"),  # public, but not a DNS name
        ("https://example.com/" + "a" * 2100, "too_long"),
    ],
)
def test_refusals_of_the_urls_own_text_keep_their_reason(url: str, kind: str) -> None:
    """Nothing of the network is in them: no DNS was asked (the form is checked first)."""
    with pytest.raises(UnsafeTarget) as info:
        vet_url(url, STRICT)
    assert info.value.kind == kind
    assert info.value.answer == info.value.message != REFUSED_TARGET
