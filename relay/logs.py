"""Logging for every relay process (``serve``, ``worker``, ``detector``, ``dev``), set up once.

``RELAY_LOG_FORMAT``: ``text`` (default) prints readable lines,
``2026-11-30T19:50:01.123Z INFO relay.delivery attempt delivery_id=msg_… host=… outcome=…``;
``json`` prints one JSON object per line with ``ts``, ``level``, ``logger``, ``msg``, the
event's fields and, for an error with a traceback, ``exc``.

An event's fields are passed with :func:`fields` (``log.info("attempt", extra=fields(...))``);
other ``extra`` attributes (RQ passes a job's arguments that way) are never printed.

What is kept quiet, whatever the level:

- RQ's per-job lines ("Job OK", "result discarded", "Successfully completed …", the job
  description when a job starts): relay logs each attempt and document itself. RQ's other
  lines (start, stop, maintenance) and its warnings and errors stay.
- httpx's and httpcore's INFO/DEBUG lines: httpx prints every request's full URL, and a
  callback URL may carry a token in its path or query.

uvicorn's error and access loggers propagate here (``relay serve`` passes ``log_config=None``),
so they are formatted like the rest.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any
from urllib.parse import urlsplit

FORMATS = ("text", "json")

_FIELDS = "relay_fields"

# RQ's per-job INFO messages (rq.worker, rq 3.x), matched on the format string.
RQ_JOB_MESSAGES = frozenset(
    {
        "Worker %s: %s: %s (%s)",  # a job's description as it starts; "Job OK"
        "Worker %s: %s: %s",  # a job's id as it starts
        "Successfully completed %s job in %ss on worker %s",
        "Successfully completed job %s in %ss on worker %s",
        "Worker %s: job %s result discarded immediately",
        "Worker %s: job %s result is kept for %s seconds",
        "Worker %s: job %s result will never expire, clean up result key manually",
        "Worker %s: job %s scheduled to repeat (%s left)",
    }
)

# Loggers that must not print below WARNING: they print full URLs.
QUIET = ("httpx", "httpcore")


def fields(**values: object) -> dict[str, Any]:
    """``extra=`` for a log call: the event's fields, printed as ``key=value`` or JSON."""
    return {_FIELDS: values}


def url_host(url: str) -> str:
    """The host (and an explicit port) of a URL: never its user info, path or query, which
    may carry credentials or tokens."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "?"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}" if port else host


def redact_url(url: str) -> str:
    """``url`` with its password masked, in the user info (``redis://:***@host:6379/0``) or
    as a ``password=`` query parameter (``unix:///run/redis.sock?password=***``)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "?"
    if password:
        userinfo, _, hostport = parts.netloc.rpartition("@")
        url = parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{hostport}").geturl()
    return re.sub(r"([?&]password=)[^&#]*", r"\1***", url)


MASK = "…"


def mask_query(url: str) -> str:
    """A callback URL as operators see it (console, CLI, logs): every query value and the
    fragment masked, names kept (``https://h/p?token=…&page=…``). Receivers often put a token
    in the query; the customer who registered the URL sees it whole through the API.

    Text only, no parsing that could fail: the query runs from the first ``?`` to the first
    ``#``; an item without ``=`` is masked whole."""
    rest, hashed, _ = url.partition("#")
    head, sep, query = rest.partition("?")
    items = (item.partition("=") for item in query.split("&")) if query else ()
    masked = "&".join(f"{name}={MASK}" if eq else MASK for name, eq, _ in items)
    return head + (f"?{masked}" if sep else "") + (f"#{MASK}" if hashed else "")


def _timestamp(record: logging.LogRecord) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{stamp}.{int(record.msecs):03d}Z"


def _event_fields(record: logging.LogRecord) -> dict[str, object]:
    values = getattr(record, _FIELDS, None)
    return values if isinstance(values, dict) else {}


_BARE = re.compile(r"[A-Za-z0-9_.:/@+\-\[\]]+")


def _text_value(value: object) -> str:
    if value is None:
        return "-"
    text = (
        value
        if isinstance(value, str)
        else f"{value:.1f}"
        if isinstance(value, float)
        else str(value)
    )
    # Names come from customers: anything but a plain token is quoted with its control
    # characters escaped, so a value can neither end the line nor fake another field.
    return text if _BARE.fullmatch(text) else json.dumps(text)


class TextFormatter(logging.Formatter):
    """``TS LEVEL LOGGER message key=value …`` (traceback, if any, on the lines below)."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name} {record.getMessage()}"
        extra = " ".join(f"{k}={_text_value(v)}" for k, v in _event_fields(record).items())
        if extra:
            line += " " + extra
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg``, the fields, ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _event_fields(record).items():
            out.setdefault(key, value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def drop_rq_job_lines(record: logging.LogRecord) -> bool:
    """Filter for ``rq.worker``: False for RQ's per-job INFO lines."""
    return record.levelno >= logging.WARNING or record.msg not in RQ_JOB_MESSAGES


def setup(level: str = "info", fmt: str = "text") -> None:
    """Configure the root logger of this process (stderr), replacing any earlier setup."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    rq_worker = logging.getLogger("rq.worker")
    if drop_rq_job_lines not in rq_worker.filters:
        rq_worker.addFilter(drop_rq_job_lines)
    # RQ adds handlers of its own only when none is found up the tree (there is one now);
    # uvicorn's loggers carry none when it is given no log config. Either way: through ours,
    # at our level (RQ and uvicorn then set theirs from the same setting).
    for name in ("rq.worker", "rq.job", "uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.disabled = False
        logger.setLevel(logging.NOTSET)
