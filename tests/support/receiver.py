"""A real HTTP receiver on 127.0.0.1 that records every request and answers from a script.

``Receiver.script(path, [Reply(...), ...])`` sets the answers for a path, consumed in order
(the last one repeats); unscripted paths answer 200. Each request is recorded with its
headers, exact body bytes and arrival time (``time.time()``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    body: bytes = b"ok"
    echo: bool = False  # answer the request's data.challenge (webhook.verify) as the body


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


class Receiver:
    """``chooser``, when given, picks the reply of every request from its sequence number
    (1-based, over all paths); scripts are then ignored."""

    def __init__(self, chooser: Callable[[int], Reply] | None = None) -> None:
        self.requests: list[Received] = []
        self.replies: list[int] = []  # the status answered to each request, in order
        self._chooser = chooser
        self._scripts: dict[str, list[Reply]] = {}
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                if len(body) < length:
                    return  # the sender died mid-request: nothing was delivered
                at = time.time()
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver._lock:
                    receiver.requests.append(Received(self.path, headers, body, at))
                    reply = receiver._next(self.path, len(receiver.requests))
                    receiver.replies.append(reply.status)
                if reply.echo:
                    try:
                        challenge = json.loads(body)["data"]["challenge"]
                    except (ValueError, KeyError, TypeError):
                        challenge = ""
                    reply = Reply(reply.status, reply.headers, reply.delay, str(challenge).encode())
                if reply.delay:
                    time.sleep(reply.delay)
                try:
                    self.send_response(reply.status)
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.send_header("content-length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, format: str, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a sender killed mid-request (the chaos tests do that) is not news

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def script(self, path: str, replies: list[Reply]) -> None:
        with self._lock:
            self._scripts[path] = list(replies)

    def _next(self, path: str, number: int) -> Reply:
        if self._chooser is not None:
            return self._chooser(number)
        replies = self._scripts.get(path)
        if not replies:
            return Reply()
        return replies.pop(0) if len(replies) > 1 else replies[0]

    def accepted(self) -> list[Received]:
        """The requests answered with a 2xx."""
        with self._lock:
            return [r for r, s in zip(self.requests, self.replies, strict=False) if s < 300]

    def received(self, path: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if path is None or r.path == path]

    def types(self, path: str | None = None) -> list[str]:
        """The ``type`` of each event received (at ``path``, or anywhere), in order."""
        return [json.loads(r.body)["type"] for r in self.received(path)]

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.shutdown()
        self.server.server_close()
