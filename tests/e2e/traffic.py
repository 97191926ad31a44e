"""Continuous client traffic for the fault suite, measured from outside.

:class:`Traffic` runs, against a real API, until stopped:

- polls of ``GET /batches/{name}`` at a steady rate (20/s by default) over the batches made so
  far, each sent on time by a dispatcher whatever the earlier ones are doing (a pool of
  threads: a stalled API does not slow the arrivals down, as real clients would not);
- a producer making batch after batch: upload a document, register a webhook on the
  receiver (whose path answers 500 once, then 200: every notification needs a retry), process.
  A 503 or a request that got no answer is retried, as a client would (the upload with its
  ``Idempotency-Key``: a 503 after the write, ``relay.redis.replicas``, or a lost answer may have
  made the document already); anything else unexpected is recorded.

Every request has a client-side ``deadline`` (httpx timeout); a request that reaches it is
recorded as ``timeout``. Times are ``time.monotonic()``.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

from tests.support.receiver import Receiver, Reply

CSV = b"sku,qty\nA,1\nB,2\n"


@dataclass(frozen=True)
class Sample:
    kind: str  # poll, upload, register, process
    start: float
    duration: float
    outcome: str  # the status code, "timeout", or the name of the transport error


def p99(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


@dataclass
class Traffic:
    api_url: str
    key: str
    receiver: Receiver
    deadline: float = 10.0
    poll_rate: float = 20.0
    batch_pause: float = 0.3
    prefix: str = "t"
    content: bytes = CSV
    samples: list[Sample] = field(default_factory=list)
    batches: list[str] = field(default_factory=list)  # processed (202): each must complete
    unexpected: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._http = httpx.Client(
            base_url=self.api_url + "/api/v1",
            headers={"authorization": f"Bearer {self.key}"},
            timeout=self.deadline,
            limits=httpx.Limits(max_connections=400, max_keepalive_connections=50),
        )
        self._pool = ThreadPoolExecutor(int(self.poll_rate * self.deadline) + 20, "poll")
        self._threads = [
            threading.Thread(target=self._dispatch, name="polls", daemon=True),
            threading.Thread(target=self._produce, name="producer", daemon=True),
        ]

    # -- running -------------------------------------------------------------------------

    def start(self) -> None:
        self._make_batch(0)  # the polls need a batch to read
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.deadline + 60)
        self._pool.shutdown(wait=True)
        self._http.close()

    def _request(self, kind: str, method: str, url: str, **kwargs: object) -> str:
        started = time.monotonic()
        try:
            outcome = str(self._http.request(method, url, **kwargs).status_code)  # type: ignore[arg-type]
        except httpx.TimeoutException:
            outcome = "timeout"
        except httpx.HTTPError as exc:
            outcome = type(exc).__name__
        with self._lock:
            self.samples.append(Sample(kind, started, time.monotonic() - started, outcome))
        return outcome

    def _poll(self, name: str) -> None:
        outcome = self._request("poll", "GET", f"/batches/{name}")
        if outcome not in {"200", "503", "timeout"}:
            with self._lock:
                self.unexpected.append(f"GET /batches/{name}: {outcome}")

    def _dispatch(self) -> None:
        interval = 1.0 / self.poll_rate
        due = time.monotonic()
        i = 0
        while not self._stop.is_set():
            with self._lock:
                name = self.batches[i % len(self.batches)]
            self._pool.submit(self._poll, name)
            i += 1
            due += interval
            self._stop.wait(max(0.0, due - time.monotonic()))

    def _until(self, kind: str, ok: set[str], method: str, url: str, **kwargs: object) -> bool:
        """Send until answered with one of ``ok`` (a 503 or no answer: again, as a client
        retries); False on anything else, or after a minute of trying."""
        give_up = time.monotonic() + 60
        while True:
            outcome = self._request(kind, method, url, **kwargs)
            if outcome in ok:
                return True
            transient = outcome == "503" or outcome == "timeout" or not outcome.isdigit()
            if not transient or time.monotonic() > give_up:
                with self._lock:
                    self.unexpected.append(f"{method} {url}: {outcome}")
                return False
            time.sleep(0.2)

    def _make_batch(self, n: int) -> None:
        name = f"{self.prefix}{n:04d}"
        self.receiver.script(f"/{name}", [Reply(500), Reply(200)])
        files = {"file": ("doc.csv", self.content, "text/csv")}
        made = (
            self._until("upload", {"201"}, "POST", "/documents", files=files,
                        data={"batch_name": name}, headers={"Idempotency-Key": f"{name}-doc"})
            and self._until("register", {"200", "201"}, "PUT", f"/batches/{name}/webhook",
                            json={"url": self.receiver.url(f"/{name}")})
            and self._until("process", {"202"}, "POST", f"/batches/{name}/process")
        )  # fmt: skip
        if made:
            with self._lock:
                self.batches.append(name)

    def _produce(self) -> None:
        n = 1
        while not self._stop.is_set():
            self._make_batch(n)
            n += 1
            self._stop.wait(self.batch_pause)

    # -- reading the record --------------------------------------------------------------

    def polls(self, since: float, until: float = float("inf")) -> list[Sample]:
        with self._lock:
            return [s for s in self.samples if s.kind == "poll" and since <= s.start < until]

    def answered_again(self, since: float) -> float | None:
        """When the API answered again: the end of the first poll sent at or after ``since``
        that was answered 200 (None when none was yet)."""
        ends = [s.start + s.duration for s in self.polls(since) if s.outcome == "200"]
        return min(ends, default=None)

    def over_deadline(self) -> list[Sample]:
        """Requests that got no answer within the deadline."""
        with self._lock:
            return [s for s in self.samples if s.outcome == "timeout" or s.duration > self.deadline]
