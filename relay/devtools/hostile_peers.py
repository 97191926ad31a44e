"""Receivers that misbehave on purpose: raw sockets on 127.0.0.1, one thread per listener.

- ``drip``: reads the request, answers ``HTTP/1.1 200 OK\\r\\n`` and then one header byte
  every ``interval`` seconds, forever;
- ``hang``: reads the request and never answers.

Each counts the connections it accepted and how many the client closed (EOF seen), so a
test can check that an attempt's connection does not outlive it.
"""

from __future__ import annotations

import socket
import threading
import time


class Hostile:
    def __init__(self, mode: str, interval: float = 0.5) -> None:
        assert mode in ("drip", "hang")
        self.mode = mode
        self.interval = interval
        self.accepted = 0
        self.closed_by_client = 0
        self.webhook_ids: list[str] = []  # of every request, in arrival order
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    @property
    def open_connections(self) -> int:
        with self._lock:
            return self.accepted - self.closed_by_client

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(self.interval)
        try:
            self._note_id(conn)
            if self.mode == "drip":
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
            while not self._stop.is_set():
                try:
                    data = conn.recv(65536)
                    if not data:  # the client closed the connection
                        with self._lock:
                            self.closed_by_client += 1
                        return
                except TimeoutError:
                    pass
                if self.mode == "drip":
                    conn.sendall(b"X")
        except OSError:  # reset by the client: closed as well
            with self._lock:
                self.closed_by_client += 1
        finally:
            conn.close()

    def _note_id(self, conn: socket.socket) -> None:
        """Read the request head and remember its ``webhook-id``."""
        head = b""
        deadline = time.monotonic() + 5
        while b"\r\n\r\n" not in head and time.monotonic() < deadline:
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            head += chunk
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"webhook-id":
                with self._lock:
                    self.webhook_ids.append(value.strip().decode())

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        time.sleep(0)
