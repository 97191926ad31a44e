"""Logs of real processes (API, worker, detector) through a whole scenario: a line per attempt
and per document, the chosen format on every line, RQ's and httpx's chatter silent, and not
one secret, key, signature or URL token anywhere."""

from __future__ import annotations

import base64
import json
import re
import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from relay.config import Secret
from relay.crypto import Encryptor
from relay.devtools.processes import Stack
from relay.devtools.redis_server import free_port
from relay.state.signing_material import SigningKeys
from tests.e2e.client import Api
from tests.e2e.test_webhooks import settled
from tests.support.helpers import wait_until
from tests.support.receiver import Receiver, Reply

CSV = b"sku,qty\nA-1,2\nB-7,5\n"
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) \S+ ")


def _lines(stack: Stack) -> dict[str, list[str]]:
    """Every line each process printed, by process (``api``, ``worker``, ``detector``)."""
    out: dict[str, list[str]] = {}
    for proc in stack.procs:
        out.setdefault(proc.name, []).extend(Path(proc.log).read_text().splitlines())
    return out


def _events(lines: list[str], msg: str) -> list[dict[str, Any]]:
    """The JSON log records whose message is ``msg``."""
    return [r for r in map(json.loads, lines) if r["msg"] == msg]


def _text_fields(line: str) -> dict[str, str]:
    return dict(re.findall(r" (\w+)=(\"(?:[^\"\\]|\\.)*\"|\S+)", line))


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("log_format", "level"), [("json", "info"), ("text", "debug")])
def test_a_whole_scenario_logs_each_attempt_and_document_and_no_secret(
    stack: Stack, receiver: Receiver, redis: redis.Redis, log_format: str, level: str
) -> None:
    """At debug level too: no library may print a secret there either."""
    stack.env["RELAY_LOG_FORMAT"] = log_format
    stack.env["RELAY_LOG_LEVEL"] = level
    stack.api()
    stack.worker()
    stack.detector()
    key = stack.create_key("acme")
    api = Api(stack.api_url, key)
    token = secrets.token_urlsafe(24)
    path_ok = f"/hook/ok?token={token}"
    path_flaky = f"/hook/flaky?token={token}"
    receiver.script(path_flaky, [Reply(500), Reply(200)])

    # A batch delivered at once, one whose receiver fails once, one with a broken document.
    api.upload("b1", CSV)
    assert api.register("b1", receiver.url(path_ok)).status_code == 201
    api.process("b1")
    wait_until(lambda: receiver.received(path_ok), 20, message="no delivery: " + stack.logs())
    before = api.signing()
    rotated = api.http.post("/webhook-signing/rotate")
    assert rotated.status_code == 200, rotated.text
    after = rotated.json()
    api.upload("b2", CSV)
    api.upload("b2", b"%PDF-1.7 not really a pdf", filename="broken.pdf")
    assert api.register("b2", receiver.url(path_flaky)).status_code == 201
    api.process("b2")
    wait_until(lambda: len(receiver.received(path_flaky)) == 2, 20, message="no retry")
    # An attempt that gets no answer at all, to a URL with the token in it too.
    dead = f"http://127.0.0.1:{free_port()}/gone?token={token}"
    api.upload("b3", CSV)
    assert api.register("b3", dead).status_code == 201
    api.process("b3")
    bad_key = f"rk_{key.split('_')[1]}_{secrets.token_urlsafe(32)}"
    refused = httpx.get(
        stack.api_url + "/api/v1/batches", headers={"authorization": f"Bearer {bad_key}"}
    )
    assert refused.status_code == 401
    wait_until(
        lambda: any(d["attempts"] for d in api.deliveries("b3")), 20, message="b3 not attempted"
    )
    assert httpx.get(stack.api_url + "/metrics").status_code == 200
    # b3 fails for good after its schedule (4 attempts): then nothing more will be logged.
    wait_until(lambda: settled(redis), 20, message="deliveries still due")
    delivered = {d["id"]: d for b in ("b1", "b2", "b3") for d in api.deliveries(b)}
    assert delivered and [d["status"] for d in api.deliveries("b3")] == ["failed"]

    # Everything this scenario made that must never be printed.
    encryption_key = stack.env["RELAY_ENCRYPTION_KEY"]
    materials = SigningKeys(Encryptor.from_setting(Secret(encryption_key))).for_accounts(
        redis, {"acme"}
    )["acme"]
    assert len(materials) == 2  # the rotated and the previous material
    signatures = [
        entry.partition(",")[2]
        for r in receiver.received()
        for entry in r.headers["webhook-signature"].split()
    ]
    assert len(signatures) == 4 * 2 + 2  # v1 and v1a of both materials after the rotation
    secret_values = {
        "api key": key,
        "api key secret": key.split("_", 2)[2],
        "bad api key": bad_key,
        "encryption key": encryption_key,
        "url token": token,
        **{f"whsec {i}": m.whsec for i, m in enumerate(materials)},
        **{f"whsec bytes {i}": m.whsec.removeprefix("whsec_") for i, m in enumerate(materials)},
        **{f"whsk {i}": m.whsk.removeprefix("whsk_") for i, m in enumerate(materials)},
        **{f"whpk {i}": m.whpk.removeprefix("whpk_") for i, m in enumerate(materials)},
        **{f"signature {i}": s for i, s in enumerate(signatures)},
        # the hex form of the raw keys, should anything print bytes that way
        **{f"whsk hex {i}": m.private_key.hex() for i, m in enumerate(materials)},
        **{f"secret b64 {i}": base64.b64encode(m.secret).decode() for i, m in enumerate(materials)},
    }
    assert before["secret"] in secret_values.values() and after["secret"] in secret_values.values()
    api.close()
    stack.close()  # every process stopped: its log is complete

    logs = _lines(stack)
    assert set(logs) == {"api", "worker", "detector"}
    every = [(name, line) for name, lines in logs.items() for line in lines]
    leaks = [
        (what, name, line)
        for name, line in every
        for what, value in secret_values.items()
        if value in line
    ]
    assert not leaks, leaks
    assert not [line for _, line in every if "token=" in line or "/hook" in line]

    # The format: every line of every process.
    if log_format == "json":
        for name, line in every:
            record = json.loads(line)  # one JSON object per line, tracebacks included
            assert {"ts", "level", "logger", "msg"} <= set(record), (name, line)
    else:
        heads = [line for _, line in every if not line.startswith((" ", "Traceback"))]
        assert all(TEXT_LINE.match(line) for line in heads), heads
    # uvicorn's own lines come through the same formatter.
    assert any("Application startup complete" in line for line in logs["api"])
    # What is silent at info: RQ's lines per job, httpx's line per request.
    for noise in ("Job OK", "result discarded", "Successfully completed", "HTTP Request"):
        assert not [line for _, line in every if noise in line], noise
    assert any("Listening on" in line for line in logs["worker"])  # RQ's other lines stay

    # A line per attempt and per document, with their ids.
    worker = logs["worker"]
    if log_format == "json":
        attempts = _events(worker, "delivery attempt")
        documents = _events(worker, "document")
    else:
        attempts = [_text_fields(x) for x in worker if " delivery attempt " in x]
        documents = [_text_fields(x) for x in worker if " document " in x]
        for found in (*attempts, *documents):  # read back as their JSON counterparts
            for k, v in found.items():
                found[k] = json.loads(v) if v.startswith('"') else None if v == "-" else v
    assert {a["delivery_id"] for a in attempts} == set(delivered)
    assert len(attempts) == sum(len(d["attempts"]) for d in delivered.values())
    by_batch: dict[str, list[dict[str, Any]]] = {}
    for a in attempts:
        assert a["account"] == "acme"
        by_batch.setdefault(a["batch"], []).append(a)
    (ok,) = by_batch["b1"]
    assert str(ok["status_code"]) == "200" and ok["outcome"] == "succeeded"
    assert ok["error"] is None and float(ok["duration_ms"]) > 0
    assert ok["host"] == f"127.0.0.1:{receiver.port}"
    flaky = [(str(a["status_code"]), a["outcome"], a["error"]) for a in by_batch["b2"]]
    assert flaky == [("500", "retry", "http_status"), ("200", "succeeded", None)]
    no_answer = by_batch["b3"][0]
    assert no_answer["status_code"] is None and no_answer["error"] == "connection"
    assert no_answer["host"] == dead.split("/")[2]
    statuses = sorted((d["batch"], d["status"], d["error"]) for d in documents)
    assert [s[:2] for s in statuses] == [
        ("b1", "succeeded"),
        ("b2", "failed"),
        ("b2", "succeeded"),
        ("b3", "succeeded"),
    ]
    assert statuses[1][2]  # the broken PDF's error code
    assert all(d["doc_id"].startswith("doc_") and d["account"] == "acme" for d in documents)
