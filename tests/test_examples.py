"""The example receivers (examples/receiver.py and receiver.js) as real processes.

Each gets requests signed by relay's own signing code: it must answer 2xx to a genuine delivery,
process a ``webhook-id`` once however often it arrives, honour the previous material during a
rotation, and answer 400 to anything tampered, stale, forged or missing a configured signature.
The Node receiver runs when ``node`` and ``npm`` are present and ``npm install`` works.
Catching up runs against relay's real API, directly or behind a tiny proxy on 127.0.0.1 that
is down at first, or answers a few canned statuses (a 503, the 404 of an event not appended
yet) before passing requests on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from relay.crypto import SigningMaterial
from relay.delivery.signing import build_headers
from relay.devtools.processes import spawn
from relay.redis.keyspace import completion_id, new_id
from relay.state.event_bodies import notification_body, probe_body, verify_body
from relay.state.model import Batch, Status
from relay.timefmt import now_ms
from tests.support.api_fixtures import V1, Api, api_factory_fixture, api_fixture  # noqa: F401
from tests.support.helpers import free_port, wait_until
from tests.test_api_events import complete_in_process

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PUBLIC_URL = "https://relay.example.com"


@pytest.fixture(scope="module")
def node_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of receiver.js with its package.json installed (node_modules stays out of git)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for examples/receiver.js and are not on PATH")
    target = tmp_path_factory.mktemp("node-receiver")
    for name in ("receiver.js", "package.json"):
        shutil.copy(EXAMPLES / name, target / name)
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=target,
            capture_output=True,
            text=True,
            timeout=90,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("npm install timed out (is the npm registry reachable?)")
    if done.returncode != 0:
        pytest.skip(f"npm install failed (is the npm registry reachable?): {done.stderr[-500:]}")
    return target


@pytest.fixture(params=["python", "node"])
def command(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "python":
        return [sys.executable, str(EXAMPLES / "receiver.py")]
    node_path: Path = request.getfixturevalue("node_dir")
    return [str(shutil.which("node")), str(node_path / "receiver.js")]


@dataclass
class Receiver:
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_processed(self, msg_id: str, batch: str, seq: int) -> None:
        line = f"processed {msg_id} batch={batch} seq={seq}"
        wait_until(lambda: line in self.output(), 10, message=f"no {line!r} in the output")

    def processed(self, msg_id: str) -> int:
        return self.output().count(f"processed {msg_id} ")


@contextmanager
def running(command: list[str], tmp: Path, **settings: str) -> Iterator[Receiver]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "WEBHOOK_"))}
    env.update(settings, PYTHONUNBUFFERED="1")
    argv = [*command, "--port", str(port), "--state", str(tmp / "last-id")]
    proc = spawn("receiver", argv, tmp, env, ROOT)
    receiver = Receiver(f"http://127.0.0.1:{port}/hook", proc.log)

    def up() -> bool:
        if not proc.alive:
            raise AssertionError(f"the receiver exited early:\n{receiver.output()}")
        try:
            httpx.get(receiver.url, timeout=1)
        except httpx.TransportError:
            return False
        return True

    try:
        wait_until(up, 15, 0.05, "the receiver did not start")
        yield receiver
    finally:
        proc.stop()


def completion(name: str, seq: int) -> bytes:
    """The exact body relay POSTs when batch ``name`` completes for the ``seq``-th time."""
    done = now_ms()
    counts = {status: 0 for status in Status}
    counts[Status.SUCCEEDED], counts[Status.FAILED] = 2, 1
    batch = Batch(
        account="acct_test",
        name=name,
        counts=counts,
        created_at=done - 60_000,
        started_at=done - 50_000,
        completed_at=done,
        deleted_at=None,
        completion_seq=seq,
        fields_json="[]",
    )
    return notification_body(batch, PUBLIC_URL)


def signed(
    msg_id: str,
    body: bytes,
    materials: Sequence[SigningMaterial],
    *,
    age: int = 0,
    keep: str | None = None,
) -> dict[str, str]:
    """Headers as relay sends them; ``keep`` drops every signature entry of another version."""
    headers = build_headers(msg_id, int(time.time()) - age, body, materials, "relay/test")
    if keep is not None:
        entries = headers["webhook-signature"].split()
        headers["webhook-signature"] = " ".join(e for e in entries if e.startswith(keep + ","))
    return headers


def test_receiver_verifies_deduplicates_and_refuses(command: list[str], tmp_path: Path) -> None:
    current, previous = SigningMaterial.generate(now_ms()), SigningMaterial.generate(now_ms())
    stranger = SigningMaterial.generate(now_ms())
    settings = {
        "WEBHOOK_SECRET": current.whsec,
        "WEBHOOK_PREVIOUS_SECRET": previous.whsec,
        "WEBHOOK_PUBLIC_KEY": current.whpk,
        "WEBHOOK_PREVIOUS_PUBLIC_KEY": previous.whpk,
    }
    first, rotated, old_only = (new_id("msg", 0) for _ in range(3))
    body1, body2, body3 = completion("b1", 1), completion("b1", 2), completion("b2", 1)
    with running(command, tmp_path, **settings) as receiver, httpx.Client(timeout=5) as client:

        def post(body: bytes, headers: dict[str, str]) -> int:
            return client.post(receiver.url, content=body, headers=headers).status_code

        assert post(body1, signed(first, body1, [current])) == 200
        receiver.wait_processed(first, "b1", 1)
        # A retry: same webhook-id, signed again at a later attempt. Acknowledged, not redone.
        assert post(body1, signed(first, body1, [current], age=-1)) == 200
        # During a rotation relay sends four entries (v1/v1a of the new, then of the old).
        assert post(body2, signed(rotated, body2, [current, previous])) == 200
        assert post(body3, signed(old_only, body3, [previous])) == 200
        receiver.wait_processed(rotated, "b1", 2)
        receiver.wait_processed(old_only, "b2", 1)

        tampered = body1.replace(b'"completion_seq":1', b'"completion_seq":9')
        assert tampered != body1
        refused = {
            "tampered body": (tampered, signed(new_id("msg", 0), body1, [current])),
            "unknown signer": (body1, signed(new_id("msg", 0), body1, [stranger])),
            "stale timestamp": (body1, signed(new_id("msg", 0), body1, [current], age=600)),
            "v1 only": (body1, signed(new_id("msg", 0), body1, [current], keep="v1")),
            "v1a only": (body1, signed(new_id("msg", 0), body1, [current], keep="v1a")),
            "no signature": (body1, {"webhook-id": new_id("msg", 0)}),
        }
        for case, (body, headers) in refused.items():
            assert post(body, headers) == 400, case

        assert post(body1, signed(first, body1, [current])) == 200  # still a duplicate
        output = receiver.output()
        assert [receiver.processed(i) for i in (first, rotated, old_only)] == [1, 1, 1], output
        assert output.count("processed ") == 3, output


def test_receiver_with_only_the_public_key(command: list[str], tmp_path: Path) -> None:
    material, other = SigningMaterial.generate(now_ms()), SigningMaterial.generate(now_ms())
    msg_id, body = new_id("msg", 1), completion("b3", 1)
    with (
        running(command, tmp_path, WEBHOOK_PUBLIC_KEY=material.whpk) as receiver,
        httpx.Client(timeout=5) as client,
    ):

        def post(content: bytes, headers: dict[str, str]) -> int:
            return client.post(receiver.url, content=content, headers=headers).status_code

        assert post(body, signed(msg_id, body, [material], keep="v1")) == 400
        assert post(body, signed(msg_id, body, [other])) == 400
        assert post(body + b" ", signed(msg_id, body, [material])) == 400
        assert post(body, signed(msg_id, body, [material], age=400)) == 400
        assert post(body, signed(msg_id, body, [material], keep="v1a")) == 200
        receiver.wait_processed(msg_id, "b3", 1)
        assert receiver.output().count("processed ") == 1


def test_receiver_echoes_the_verification_challenge(command: list[str], tmp_path: Path) -> None:
    material = SigningMaterial.generate(now_ms())
    body = verify_body("b1", "https://h.example/hook", "ch4llenge-xyz", now_ms())
    with (
        running(command, tmp_path, WEBHOOK_SECRET=material.whsec) as receiver,
        httpx.Client(timeout=5) as client,
    ):
        r = client.post(
            receiver.url, content=body, headers=signed(new_id("msg", 2), body, [material])
        )
        assert r.status_code == 200 and "ch4llenge-xyz" in r.text
        # Unsigned, it is refused like anything else.
        r = client.post(receiver.url, content=body, headers={"webhook-id": new_id("msg", 2)})
        assert r.status_code == 400 and "ch4llenge-xyz" not in r.text
        test = probe_body("b1", "https://h.example/hook", now_ms())
        r = client.post(
            receiver.url, content=test, headers=signed(new_id("msg", 2), test, [material])
        )
        assert r.status_code == 200
        assert "processed" not in receiver.output()


def test_receiver_resumes_from_the_last_id_it_processed(
    command: list[str], tmp_path: Path, api: Api
) -> None:
    """Three batches completed; the receiver had processed the first (its id in the state
    file): when it starts it reads the feed after it and processes the other two, once."""
    for name in ("r1", "r2", "r3"):
        complete_in_process(api, "acme", name)
    events = api.client.get(f"{V1}/events", headers=api.auth("acme")).json()["events"]
    assert len(events) == 3
    (tmp_path / "last-id").write_text(events[0]["id"])
    material = SigningMaterial.generate(now_ms())
    settings = {
        "WEBHOOK_SECRET": material.whsec,
        "EVENTS_API_URL": api.base_url + V1,
        "EVENTS_API_KEY": api.key("acme"),
    }
    with running(command, tmp_path, **settings) as receiver:
        receiver.wait_processed(events[2]["id"], "r3", 1)
        # In the background: the line comes after the events, once the position is saved.
        wait_until(lambda: "caught up: 2 event(s)" in receiver.output(), 10)
        output = receiver.output()
        assert receiver.processed(events[0]["id"]) == 0, output
        assert receiver.processed(events[1]["id"]) == 1, output
        assert (tmp_path / "last-id").read_text() == events[2]["id"]


def feed_webhook(event: dict[str, Any], material: SigningMaterial) -> tuple[bytes, dict[str, str]]:
    """The webhook of a feed event (its body is the event without ``id``), signed."""
    body = json.dumps({k: v for k, v in event.items() if k != "id"}).encode()
    return body, signed(event["id"], body, [material])


@contextmanager
def api_proxy(target: str, port: int, canned: list[int]) -> Iterator[list[int]]:
    """relay's API (``target``) behind a proxy on 127.0.0.1:``port``: the first requests get
    the ``canned`` statuses, the rest relay's answers. Yields the statuses answered so far."""
    answered: list[int] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                status = canned.pop(0) if canned else None
            if status is None:
                headers = {"authorization": self.headers.get("authorization", "")}
                r = httpx.get(target + self.path, headers=headers, timeout=10)
                status, body = r.status_code, r.content
            else:
                body = json.dumps({"error": {"type": "canned", "message": str(status)}}).encode()
            with lock:
                answered.append(status)
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield answered
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_receiver_serves_while_the_api_is_down_and_catches_up_later(
    command: list[str], tmp_path: Path, api: Api
) -> None:
    """relay's API is unreachable when the receiver starts: it serves webhooks anyway, tries
    the feed again with a backoff (through a 503 too), then catches up, each event once."""
    for name in ("r1", "r2", "r3"):
        complete_in_process(api, "acme", name)
    events = api.client.get(f"{V1}/events", headers=api.auth("acme")).json()["events"]
    assert len(events) == 3
    state = tmp_path / "last-id"
    state.write_text(events[0]["id"])
    material = SigningMaterial.generate(now_ms())
    port = free_port()  # nothing listens there yet
    settings = {
        "WEBHOOK_SECRET": material.whsec,
        "EVENTS_API_URL": f"http://127.0.0.1:{port}{V1}",
        "EVENTS_API_KEY": api.key("acme"),
        "EVENTS_RETRY_MAX_S": "0.5",
    }
    with running(command, tmp_path, **settings) as receiver, httpx.Client(timeout=5) as client:
        wait_until(
            lambda: receiver.output().count("catch-up: relay's API is unreachable") >= 2,
            10,
            message="the receiver did not retry the unreachable API",
        )
        # r3's webhook arrives while the feed cannot be read: processed, but the saved id
        # stays before r2 (which only the feed will bring).
        body, headers = feed_webhook(events[2], material)
        assert client.post(receiver.url, content=body, headers=headers).status_code == 200
        receiver.wait_processed(events[2]["id"], "r3", 1)
        assert state.read_text() == events[0]["id"]
        assert "caught up" not in receiver.output()

        with api_proxy(api.base_url, port, [503]) as answered:
            receiver.wait_processed(events[1]["id"], "r2", 1)
            wait_until(lambda: "caught up: 1 event(s)" in receiver.output(), 10)
            output = receiver.output()
            assert answered[0] == 503 and 200 in answered, answered
            assert "GET /events answered 503" in output
            assert [receiver.processed(e["id"]) for e in events] == [0, 1, 1], output
            assert state.read_text() == events[2]["id"]
            # Caught up, the saved id follows the webhooks again; a retry is still a duplicate.
            complete_in_process(api, "acme", "r4")
            (r4,) = api.client.get(
                f"{V1}/events", params={"after": events[2]["id"]}, headers=api.auth("acme")
            ).json()["events"]
            body, headers = feed_webhook(r4, material)
            assert client.post(receiver.url, content=body, headers=headers).status_code == 200
            receiver.wait_processed(r4["id"], "r4", 1)
            wait_until(lambda: state.read_text() == r4["id"], 5)
            body, headers = feed_webhook(events[2], material)
            assert client.post(receiver.url, content=body, headers=headers).text == "duplicate"
            output = receiver.output()
            assert [receiver.processed(e["id"]) for e in [*events, r4]] == [0, 1, 1, 1], output
            assert "Traceback" not in output and "catch-up failed" not in output


def test_receiver_waits_briefly_for_a_saved_id_not_in_the_feed_yet(
    command: list[str], tmp_path: Path, api: Api
) -> None:
    """The saved id came with a webhook sent just before its event was appended to the feed:
    relay answers 404 for a moment (canned here), then the catch-up goes on from it."""
    for name in ("w1", "w2"):
        complete_in_process(api, "acme", name)
    events = api.client.get(f"{V1}/events", headers=api.auth("acme")).json()["events"]
    (tmp_path / "last-id").write_text(events[0]["id"])
    port = free_port()
    settings = {
        "WEBHOOK_SECRET": SigningMaterial.generate(now_ms()).whsec,
        "EVENTS_API_URL": f"http://127.0.0.1:{port}{V1}",
        "EVENTS_API_KEY": api.key("acme"),
    }
    with (
        api_proxy(api.base_url, port, [404, 404]) as answered,
        running(command, tmp_path, **settings) as receiver,
    ):
        receiver.wait_processed(events[1]["id"], "w2", 1)
        wait_until(lambda: "caught up: 1 event(s)" in receiver.output(), 10)
        output = receiver.output()
        assert answered[:2] == [404, 404] and answered[2] == 200, answered
        assert receiver.processed(events[0]["id"]) == 0, output
        assert "catch-up stopped" not in output and "Traceback" not in output


def test_receiver_keeps_serving_when_relay_does_not_know_its_saved_id(
    command: list[str], tmp_path: Path, api: Api
) -> None:
    """A saved id relay answers 404 to for good (from another deployment): after a few brief
    tries the catch-up stops with a clear message, keeps the file as it was, and replays
    nothing from the oldest event (that would process them again); webhooks are still served."""
    for name in ("u1", "u2"):
        complete_in_process(api, "acme", name)
    events = api.client.get(f"{V1}/events", headers=api.auth("acme")).json()["events"]
    unknown = completion_id(0, "acme", "elsewhere", now_ms(), 1)  # recent: not aged out
    state = tmp_path / "last-id"
    state.write_text(unknown)
    material = SigningMaterial.generate(now_ms())
    settings = {
        "WEBHOOK_SECRET": material.whsec,
        "EVENTS_API_URL": api.base_url + V1,
        "EVENTS_API_KEY": api.key("acme"),
    }
    started = time.monotonic()
    with running(command, tmp_path, **settings) as receiver, httpx.Client(timeout=5) as client:
        body, headers = feed_webhook(events[1], material)  # served during the brief tries too
        assert client.post(receiver.url, content=body, headers=headers).status_code == 200
        receiver.wait_processed(events[1]["id"], "u2", 1)
        stopped = f"catch-up stopped: relay has no event {unknown}"
        wait_until(lambda: stopped in receiver.output(), 10, message="no clear message")
        assert time.monotonic() - started < 8  # a few brief tries, not a long backoff
        body, headers = feed_webhook(events[0], material)
        assert client.post(receiver.url, content=body, headers=headers).status_code == 200
        receiver.wait_processed(events[0]["id"], "u1", 1)
        output = receiver.output()
        assert [receiver.processed(e["id"]) for e in events] == [1, 1], output
        assert output.count("processed ") == 2 and "caught up" not in output, output
        assert state.read_text() == unknown
        assert "Traceback" not in output
