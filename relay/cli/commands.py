"""``relay``: one command, one sub-command per process or operator command.

relay serve [--host H] [--port P]     the API (uvicorn)
relay worker [--queues Q] [--burst]   an RQ worker: processing, delivery or all queues
relay detector                        the completion detector and the sweepers
relay dev                             all of the above on a private Redis
relay keys create|list|revoke|unblock  API keys; lift a client's bad-key block
relay deliveries list|show|retry|recover  the operator's view of webhook deliveries
relay reencrypt [--batch N]           re-encrypt stored secrets with the first encryption key
relay config example                  print .env.example
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from relay import __version__
from relay.config import Settings, env_example, explicitly_set, load_settings, settings_doc
from relay.exceptions import ConfigError, RelayError
from relay.extract.errors import ExtractorConfigError
from relay.logs import redact_url

log = logging.getLogger("relay")


def _logging(settings: Settings) -> None:
    from relay.logs import setup

    setup(settings.log_level, settings.log_format)


def _traced(process: str, settings: Settings, run: Callable[[], int]) -> int:
    """``run`` with tracing set up for this process when an OTLP endpoint is set, and the
    spans still queued exported when it ends (``relay.tracing``)."""
    from relay import tracing

    tracing.setup(settings, process)
    try:
        return run()
    finally:
        tracing.shutdown()


def require_encryption_key(settings: Settings) -> None:
    """API and workers handle signing secrets: refuse to start without the key."""
    from relay.crypto import Encryptor

    Encryptor.from_setting(settings.encryption_key).encrypt(b"check")


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    require_encryption_key(settings)

    from relay.redis.shards import Follower

    # A lowered RELAY_SHARDS is refused here in one line (the lifespan checks it again).
    Follower(settings).first()
    return _traced("api", settings, lambda: _serve(settings, args))


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from relay.api.server import uvicorn_options
    from relay.app import create_app

    uvicorn.run(
        create_app(settings),
        # httptools with the header, slow-client and connection bounds (relay.api.server)
        **uvicorn_options(settings),
        host=args.host or settings.host,
        port=args.port or settings.port,
        log_level=settings.log_level,
        log_config=None,  # uvicorn's loggers go through relay.logs, like every other
        access_log=False,
        server_header=False,
        # The client address that relay.api.throttles counts comes from X-Forwarded-For only
        # when the connection is from one of these proxies.
        proxy_headers=True,
        forwarded_allow_ips=settings.forwarded_allow_ips,
    )
    return 0


def _log_ocr_provider(asked: str) -> None:
    """Say at start which execution provider this worker's OCR models will run on."""
    from relay.extract.ocr_models import probe_provider

    choice = probe_provider(asked)
    if choice.reason is None:
        log.info("OCR models run on %s (RELAY_OCR_PROVIDER=%s)", choice.used, asked)
    else:
        log.warning(
            "RELAY_OCR_PROVIDER=%s is not available, the OCR models run on the CPU: %s",
            asked,
            choice.reason,
        )


def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    return _traced("worker", settings, lambda: _work(settings, args))


def _work(settings: Settings, args: argparse.Namespace) -> int:
    from rq.exceptions import StopRequested
    from rq.serializers import JSONSerializer

    # Imported before work starts so no job pays for the import.
    import relay.delivery.engine
    import relay.runtime.processing  # noqa: F401
    from relay.runtime.context import WorkerContext
    from relay.runtime.worker import RelayWorker, job_class
    from relay.state import job_queues

    require_encryption_key(settings)
    from relay.redis.shards import follow

    follow(settings)
    if args.burst:  # it quits when the queues are empty: nothing to linger for
        settings = dataclasses.replace(settings, process_linger=0.0)
    _log_ocr_provider(settings.ocr_provider)
    ctx = WorkerContext(settings)
    ctx.http  # noqa: B018  (built now: its SSL context costs ~25 ms, not the first delivery's)
    if not args.burst and job_queues.DELIVERY in job_queues.WORKER_QUEUES[args.queues]:
        # The delivery engine listens on the bell from the start, not from the first delivery
        # job: until then every shard's first wake-up was a job of its own (~17 of them at the
        # start of `bench redis_cost`).
        ctx.engine  # noqa: B018
    from relay.redis.clients import RedisTarget, is_store_full, sync_client

    # RQ's own client: its BLPOP blocks RELAY_WORKER_DEQUEUE_TIMEOUT on purpose, so it waits
    # for a reply that long plus the usual reply timeout (relay.runtime.worker); the jobs' client
    # (ctx.redis) keeps the short one.
    dequeue = settings.worker_dequeue_timeout
    rq_redis = sync_client(
        RedisTarget.queues_from_settings(settings),
        socket_timeout=dequeue + settings.redis_socket_timeout,
    )

    backoff = 1.0
    while True:
        worker: RelayWorker | None = None
        started = time.monotonic()
        try:
            worker = RelayWorker(
                [
                    job_queues.queue(rq_redis, name)
                    for name in job_queues.WORKER_QUEUES[args.queues]
                ],
                connection=rq_redis,
                serializer=JSONSerializer,
                job_class=job_class(ctx),
                dequeue_timeout=dequeue,
                reply_timeout=settings.redis_socket_timeout,
                backoff_cap=settings.redis_backoff_cap,
                stopping=ctx.stopping,
            )
            # No RQ scheduler: relay enqueues nothing for later (its retries are its own due
            # deliveries and sweepers), and the scheduler's process died at the first
            # failover (an uncaught MasterNotFoundError in its heartbeat), holding its lock.
            worker.work(
                burst=args.burst,
                with_scheduler=False,
                logging_level=settings.log_level.upper(),
            )
        except Exception as exc:
            # RQ gives up on Redis errors outside its dequeue loop (registering the worker,
            # heartbeats, maintenance, recording a job's end - all writes, refused while
            # Redis is full): come back by ourselves rather than need a supervisor. A job
            # cut short this way loses nothing: its document's lease or its deliveries'
            # leases bring the work back.
            if is_store_full(exc):
                log.warning("worker stopped: redis is full (maxmemory reached): %s", exc)
            else:
                log.warning("worker stopped on an error", exc_info=True)
        if args.burst or (worker is not None and worker.stop_requested):
            ctx.close(send_due=args.burst)
            return 0
        if time.monotonic() - started > 60:  # it had been working: not a restart loop
            backoff = 1.0
        log.warning("worker loop ended unexpectedly; starting again in %.0fs", backoff)
        try:
            time.sleep(backoff)
        except (StopRequested, SystemExit, KeyboardInterrupt):  # RQ's handlers still installed
            return 0
        except Exception:
            # A signal during the sleep runs RQ's handler, which asks Redis (maybe still down)
            # for the worker's state; the request to stop stands all the same.
            if worker is not None and worker.stop_requested:
                return 0
            raise
        backoff = min(backoff * 2, 10.0)


def cmd_detector(settings: Settings, args: argparse.Namespace) -> int:
    from relay.redis.shards import follow
    from relay.runtime.context import WorkerContext
    from relay.runtime.detector import Detector

    follow(settings)
    detector = Detector(WorkerContext(settings))

    def stop(signum: int, frame: FrameType | None) -> None:
        detector.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("detector %s started", detector.consumer)

    def run() -> int:
        detector.run()
        return 0

    return _traced("detector", settings, run)


def cmd_dev(settings: Settings, args: argparse.Namespace) -> int:
    from relay.devtools.dev import run_dev

    return run_dev(
        settings,
        host=args.host or "127.0.0.1",
        port=args.port or settings.port,
        state_dir=Path(args.state_dir),
        redis_url_explicit=args.redis_url_explicit,
    )


def cmd_keys(settings: Settings, args: argparse.Namespace) -> int:
    from relay.cli import keys as key_commands

    return key_commands.run(settings, args)


def account_name(text: str) -> str:
    """An account name as ``relay keys create --account`` takes it (relay.state.api_keys's rule)."""
    from relay.state.api_keys import ACCOUNT_RE

    if not ACCOUNT_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an account name: 1-64 of a-z 0-9 _ -, starting with a lowercase "
            "letter or a digit (e.g. acme)"
        )
    return text


def feed_limit(text: str) -> int:
    """``relay events --limit``: the page size GET /events takes (1 to MAX_PAGE)."""
    from relay.state.event_feed import MAX_PAGE

    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_PAGE:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to {MAX_PAGE}")
    return int(text)


def batch_name(text: str) -> str:
    """A batch name as the API takes it (relay.state.model's rule)."""
    from relay.state.model import valid_batch_name

    if not valid_batch_name(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a batch name")
    return text


def cmd_deliveries(settings: Settings, args: argparse.Namespace) -> int:
    from relay.cli import deliveries

    return deliveries.run(settings, args)


def cmd_events(settings: Settings, args: argparse.Namespace) -> int:
    """One JSON line per event of an account's feed, oldest first; the last id on stderr."""
    import json
    import time

    from relay.exceptions import EventNotFound
    from relay.redis.clients import RedisTarget, sync_client
    from relay.state.event_feed import FEED_BATCHES, FEED_OPERATIONAL, TYPES, EventLog

    feed = FEED_OPERATIONAL if args.operational else FEED_BATCHES
    if args.type is not None and args.type not in TYPES[feed]:
        print(f"relay: --type must be one of {', '.join(TYPES[feed])}", file=sys.stderr)
        return 2
    client = sync_client(RedisTarget.from_settings(settings))
    log = EventLog(client, round(settings.retention * 1000))
    after: str | None = args.after
    try:
        while True:
            page = log.page(
                args.account, feed, after=after, limit=args.limit, type_=args.type, batch=args.batch
            )
            for event in page.events:
                print(json.dumps(event, separators=(",", ":")), flush=True)
            after = page.next_cursor
            if page.has_more:
                continue
            if not args.follow:
                break
            time.sleep(0.5)
    except EventNotFound as exc:
        print(f"relay: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    if after:
        print(f"last id: {after}", file=sys.stderr)
    return 0


def cmd_reencrypt(settings: Settings, args: argparse.Namespace) -> int:
    from relay.crypto import Encryptor
    from relay.redis.clients import RedisTarget, sync_client
    from relay.state.reencrypt import run

    encryptor = Encryptor.from_setting(settings.encryption_key)
    return run(sync_client(RedisTarget.from_settings(settings)), encryptor, batch=args.batch)


# The commands an operator runs by hand, which may find the Redis of a ``relay dev`` in this
# checkout. The processes (serve, worker, detector) take RELAY_REDIS_URL or its default and
# nothing else: a dev checkout's file must never decide where a deployed process writes;
# ``relay dev`` chooses its Redis itself.
OPERATOR_COMMANDS = frozenset({"keys", "deliveries", "events", "reencrypt"})


def command_redis(
    command: str, settings: Settings, *, explicit: bool, cwd: Path | None = None
) -> tuple[str, str]:
    """The Redis URL ``command`` uses and where it comes from: :func:`which_redis` for an
    operator command, ``RELAY_REDIS_URL`` (or its default) for every other."""
    if command in OPERATOR_COMMANDS:
        return which_redis(settings, explicit=explicit, cwd=cwd)
    return settings.redis_url, "RELAY_REDIS_URL" if explicit else "the default RELAY_REDIS_URL"


def which_redis(settings: Settings, *, explicit: bool, cwd: Path | None = None) -> tuple[str, str]:
    """The Redis URL a command uses, and where it comes from (for messages).

    ``RELAY_REDIS_URL`` (environment or ``.env``) when it is set; else the Redis of a
    ``relay dev`` started in this directory or a parent (``.relay/redis.url``, which
    ``relay dev`` writes); else the default.
    """
    if explicit:
        return settings.redis_url, "RELAY_REDIS_URL"
    from relay.devtools.dev import REDIS_URL_FILE

    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        path = folder / ".relay" / REDIS_URL_FILE
        try:
            url = path.read_text().strip()
        except OSError:
            continue
        if url:
            return url, f"the Redis of relay dev, from {path}"
    return settings.redis_url, "the default; set RELAY_REDIS_URL, or start relay dev here"


def queues_choices() -> list[str]:
    from relay.state.job_queues import WORKER_QUEUES

    return list(WORKER_QUEUES)


def delivery_statuses() -> list[str]:
    from relay.state.model import DeliveryStatus

    return [s.value for s in DeliveryStatus]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="relay", description="relay " + __version__)
    p.add_argument("--version", action="version", version=f"relay {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the API")
    serve.add_argument("--host", help="address to bind (default: RELAY_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to bind (default: RELAY_PORT, 8000)")
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", help="run an RQ worker (processing and/or delivery)")
    worker.add_argument("--burst", action="store_true", help="quit when the queues are empty")
    worker.add_argument(
        "--queues",
        choices=sorted(queues_choices()),
        default="all",
        help="the queue(s) to serve: run processing and delivery workers apart so neither "
        "kind of work waits behind the other (default: all, one worker for both)",
    )
    worker.set_defaults(func=cmd_worker)

    sub.add_parser("detector", help="run the completion detector and sweepers").set_defaults(
        func=cmd_detector
    )

    dev = sub.add_parser("dev", help="everything on a private Redis, for local work")
    dev.add_argument("--host", help="address the API binds (default: 127.0.0.1)")
    dev.add_argument(
        "--port", type=int, help="port the API binds (default: RELAY_PORT, 8000); must be free"
    )
    dev.add_argument(
        "--state-dir",
        default=".relay",
        help="Redis data, dev API key, encryption key, Redis URL (default: .relay)",
    )
    dev.set_defaults(func=cmd_dev)

    keys = sub.add_parser(
        "keys",
        help="manage API keys",
        epilog="exit codes: 0 done; 1 not done (no such key, Redis unreachable, a failover "
        "under way); 2 a bad argument; 3 written on the primary but not confirmed by the "
        "RELAY_REDIS_WAIT_REPLICAS replicas in time (create still prints the key)",
    )
    ksub = keys.add_subparsers(dest="keys_cmd", required=True)
    kc = ksub.add_parser("create", help="create a key; printed on the last line")
    owner = kc.add_mutually_exclusive_group(required=True)
    owner.add_argument(
        "--account",
        type=account_name,
        help="a customer's API key for this account: 1-64 of a-z 0-9 _ -",
    )
    owner.add_argument("--operator", help="an operator key (opens the console, nothing else)")
    ksub.add_parser("list", help="list keys (prefix, account, state)")
    kr = ksub.add_parser("revoke", help="revoke a key by its prefix (or the whole key)")
    kr.add_argument("prefix", help="the prefix `relay keys list` shows, or the whole key")
    ku = ksub.add_parser(
        "unblock",
        help="let a client address blocked for too many bad keys present keys again now",
    )
    ku.add_argument("address", help="its IPv4 or IPv6 address (an IPv6 /64 counts as one)")
    keys.set_defaults(func=cmd_keys)

    dl = sub.add_parser("deliveries", help="inspect and retry webhook deliveries")
    dsub = dl.add_subparsers(dest="deliveries_cmd", required=True)
    when = "an RFC 3339 time or a duration back from now (6h, 7d); creation time"
    dlist = dsub.add_parser("list", help="a line per delivery, newest first (exact filters)")
    dlist.add_argument("--status", choices=delivery_statuses(), help="only this status")
    dlist.add_argument("--account", help="only this account")
    dlist.add_argument("--batch", help="needs --account")
    dlist.add_argument("--since", help=f"{when}, inclusive")
    dlist.add_argument("--until", help=f"{when}, exclusive")
    dlist.add_argument("--limit", type=int, default=100, help="per page (default 100)")
    dlist.add_argument("--cursor", help="the next page (printed on stderr after a page)")
    dshow = dsub.add_parser("show", help="one delivery with its attempts as a table")
    dshow.add_argument("id", help="the delivery id (msg_..., the webhook-id)")
    drec = dsub.add_parser(
        "recover", help="make every failed (or canceled) delivery since D due again now"
    )
    drec.add_argument("--since", required=True, help=f"{when}, inclusive")
    drec.add_argument("--until", help=f"{when}, exclusive")
    drec.add_argument("--account", help="one account (default: all)")
    drec.add_argument(
        "--status", default="failed", choices=["failed", "canceled"], help="default: failed"
    )
    dretry = dsub.add_parser(
        "retry", help="deliver one delivery again now (--status/--since: same as recover)"
    )
    dretry.add_argument("id", nargs="?", help="the delivery id (msg_...); or use the filters")
    dretry.add_argument("--status", choices=["failed", "canceled"], help="as recover")
    dretry.add_argument("--since", help=f"{when}, inclusive")
    dretry.add_argument("--until", help=f"{when}, exclusive")
    dretry.add_argument("--account", help="one account (default: all)")
    dl.set_defaults(func=cmd_deliveries)

    ev = sub.add_parser(
        "events", help="an account's event feed, oldest first (one JSON line per event)"
    )
    ev.add_argument("--account", required=True, type=account_name, help="the account")
    ev.add_argument(
        "--operational",
        action="store_true",
        help="the operational feed (webhook.disabled, delivery.failed)",
    )
    ev.add_argument("--after", help="the id of the last event seen (msg_...)")
    ev.add_argument("--type", help="only events of this type")
    ev.add_argument("--batch", type=batch_name, help="only the events of this batch")
    ev.add_argument(
        "--limit", type=feed_limit, default=100, help="events per read, 1-200 (default 100)"
    )
    ev.add_argument("--follow", action="store_true", help="keep printing new events")
    ev.set_defaults(func=cmd_events)

    reenc = sub.add_parser(
        "reencrypt", help="re-encrypt every stored secret with the first RELAY_ENCRYPTION_KEY"
    )
    reenc.add_argument("--batch", type=int, default=500, help="keys per SCAN batch")
    reenc.set_defaults(func=cmd_reencrypt)

    config = sub.add_parser("config", help="configuration helpers")
    csub = config.add_subparsers(dest="config_cmd", required=True)
    csub.add_parser("example", help="print .env.example")
    csub.add_parser("docs", help="print docs/settings.md (every setting as a table row)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    import redis

    args = build_parser().parse_args(argv)
    where = "Redis"
    try:
        if args.command == "config":
            print(settings_doc() if args.config_cmd == "docs" else env_example(), end="")
            return 0
        settings = load_settings()
        args.redis_url_explicit = "RELAY_REDIS_URL" in explicitly_set()
        url, source = command_redis(args.command, settings, explicit=args.redis_url_explicit)
        settings = dataclasses.replace(settings, redis_url=url)
        where = f"Redis at {redact_url(url)} ({source})"
        _logging(settings)
        result: int = args.func(settings, args)
        return result
    except (ConfigError, ExtractorConfigError) as exc:
        print(f"relay: configuration error: {exc}", file=sys.stderr)
        return 2
    except RelayError as exc:
        print(f"relay: {exc}", file=sys.stderr)
        return 1
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        print(f"relay: cannot reach {where}: {_one_line(exc)}", file=sys.stderr)
        return 1
    except redis.RedisError as exc:
        print(f"relay: Redis error: {_one_line(exc)}", file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
