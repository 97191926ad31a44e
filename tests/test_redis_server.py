"""The private redis-server (relay.redis_server) and the pieces of ``relay dev`` (relay.dev)
that stand on their own: key files, restart budget, environment, children, orphans."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import redis
from cryptography.fernet import Fernet
from redis import Redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from relay import dev, redis_server
from relay.config import load_settings
from relay.redis_server import RedisServer, RedisServerError

Factory = Callable[..., RedisServer]  # the redis_factory fixture (tests/helpers.py RedisFactory)


def _get(url: str, key: str) -> bytes | None:
    client = redis.Redis.from_url(url, decode_responses=False)
    try:
        value = client.get(key)
        assert value is None or isinstance(value, bytes)
        return value
    finally:
        client.close()


def _set(url: str, key: str, value: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        client.set(key, value)
    finally:
        client.close()


# -- RedisServer ----------------------------------------------------------------------------


def test_start_serves_on_loopback_with_the_configured_persistence(
    redis_factory: Factory,
) -> None:
    server = redis_factory(appendfsync="always")

    assert server.running and server.pid is not None
    assert server.url == f"redis://127.0.0.1:{server.port}/0"
    client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        assert client.ping()
        assert client.info("server")["process_id"] == server.pid
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "always"}
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("bind") == {"bind": "127.0.0.1"}
        assert client.config_get("dir") == {"dir": str(server.dir)}
    finally:
        client.close()
    assert (server.dir / "redis.log").is_file()


@pytest.mark.parametrize(
    ("appendfsync", "settle"),
    [("always", 0.0), ("everysec", 1.1)],
    ids=["fsync-always", "fsync-everysec"],
)
def test_kill_then_restart_brings_back_the_aof_data(
    redis_factory: Factory, appendfsync: str, settle: float
) -> None:
    server = redis_factory(appendfsync=appendfsync)
    url, port = server.url, server.port
    _set(url, "survivor", "yes")
    time.sleep(settle)  # everysec: let the once-a-second fsync happen

    server.kill()
    assert not server.running and server.pid is None
    with pytest.raises(redis.ConnectionError):
        _get(url, "survivor")

    server.restart()
    assert server.port == port and server.url == url
    assert _get(url, "survivor") == b"yes"


def test_stop_is_graceful_and_flushes_the_aof(redis_factory: Factory) -> None:
    server = redis_factory(appendfsync="everysec")
    _set(server.url, "written", "just now")  # no wait: the shutdown must fsync it
    pid = server.pid

    assert server.stop() is True
    assert not server.running
    log = server.logfile.read_text()
    assert f"{pid}:signal-handler" in log and "ready to exit" in log

    server.restart()
    assert _get(server.url, "written") == b"just now"
    assert server.stop() is True
    assert server.stop() is True  # stopping a stopped server is a no-op


def test_restart_waits_out_a_port_briefly_held_by_another_process(
    redis_factory: Factory,
) -> None:
    server = redis_factory()
    port = server.port
    server.kill()
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squatter.bind(("127.0.0.1", port))
    squatter.listen()
    release = threading.Timer(0.3, squatter.close)
    release.start()
    try:
        server.restart()
    finally:
        release.join()
        squatter.close()
    assert server.running and server.port == port


def test_start_on_a_port_held_for_good_fails_with_the_log(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        server = RedisServer(tmp_path, port=holder.getsockname()[1])
        with pytest.raises(RedisServerError, match="Address already in use"):
            server.start(timeout=1.5)
    assert not server.running


def test_password_is_required_and_carried_in_the_url(redis_factory: Factory) -> None:
    server = redis_factory(password="p@ss/word")
    assert server.url == f"redis://:p%40ss%2Fword@127.0.0.1:{server.port}/0"
    _set(server.url, "k", "v")
    anonymous = redis.Redis(host="127.0.0.1", port=server.port, retry=Retry(NoBackoff(), 0))
    try:
        with pytest.raises(redis.AuthenticationError):
            anonymous.get("k")
    finally:
        anonymous.close()


def test_context_manager_starts_and_stops(tmp_path: Path) -> None:
    with RedisServer(tmp_path, appendonly=False) as server:
        assert server.running
        assert _get(server.url, "nothing") is None
    assert not server.running
    assert not (tmp_path / "appendonlydir").exists()


def test_missing_redis_server_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_server, "find_redis_server", lambda: None)
    with pytest.raises(RedisServerError, match="redis-server not found"):
        RedisServer(tmp_path).start()


def test_port_is_free(redis_factory: Factory) -> None:
    server = redis_factory()
    assert not redis_server.port_is_free(server.port)
    assert redis_server.port_is_free(redis_server.free_port())


# -- the conftest fixtures ------------------------------------------------------------------


@pytest.mark.parametrize("run", [1, 2])
def test_each_test_gets_an_empty_session_redis(redis: Redis, run: int) -> None:
    assert redis.dbsize() == 0  # the other run's key was flushed
    redis.set(f"left-by-{run}", b"x")


# -- relay dev: files in the state directory ------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_encryption_key_is_made_once_and_kept_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    key = dev.ensure_encryption_key(state)

    Fernet(key.encode())  # a valid Fernet key
    path = state / "encryption.key"
    assert _mode(path) == 0o600
    assert dev.ensure_encryption_key(state) == key

    path.chmod(0o644)
    assert dev.ensure_encryption_key(state) == key
    assert _mode(path) == 0o600


def test_a_broken_encryption_key_file_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "encryption.key"
    path.write_text("not a key\n")
    with pytest.raises(dev.DevError, match="no valid Fernet key"):
        dev.ensure_encryption_key(tmp_path)
    assert path.read_text() == "not a key\n"


def test_dev_api_key_is_reused_while_redis_knows_it(redis: Redis, tmp_path: Path) -> None:
    made: list[str] = []

    def create_key(client: Redis, *, account: str) -> str:
        key = f"rk_test_{len(made)}"
        client.set(f"test-key:{key}", account)
        made.append(key)
        return key

    def lookup_key(client: Redis, key: str) -> object | None:
        account: object | None = client.get(f"test-key:{key}")
        return account

    def ensure() -> str:
        return dev.ensure_dev_api_key(redis, tmp_path, create_key=create_key, lookup_key=lookup_key)

    first = ensure()
    assert first == "rk_test_0"
    assert (tmp_path / "dev_api_key").read_text().strip() == first
    assert _mode(tmp_path / "dev_api_key") == 0o600
    assert ensure() == first and made == [first]

    redis.flushall()  # a Redis that lost its data: a new key
    assert ensure() == "rk_test_1"
    assert (tmp_path / "dev_api_key").read_text().strip() == "rk_test_1"
    assert redis.get("test-key:rk_test_1") == b"dev"


def test_only_one_supervisor_per_state_dir(tmp_path: Path) -> None:
    with dev.lock_state_dir(tmp_path), pytest.raises(dev.DevError, match="another `relay dev`"):
        dev.lock_state_dir(tmp_path)
    dev.lock_state_dir(tmp_path).close()  # released with the first one


# -- relay dev: pure pieces -----------------------------------------------------------------


def test_restart_budget_backs_off_and_allows_five_a_minute() -> None:
    budget = dev.RestartBudget()
    now = 1000.0
    delays = []
    for _ in range(5):
        delays.append(budget.delay(now))
        budget.record(now)
        now += 1
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0]
    # A sixth crash within the minute waits until the first restart is a minute old.
    assert budget.delay(now) == pytest.approx(55.0)
    # A minute of calm forgets the old restarts.
    assert budget.delay(now + 120) == 0.5


def test_redis_reachable(redis_url: str) -> None:
    assert dev.redis_reachable(redis_url)
    assert not dev.redis_reachable(f"redis://127.0.0.1:{redis_server.free_port()}/0")
    assert not dev.redis_reachable("not a url")


def test_dev_environment_turns_on_dev_flags() -> None:
    settings = load_settings(environ={}, dotenv=None)
    env = dev.dev_environment(
        settings,
        host="0.0.0.0",
        port=8123,
        redis_url="redis://127.0.0.1:6390/0",
        encryption_key="k",
    )
    assert env["RELAY_REDIS_URL"] == "redis://127.0.0.1:6390/0"
    assert env["RELAY_ALLOW_HTTP_TARGETS"] == "true"
    assert env["RELAY_ALLOW_PRIVATE_TARGETS"] == "true"
    assert env["RELAY_ENCRYPTION_KEY"] == "k"
    assert env["RELAY_PUBLIC_URL"] == "http://127.0.0.1:8123"
    assert env["RELAY_PORT"] == "8123"
    assert env["PATH"] == os.environ["PATH"]
    # Children load their settings from this environment: it must hold only known names.
    load_settings(environ=env, dotenv=None)

    custom = load_settings(environ={"RELAY_PUBLIC_URL": "https://relay.example"}, dotenv=None)
    env = dev.dev_environment(
        custom, host="127.0.0.1", port=8000, redis_url="redis://x", encryption_key="k"
    )
    assert env["RELAY_PUBLIC_URL"] == "https://relay.example"


def test_child_commands_and_banner() -> None:
    commands = dev.child_commands("127.0.0.1", 8123)
    assert commands == {
        "api": [sys.executable, "-m", "relay", "serve", "--host", "127.0.0.1", "--port", "8123"],
        "worker": [sys.executable, "-m", "relay", "worker"],
        "detector": [sys.executable, "-m", "relay", "detector"],
    }
    assert dev.browse_host("::1") == "[::1]"
    text = dev.banner(
        base_url="http://127.0.0.1:8123",
        api_key="rk_abc",
        redis_url="redis://127.0.0.1:6390/0",
        state_dir=Path("/s"),
    )
    assert "rk_abc" in text and "redis://127.0.0.1:6390/0" in text
    assert "http://127.0.0.1:8123/api/v1/batches/demo/process" in text
    assert "RELAY_" not in text  # a RELAY_ shell variable would break the next relay command


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_healthy(http_server: str) -> None:
    assert dev.healthy(f"{http_server}/healthz")
    assert not dev.healthy(f"{http_server}/missing")
    assert not dev.healthy(f"http://127.0.0.1:{redis_server.free_port()}/healthz")


# -- relay dev: children and orphans (real processes) ---------------------------------------


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_child_output_is_prefixed_with_its_name() -> None:
    out = io.StringIO()
    console = dev.Console(out)
    child = dev.Child("worker", _python("print('one'); print('two')"), dict(os.environ), console)
    child.start()
    assert child.proc is not None
    assert child.proc.wait(10) == 0
    child.join_output()
    assert out.getvalue() == "worker   | one\nworker   | two\n"


def test_stop_children_terminates_then_kills(tmp_path: Path) -> None:
    console = dev.Console(io.StringIO())
    polite = dev.Child("polite", _python("import time; time.sleep(60)"), dict(os.environ), console)
    stubborn_code = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    stubborn = dev.Child("stubborn", _python(stubborn_code), dict(os.environ), console)
    for child in (polite, stubborn):
        child.start()
    time.sleep(0.3)  # let the stubborn one install its handler

    started = time.monotonic()
    dev.stop_children([polite, stubborn], timeout=1.0)
    assert time.monotonic() - started < 5
    assert polite.proc is not None and polite.proc.returncode == -signal.SIGTERM
    assert stubborn.proc is not None and stubborn.proc.returncode == -signal.SIGKILL


def test_orphans_of_a_killed_supervisor_are_stopped(tmp_path: Path) -> None:
    # An orphan looks like ours ("relay" in its command line); a stranger does not.
    orphan = subprocess.Popen(_python("import time; time.sleep(60)  # relay worker"))
    stranger = subprocess.Popen(_python("import time; time.sleep(60)"))
    try:
        (tmp_path / "dev.pids").write_text(
            json.dumps({"worker": orphan.pid, "api": stranger.pid, "detector": 2**22 + 1})
        )
        dev.stop_orphans(tmp_path, dev.Console(io.StringIO()))
        assert orphan.wait(5) == -signal.SIGTERM
        assert stranger.poll() is None
        assert not (tmp_path / "dev.pids").exists()
    finally:
        for proc in (orphan, stranger):
            proc.kill()
            proc.wait()


# -- relay dev: the supervisor with processes of the test's own -----------------------------

_HEALTHZ_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *args):
        pass
print("listening", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _eventually(predicate: Callable[[], bool], timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(0.05)


def test_supervisor_starts_restarts_and_stops_everything(tmp_path: Path) -> None:
    api_port = redis_server.free_port()
    out = io.StringIO()
    supervisor = dev.Supervisor(
        load_settings(environ={}, dotenv=None),
        host="127.0.0.1",
        port=api_port,
        state_dir=tmp_path,
        redis_url_explicit=False,
        console=dev.Console(out),
        commands={
            "api": [*_python(_HEALTHZ_SERVER), str(api_port)],
            "crasher": _python("print('boom')"),
        },
        redis_port=redis_server.free_port(),
    )
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(supervisor.run()))
    thread.start()
    try:
        _eventually(lambda: "relay dev is up" in out.getvalue(), 20, out.getvalue())
        _eventually(lambda: out.getvalue().count("crasher  | boom") >= 3, 20, out.getvalue())
    finally:
        supervisor.request_stop()
        thread.join(30)
    text = out.getvalue()

    assert codes == [0], text
    assert "api      | listening" in text
    assert "crasher exited with code 0; restarting in 0.5 s" in text
    assert "crasher exited with code 0; restarting in 1.0 s" in text
    # The private Redis was stopped gracefully and kept the dev API key in its AOF.
    server = supervisor.redis
    assert server is not None and not server.running
    api_key = (tmp_path / "dev_api_key").read_text().strip()
    assert api_key in text
    server.restart()
    try:
        from relay import auth

        client = redis.Redis.from_url(server.url)
        try:
            assert auth.lookup_key(client, api_key) == "dev"
        finally:
            client.close()
    finally:
        server.stop()
    assert (tmp_path / "encryption.key").is_file()
    assert not (tmp_path / "dev.pids").exists()
    assert all(c.proc is not None and c.proc.poll() is not None for c in supervisor.children)
