"""relay.logs: the two formats, what stays silent, and what never prints (URL paths, queries,
passwords). The whole-scenario check on real processes is tests/e2e/test_logs.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.devtools.dev import banner
from relay.logs import fields, redact_url, setup, url_host

NAMES = (
    "",
    "rq.worker",
    "rq.job",
    "httpx",
    "httpcore",
    "uvicorn",
    "uvicorn.error",
    "uvicorn.access",
)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """``setup`` changes this process's loggers: put them back as pytest had them."""
    saved = []
    for name in NAMES:
        logger = logging.getLogger(name)
        state = (list(logger.handlers), logger.level, logger.propagate, logger.disabled)
        saved.append((logger, state, list(logger.filters)))
    yield
    for logger, (handlers, level, propagate, disabled), filters in saved:
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate
        logger.disabled = disabled
        logger.filters[:] = filters


def _attempt() -> None:
    logging.getLogger("relay.delivery").warning(
        "delivery attempt",
        extra=fields(
            delivery_id="msg_1",
            account="acme",
            batch='b "1"\nFAKE level=ERROR',
            host="example.com",
            status_code=None,
            duration_ms=12.345,
        ),
    )


@pytest.mark.usefixtures("restore_logging")
def test_json_is_one_object_per_line_with_the_fields(capsys: pytest.CaptureFixture[str]) -> None:
    setup("info", "json")
    _attempt()
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("relay.x").exception("it broke", extra={"arguments": "not printed"})
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    first, second = map(json.loads, lines)
    assert first["ts"].endswith("Z") and first["level"] == "WARNING"
    assert first["logger"] == "relay.delivery" and first["msg"] == "delivery attempt"
    assert first["batch"] == 'b "1"\nFAKE level=ERROR'  # escaped by JSON, on one line
    assert first["status_code"] is None and first["duration_ms"] == 12.345
    assert second["msg"] == "it broke" and "RuntimeError: boom" in second["exc"]
    assert "arguments" not in second  # extras other than relay's fields never print


@pytest.mark.usefixtures("restore_logging")
def test_text_is_key_value_and_customer_text_cannot_forge_a_field(
    capsys: pytest.CaptureFixture[str],
) -> None:
    setup("info", "text")
    _attempt()
    (line,) = capsys.readouterr().err.splitlines()
    assert line.split(" ", 1)[1] == (
        "WARNING relay.delivery delivery attempt delivery_id=msg_1 account=acme "
        'batch="b \\"1\\"\\nFAKE level=ERROR" host=example.com status_code=- duration_ms=12.3'
    )


@pytest.mark.usefixtures("restore_logging")
def test_rq_job_lines_and_httpx_requests_are_silent_other_lines_are_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)  # as an earlier uvicorn left it
    setup("debug", "text")
    rq = logging.getLogger("rq.worker")
    rq.info("Worker %s: %s: %s (%s)", "w1", "relay-delivery", "Job OK", "j1")
    rq.info("Worker %s: %s: %s (%s)", "w1", "relay-delivery", "run_due(3)", "j1")
    rq.info("Successfully completed %s job in %ss on worker %s", "run_due(3)", "0.01", "w1")
    rq.info("Worker %s: job %s result discarded immediately", "w1", "j1")
    rq.info("Worker %s: cleaning group registries", "w1")
    rq.warning("Worker %s: %s: %s (%s)", "w1", "q", "a job failed", "j1")
    logging.getLogger("httpx").info("HTTP Request: POST https://h/hook?token=abc")
    logging.getLogger("httpcore.http11").debug("send_request_headers.started")
    logging.getLogger("uvicorn.error").info("Application startup complete.")
    err = capsys.readouterr().err
    assert "Job OK" not in err and "run_due" not in err and "discarded" not in err
    assert "token" not in err and "send_request_headers" not in err
    assert "cleaning group registries" in err and "a job failed" in err
    assert " INFO uvicorn.error Application startup complete." in err


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="text, json"):
        setup("info", "xml")


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://user:pw@Hooks.Example.com/p/SECRET?token=t#f", "hooks.example.com"),
        ("http://127.0.0.1:8080/hook?token=t", "127.0.0.1:8080"),
        ("https://[2001:db8::1]:8443/x", "[2001:db8::1]:8443"),
        ("http://[::1/x", "?"),
    ],
)
def test_url_host_is_the_host_only(url: str, host: str) -> None:
    assert url_host(url) == host


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://user:s3cret@h/1?password=s3cret", "redis://user:***@h/1?password=***"),
        ("unix:///run/r.sock?db=1&password=s3cret", "unix:///run/r.sock?db=1&password=***"),
        ("redis://127.0.0.1:6390/0", "redis://127.0.0.1:6390/0"),
    ],
)
def test_redis_passwords_are_masked(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_the_dev_banner_masks_the_redis_password() -> None:
    text = banner(
        base_url="http://127.0.0.1:8000",
        api_key="rk_x",
        redis_url="redis://:s3cret@127.0.0.1:6390/0",
        state_dir=Path(".relay"),
    )
    assert "s3cret" not in text and "redis://:***@127.0.0.1:6390/0" in text
