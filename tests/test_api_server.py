"""The HTTP server's bounds (``relay.api.server``) against real sockets on the real app:
slow headers and slow bodies cut within the configured time while ``/healthz`` stays fast for
everyone else, oversized heads refused with 431, idle connections closed, the connection
bound held.

Times are asserted from below exactly (nothing is cut before its bound) and from above with
the slack a busy machine needs (nothing is left open).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

from tests.support.api_fixtures import V1, Api, ApiFactory, api_factory_fixture  # noqa: F401

TIMEOUT = 4.0  # the header and body timeouts of these tests (room for /healthz meanwhile)
SLACK = 15.0  # how late a cut may come on a busy machine


def connect(api: Api) -> socket.socket:
    host, port = api.base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=60)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (the test's socket timeout bounds it)."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def status_and_body(raw: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


class Dribbler(threading.Thread):
    """Sends ``data`` one byte every ``interval`` seconds until the server closes; records
    when that was and what it answered."""

    def __init__(self, api: Api, data: bytes, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.sock = connect(api)
        self.data = data
        self.interval = interval
        self.started = time.monotonic()
        self.cut_after: float | None = None
        self.answer = b""

    def run(self) -> None:
        reader = threading.Thread(target=self._read, daemon=True)
        reader.start()
        try:
            for byte in self.data:
                if self.cut_after is not None:
                    break
                self.sock.sendall(bytes([byte]))
                time.sleep(self.interval)
        except OSError:
            pass  # the server closed: the reader knows when
        reader.join(SLACK + 30)

    def _read(self) -> None:
        self.answer = read_all(self.sock)
        self.cut_after = time.monotonic() - self.started
        self.sock.close()


@pytest.fixture(name="bounded")
def bounded_fixture(api_factory: ApiFactory) -> Api:
    api: Api = api_factory(
        http_header_timeout=TIMEOUT,
        http_body_timeout=TIMEOUT,
        http_keepalive_timeout=1,
    )
    return api


@contextmanager
def healthz_probe(api: Api) -> Iterator[list[float]]:
    """``/healthz`` asked every 0.1 s from another client meanwhile; when each answer came
    (``time.monotonic()``)."""
    answered: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=api.base_url, timeout=10) as client:
            while not stop.is_set():
                assert client.get("/healthz").status_code == 200
                answered.append(time.monotonic())
                stop.wait(0.1)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    try:
        yield answered
    finally:
        stop.set()
        thread.join(30)


def test_slow_headers_are_cut_and_healthz_stays_fast(bounded: Api) -> None:
    head = b"GET /healthz HTTP/1.1\r\nHost: relay\r\nX-Slow: " + b"a" * 400 + b"\r\n\r\n"
    with healthz_probe(bounded) as answered:
        slow = [Dribbler(bounded, head) for _ in range(20)]
        for s in slow:
            s.start()
        for s in slow:
            s.join(TIMEOUT + SLACK + 30)
    for s in slow:
        assert s.cut_after is not None, "a slow client was never cut"
        assert TIMEOUT * 0.9 <= s.cut_after <= TIMEOUT + SLACK, s.cut_after
        status, body = status_and_body(s.answer)
        assert status == 408 and body["error"]["type"] == "request_timeout"  # type: ignore[index]
    assert_served_meanwhile(answered, slow)


def assert_served_meanwhile(answered: list[float], slow: list[Dribbler]) -> None:
    """/healthz kept answering while every slow client was still connected: it never waits
    behind them (an order, not a latency a busy machine could break)."""
    first_cut = min(s.started + (s.cut_after or 0) for s in slow)
    last_start = max(s.started for s in slow)
    during = [t for t in answered if last_start < t < first_cut]
    assert len(during) >= 3, (len(answered), first_cut - last_start)


def test_a_slow_body_is_cut_and_healthz_stays_fast(bounded: Api) -> None:
    body = json.dumps({"since": "2026-01-01T00:00:00Z"}).encode() + b" " * 200
    head = (
        f"POST {V1}/deliveries/recover HTTP/1.1\r\nHost: relay\r\n"
        f"Authorization: Bearer {bounded.key('acme')}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with healthz_probe(bounded) as answered:
        slow = Dribbler(bounded, body)
        slow.sock.sendall(head)  # the head at once: only the body is slow
        slow.start()
        slow.join(TIMEOUT + SLACK + 30)
    assert slow.cut_after is not None, "the slow body was never cut"
    assert TIMEOUT * 0.9 <= slow.cut_after <= TIMEOUT + SLACK, slow.cut_after
    status, answer = status_and_body(slow.answer)
    assert status == 408 and "body" in answer["error"]["message"]  # type: ignore[index]
    assert_served_meanwhile(answered, [slow])
    # The handler that waited for the body made nothing due (it never ran to the end).
    r = bounded.client.get("/healthz")
    assert r.status_code == 200


@pytest.mark.parametrize(
    "head",
    [
        b"X-Big: " + b"a" * 1024 * 1024 + b"\r\n",  # one 1 MB header
        b"".join(b"X-H-%d: v\r\n" % i for i in range(10_000)),  # 10,000 headers
        b"".join(b"X-H-%d: v\r\n" % i for i in range(101)),  # one more than allowed
    ],
    ids=["1MB-header", "10000-headers", "101-headers"],
)
def test_oversized_heads_are_refused_with_431(bounded: Api, head: bytes) -> None:
    with connect(bounded) as sock:
        # Refused before all was sent (a reset then): the answer is already there to read.
        with contextlib.suppress(OSError):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: relay\r\n" + head + b"\r\n")
        status, body = status_and_body(read_all(sock))
    assert status == 431, body
    assert body["error"]["type"] == "headers_too_large"  # type: ignore[index]
    # Headers within the bounds still pass.
    r = bounded.client.get("/healthz", headers={f"x-h-{i}": "v" * 100 for i in range(90)})
    assert r.status_code == 200


def test_an_unterminated_huge_header_is_refused_without_being_buffered(bounded: Api) -> None:
    with connect(bounded) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nX-Big: ")
        sent = 0
        with pytest.raises(OSError):  # the server stops reading and closes long before 64 MiB
            while sent < 64 * 1024 * 1024:
                sent += sock.send(b"a" * 65536)
        assert sent < 16 * 1024 * 1024, sent


def test_idle_connections_are_closed(bounded: Api) -> None:
    # A connection that never sends anything: closed at the header timeout.
    with connect(bounded) as silent:
        t0 = time.monotonic()
        status, _ = status_and_body(read_all(silent))
        waited = time.monotonic() - t0
    assert status == 408 and TIMEOUT * 0.9 <= waited <= TIMEOUT + SLACK, waited
    # A keep-alive connection idle after its answer: closed at the keep-alive timeout (1 s).
    with connect(bounded) as idle:
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")
        t0 = time.monotonic()
        answer = read_all(idle)
        waited = time.monotonic() - t0
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert 0.9 <= waited <= 1 + SLACK, waited


def test_the_connection_bound_holds(api_factory: ApiFactory) -> None:
    api = api_factory(http_max_connections=5, http_header_timeout=60.0)
    with ExitStack() as stack:
        held = [stack.enter_context(connect(api)) for _ in range(5)]
        # One more is answered 503 and closed, at once.
        with connect(api) as extra:
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")
            raw = read_all(extra)
        status, body = status_and_body(raw)
        assert status == 503 and body["error"]["type"] == "too_many_connections"  # type: ignore[index]
        assert b"\r\nretry-after: 1\r\n" in raw.lower()
        # The held ones are served.
        held[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")
        assert read_all(held[0]).startswith(b"HTTP/1.1 200 ")
    # Once they are gone, new connections are served again.

    def served() -> bool:
        try:
            with connect(api) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")
                return read_all(sock).startswith(b"HTTP/1.1 200 ")
        except OSError:
            return False

    deadline = time.monotonic() + SLACK
    while not served():
        assert time.monotonic() < deadline, "never served again"
        time.sleep(0.2)


def test_requests_within_the_bounds_pass_in_pieces_and_pipelined(bounded: Api) -> None:
    body = json.dumps({"since": "2026-01-01T00:00:00Z"}).encode()
    head = (
        f"POST {V1}/deliveries/recover HTTP/1.1\r\nHost: relay\r\n"
        f"Authorization: Bearer {bounded.key('acme')}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    with connect(bounded) as sock:
        for piece in (head[:20], head[20:], body[:5], body[5:]):  # each in time
            sock.sendall(piece)
            time.sleep(0.2)
        assert read_all(sock).startswith(b"HTTP/1.1 202 ")
    # Two requests in one write: both answered, in order.
    with connect(bounded) as sock:
        sock.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n"
            b"GET /nope HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n"
        )
        raw = read_all(sock)
    assert raw.startswith(b"HTTP/1.1 200 ") and b"HTTP/1.1 404 " in raw
