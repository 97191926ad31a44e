"""``relay dev``: the whole service in one terminal, for local work.

One supervisor process owns everything: a private ``redis-server`` (AOF on, data under
``.relay/redis``) unless an explicitly configured Redis answers, and the processes —
``relay serve``, a processing and a delivery ``relay worker`` (separate capacity: neither kind
of work waits behind the other), ``relay detector`` — whose output it prints line by line
behind their names. A child that dies is started again (backoff, at most 5 times a minute).
Ctrl-C or SIGTERM stops the children first, then Redis, gracefully, so the AOF holds everything.

State that must survive a restart of ``relay dev`` lives in the state directory: the Fernet key
that encrypts signing secrets (without it the data in Redis could not be decrypted), the dev API
key, and the pids of the processes, so children orphaned by a killed supervisor are stopped at
the next start. The URL of the Redis in use goes to ``redis.url`` there too: the other ``relay``
commands run in the same checkout read it (``relay.cli.commands.which_redis``).

The API's port is checked before anything starts: a port in use is an error with a hint, not
an API restarted forever by the supervisor.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import redis
from cryptography.fernet import Fernet
from redis.backoff import NoBackoff
from redis.retry import Retry

from relay.config import Settings, load_settings
from relay.devtools.redis_server import RedisServer, RedisServerError, port_is_free
from relay.devtools.supervisor import (
    STOP_TIMEOUT,
    Child,
    Console,
    RestartBudget,
    healthy,
    lock_state_dir,
    on_stop_signals,
    stop_children,
    stop_orphans,
)
from relay.devtools.supervisor import DevError as DevError
from relay.exceptions import RelayError
from relay.logs import redact_url
from relay.redis.clients import RedisTarget, sync_client

DEV_REDIS_PORT = 6390
DEFAULT_PORT = 8000
REDIS_URL_FILE = "redis.url"  # in the state directory: the Redis this relay dev uses
HEALTH_TIMEOUT = 20.0  # seconds the API has to answer /healthz before the banner anyway
_TICK = 0.2


class CreateKey(Protocol):
    def __call__(self, client: redis.Redis, *, account: str) -> str: ...


class LookupKey(Protocol):
    def __call__(self, client: redis.Redis, key: str) -> object | None: ...


# -- small pieces, each testable on its own -------------------------------------------------


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by the owner only (0600), atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")
    os.chmod(tmp, 0o600)  # O_CREAT's mode does not apply to a file left by a crash
    os.replace(tmp, path)


def ensure_encryption_key(state_dir: Path) -> str:
    """The dev Fernet key: made once and kept in ``state_dir/encryption.key`` (0600).

    A file that holds no valid key is an error, never overwritten: the data in Redis was
    encrypted with whatever it held.
    """
    path = state_dir / "encryption.key"
    if path.exists():
        key = path.read_text().strip()
        try:
            Fernet(key.encode())
        except ValueError as exc:
            raise DevError(f"{path} holds no valid Fernet key; fix or remove it") from exc
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
        return key
    state_dir.mkdir(parents=True, exist_ok=True)
    key = Fernet.generate_key().decode()
    write_private(path, key)
    return key


def ensure_dev_api_key(
    client: redis.Redis, state_dir: Path, *, create_key: CreateKey, lookup_key: LookupKey
) -> str:
    """The API key of account ``dev``: the one in ``state_dir/dev_api_key`` while Redis still
    knows it, else a new one (kept there, 0600)."""
    path = state_dir / "dev_api_key"
    if path.exists():
        key = path.read_text().strip()
        if key and lookup_key(client, key) is not None:
            return key
    key = create_key(client, account="dev")
    write_private(path, key)
    return key


def redis_reachable(url: str, timeout: float = 1.0) -> bool:
    """Whether the Redis at ``url`` answers PING within ``timeout`` seconds."""
    try:
        client = redis.Redis.from_url(
            url,
            socket_connect_timeout=timeout,
            socket_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
    except ValueError:  # not a redis:// URL
        return False
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def port_in_use(host: str, port: int) -> OSError | None:
    """Why the API could not bind ``host:port`` now (as uvicorn binds: SO_REUSEADDR), or None."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        return exc
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                return exc
    return None


def check_port(host: str, port: int) -> None:
    """Raise :class:`DevError` with a hint when the API's ``host:port`` cannot be bound."""
    why = port_in_use(host, port)
    if why is None:
        return
    other = port + 1 if port < 65535 else 8001
    raise DevError(
        f"port {port} on {host or '0.0.0.0'} is not available ({why.strerror or why}); stop "
        f"what listens there, or pick another port: relay dev --port {other} "
        f"(make run PORT={other}, or RELAY_PORT={other})"
    )


def browse_host(host: str) -> str:
    """The address a browser uses for a server bound to ``host``."""
    if host in {"", "0.0.0.0", "::"}:
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def child_commands(host: str, port: int) -> dict[str, list[str]]:
    """The processes ``relay dev`` runs, by the short name that prefixes their output."""
    relay = [sys.executable, "-m", "relay"]
    return {
        "api": [*relay, "serve", "--host", host, "--port", str(port)],
        "processing": [*relay, "worker", "--queues", "processing"],
        "delivery": [*relay, "worker", "--queues", "delivery"],
        "detector": [*relay, "detector"],
    }


def dev_environment(
    settings: Settings, *, host: str, port: int, redis_url: str, encryption_key: str
) -> dict[str, str]:
    """The environment of every child: ours, the settings as ``RELAY_*``, the dev overrides."""
    env = {**os.environ, **settings.to_env()}
    env.update(
        RELAY_REDIS_URL=redis_url,
        RELAY_HOST=host,
        RELAY_PORT=str(port),
        RELAY_ALLOW_HTTP_TARGETS="true",
        RELAY_ALLOW_PRIVATE_TARGETS="true",
        RELAY_ENCRYPTION_KEY=encryption_key,
        PYTHONUNBUFFERED="1",
    )
    if settings.public_url == load_settings(environ={}, dotenv=None).public_url:
        env["RELAY_PUBLIC_URL"] = f"http://{browse_host(host)}:{port}"
    return env


# The README's quick start, second terminal: the README's block must equal this text
# (tests/test_quickstart.py), and a test runs the README's block on a fresh clone.
TRY_IT = r"""DEV_KEY=$(cat .relay/dev_api_key)                 # the API key relay dev printed
API=http://127.0.0.1:${RELAY_PORT:-8000}/api/v1   # relay dev's port (make run PORT=...)
HOOK_PORT=${HOOK_PORT:-9000}                      # where the receiver listens
api() { curl -sS -w '\n' -H "Authorization: Bearer $DEV_KEY" "$@"; }   # curl with the key

# 1. A receiver that verifies both signatures, v1 (HMAC) and v1a (Ed25519), with the
#    account's signing material; in the background until Ctrl-C or this shell exits
.venv/bin/pip install -q standardwebhooks          # the verifier the receiver uses
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
SIGNING=$(api $API/webhook-signing)
export WEBHOOK_SECRET=$(echo "$SIGNING" | field secret)          # whsec_...: v1
export WEBHOOK_PUBLIC_KEY=$(echo "$SIGNING" | field public_key)  # whpk_...: v1a
.venv/bin/python examples/receiver.py --port $HOOK_PORT & RECEIVER=$!
trap 'kill $RECEIVER 2>/dev/null' EXIT INT
until curl -s -o /dev/null http://127.0.0.1:$HOOK_PORT/hook; do sleep 0.2; done   # it listens

# 2. Upload a CSV into a batch, register the callback once, process
printf 'sku,qty,unit_price\nA-100,2,9.90\nB-200,1,24.00\n' > .relay/items.csv
api -F file=@.relay/items.csv -F batch_name=demo $API/documents
api -X PUT -H 'content-type: application/json' $API/batches/demo/webhook \
  -d "{\"url\": \"http://127.0.0.1:$HOOK_PORT/hook\"}"
api -X POST $API/batches/demo/process

# 3. The receiver prints: processed msg_… batch=demo seq=1
until api $API/batches/demo | grep -q '"all_done":true'; do sleep 0.2; done
api $API/batches/demo/results
api $API/batches/demo/webhook/deliveries
"""


def try_it(*, port: int, state_dir: Path) -> str:
    """:data:`TRY_IT` for this ``relay dev``: its port and state directory when not the defaults."""
    text = TRY_IT
    if state_dir.resolve() != (Path.cwd() / ".relay").resolve():
        text = text.replace(".relay/", f"{state_dir}/")
    if port != DEFAULT_PORT:
        text = f"export RELAY_PORT={port}\n{text}"
    return text


def banner(
    *,
    base_url: str,
    api_key: str,
    redis_url: str,
    state_dir: Path,
    port: int = DEFAULT_PORT,
    api_up: bool = True,
) -> str:
    """What ``relay dev`` prints once the API answers: where things are and a first run (the
    README's quick start, :func:`try_it`)."""
    api = f"{base_url}/api/v1"
    headline = "relay dev is up" if api_up else "relay dev is running (the API is not up yet)"
    steps = "".join(
        f"    {line}\n" if line else "\n"
        for line in try_it(port=port, state_dir=state_dir).split("\n")
    ).rstrip("\n")
    return f"""
  {headline}
    API       {base_url}   (OpenAPI: {api}/openapi.json)
    API key   {api_key}   (account "dev", kept in {state_dir / "dev_api_key"})
    Redis     {redact_url(redis_url)}   (the relay commands run here use it)
    Callbacks http:// and private addresses allowed (dev only)

  Try it in a second terminal, in this directory (README.md, "Quick start"):

{steps}

  Ctrl-C stops everything.
"""


# -- the supervisor -------------------------------------------------------------------------


class Supervisor:
    """Redis, the dev keys, the children; watches them until :meth:`request_stop`.

    ``commands`` (default :func:`child_commands`) and ``redis_port`` are parameters so a test
    can supervise processes of its own on ports of its own.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        host: str,
        port: int,
        state_dir: Path,
        redis_url_explicit: bool,
        console: Console,
        commands: dict[str, list[str]] | None = None,
        redis_port: int = DEV_REDIS_PORT,
    ) -> None:
        self.settings = settings
        self.commands = commands if commands is not None else child_commands(host, port)
        self.redis_port = redis_port
        self.host = host
        self.port = port
        self.state_dir = state_dir
        self.redis_url_explicit = redis_url_explicit
        self.console = console
        self.base_url = f"http://{browse_host(host)}:{port}"
        self.redis: RedisServer | None = None
        self.redis_budget = RestartBudget()
        self.redis_restart_at: float | None = None
        self.children: list[Child] = []
        self.stopping = threading.Event()
        console.on_closed = self.request_stop  # `relay dev | head`: head is done, so are we

    def say(self, text: str) -> None:
        self.console.say("dev", text)

    def request_stop(self) -> None:
        """Ask the supervisor to stop everything. Safe in a signal handler: it only sets an
        event (printing here could wait on the console's lock held by the interrupted code)."""
        self.stopping.set()

    def run(self) -> int:
        try:
            try:
                check_port(self.host, self.port)
                redis_url = self._redis_url()
                write_private(self.state_dir / REDIS_URL_FILE, redis_url)
                env = dev_environment(
                    self.settings,
                    host=self.host,
                    port=self.port,
                    redis_url=redis_url,
                    encryption_key=self.settings.encryption_key.reveal()
                    or ensure_encryption_key(self.state_dir),
                )
                api_key = self._dev_api_key(redis_url)
            except (RelayError, redis.RedisError, OSError) as exc:
                self.say(f"cannot start: {exc}")
                return 1
            for name, argv in self.commands.items():
                child = Child(name, argv, env, self.console)
                child.start()
                self.children.append(child)
            self._write_pids()
            announce = functools.partial(
                banner,
                base_url=self.base_url,
                api_key=api_key,
                redis_url=redis_url,
                state_dir=self.state_dir,
                port=self.port,
            )
            self._supervise(announce)
            return 0
        finally:
            self._shutdown()

    def _redis_url(self) -> str:
        url = self.settings.redis_url
        if self.settings.redis_sentinels:  # the Sentinels name the primary: no private Redis
            where = ",".join(f"{h}:{p}" for h, p in self.settings.redis_sentinels)
            self.say(f"using Redis through the Sentinels {where} (RELAY_REDIS_SENTINELS)")
            return url
        if self.redis_url_explicit:
            if redis_reachable(url):
                self.say(f"using Redis at {redact_url(url)} (RELAY_REDIS_URL)")
                return url
            shown = redact_url(url)
            self.say(f"RELAY_REDIS_URL={shown} does not answer; starting a private Redis instead")
        port = self.redis_port if port_is_free(self.redis_port) else None
        self.redis = RedisServer(
            self.state_dir / "redis", port=port, appendonly=True, die_with_parent=True
        )
        self.redis.start()
        if port is None:
            self.say(f"port {self.redis_port} is taken; private Redis on {self.redis.port}")
        self.say(f"private Redis {self.redis.url} (pid {self.redis.pid}, data in {self.redis.dir})")
        return self.redis.url

    def _dev_api_key(self, redis_url: str) -> str:
        from relay.state import api_keys

        client = sync_client(replace(RedisTarget.from_settings(self.settings), url=redis_url))
        try:
            return ensure_dev_api_key(
                client,
                self.state_dir,
                create_key=api_keys.create_key,
                lookup_key=api_keys.lookup_key,
            )
        finally:
            client.close()

    def _write_pids(self) -> None:
        pids = {c.name: c.proc.pid for c in self.children if c.proc is not None}
        if self.redis is not None and self.redis.pid is not None:
            pids["redis"] = self.redis.pid
        write_private(self.state_dir / "dev.pids", json.dumps(pids))

    def _supervise(self, announce: Callable[..., str]) -> None:
        """Watch until asked to stop; print the banner once the API answers (or gave up)."""
        announce_by = time.monotonic() + HEALTH_TIMEOUT
        announced = up = False
        while not self.stopping.is_set():
            now = time.monotonic()
            self.console.check()
            self._watch_redis(now)
            for child in self.children:
                self._watch(child, now)
            if not up and healthy(f"{self.base_url}/healthz"):
                up = True
                if announced:  # late (a busy machine): say so once it is
                    self.say(f"relay dev is up: the API answers at {self.base_url} now")
                else:
                    self.console.write(announce(api_up=True))
                    announced = True
            elif not announced and now >= announce_by:
                self.say(
                    f"the API did not answer {self.base_url}/healthz within "
                    f"{HEALTH_TIMEOUT:g} s; see its lines above"
                )
                self.console.write(announce(api_up=False))
                announced = True
            self.stopping.wait(_TICK)

    def _watch(self, child: Child, now: float) -> None:
        if child.proc is None:
            return
        if child.restart_at is None:
            code = child.proc.poll()
            if code is None:
                return
            # Whatever its forks left running (an RQ work-horse, an extraction sandbox) goes
            # with it now, not at the restart: nothing of a crashed child keeps running.
            child.send(signal.SIGKILL, group=True)
            delay = child.budget.delay(now)
            child.restart_at = now + delay
            self.say(f"{child.name} exited with code {code}; restarting in {delay:.1f} s")
        elif now >= child.restart_at:
            child.join_output(0.5)
            child.budget.record(now)
            child.restart_at = None
            child.start()
            self._write_pids()

    def _watch_redis(self, now: float) -> None:
        server = self.redis
        if server is None or server.running:
            return
        if self.redis_restart_at is None:
            delay = self.redis_budget.delay(now)
            self.redis_restart_at = now + delay
            self.say(f"private Redis exited; restarting it in {delay:.1f} s")
        elif now >= self.redis_restart_at:
            self.redis_budget.record(now)
            self.redis_restart_at = None
            try:
                server.restart()
            except RedisServerError as exc:
                self.say(f"private Redis did not come back: {exc}")
                return
            self.say(f"private Redis is back (pid {server.pid})")
            self._write_pids()

    def _shutdown(self) -> None:
        if self.children or self.redis is not None:
            self.say("stopping...")
        stop_children(self.children)
        if self.redis is not None and self.redis.running:
            self.say("stopping the private Redis (the AOF is flushed)")
            if not self.redis.stop(STOP_TIMEOUT):
                self.say("the private Redis did not stop in time and was killed")
        (self.state_dir / "dev.pids").unlink(missing_ok=True)


def run_dev(
    settings: Settings,
    *,
    host: str,
    port: int,
    state_dir: Path = Path(".relay"),
    redis_url_explicit: bool = False,
) -> int:
    """Run the API, the workers and the detector on a local Redis until Ctrl-C; the exit code.

    ``redis_url_explicit`` says the user set ``RELAY_REDIS_URL``: only then is that Redis used
    (when it answers), so ``relay dev`` never writes into a Redis it merely found by default.
    """
    console = Console(sys.stdout)
    state_dir = state_dir.resolve()
    try:
        lock = lock_state_dir(state_dir)
    except DevError as exc:
        console.say("dev", str(exc))
        return 1
    with lock:
        stop_orphans(state_dir, console)
        supervisor = Supervisor(
            settings,
            host=host,
            port=port,
            state_dir=state_dir,
            redis_url_explicit=redis_url_explicit,
            console=console,
        )
        with on_stop_signals(supervisor.request_stop):
            return supervisor.run()
