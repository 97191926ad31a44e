"""The pieces of ``relay dev`` (relay.devtools.dev): key files, environment, banner, the supervisor."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from cryptography.fernet import Fernet
from redis import Redis

from relay.config import load_settings
from relay.devtools import dev
from relay.devtools.supervisor import Console
from tests.support.helpers import free_port, wait_until

# -- files in the state directory -----------------------------------------------------------


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


# -- pure pieces ----------------------------------------------------------------------------


def test_redis_reachable(redis_url: str) -> None:
    assert dev.redis_reachable(redis_url)
    assert not dev.redis_reachable(f"redis://127.0.0.1:{free_port()}/0")
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
        "processing": [sys.executable, "-m", "relay", "worker", "--queues", "processing"],
        "delivery": [sys.executable, "-m", "relay", "worker", "--queues", "delivery"],
        "detector": [sys.executable, "-m", "relay", "detector"],
    }
    assert dev.browse_host("::1") == "[::1]"
    text = dev.banner(
        base_url="http://127.0.0.1:8123",
        api_key="rk_abc",
        redis_url="redis://127.0.0.1:6390/0",
        state_dir=Path("/s"),
        port=8123,
    )
    assert "rk_abc" in text and "redis://127.0.0.1:6390/0" in text
    assert "http://127.0.0.1:8123/api/v1/openapi.json" in text
    # The quick start for this port: the README's (tests/test_quickstart.py), port set first.
    assert "    export RELAY_PORT=8123\n    DEV_KEY=$(cat /s/dev_api_key)" in text
    assert "api -X POST $API/batches/demo/process" in text


# -- the supervisor with processes of the test's own ----------------------------------------


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _supervisor(
    tmp_path: Path, port: int, commands: dict[str, list[str]]
) -> tuple[dev.Supervisor, io.StringIO]:
    """A supervisor of the test's own commands on ``port``, with a Redis on a free port, and
    what it writes."""
    out = io.StringIO()
    supervisor = dev.Supervisor(
        load_settings(environ={}, dotenv=None),
        host="127.0.0.1",
        port=port,
        state_dir=tmp_path,
        redis_url_explicit=False,
        console=Console(out),
        commands=commands,
        redis_port=free_port(),
    )
    return supervisor, out


@contextlib.contextmanager
def _running(supervisor: dev.Supervisor) -> Iterator[list[int]]:
    """``supervisor`` run in a thread, stopped and joined on leaving; yields the list its exit
    code is put in."""
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(supervisor.run()))
    thread.start()
    try:
        yield codes
    finally:
        supervisor.request_stop()
        thread.join(30)


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


def test_supervisor_starts_restarts_and_stops_everything(tmp_path: Path) -> None:
    api_port = free_port()
    supervisor, out = _supervisor(
        tmp_path,
        api_port,
        {
            "api": [*_python(_HEALTHZ_SERVER), str(api_port)],
            "crasher": _python("print('boom')"),
        },
    )
    with _running(supervisor) as codes:
        wait_until(lambda: "relay dev is up" in out.getvalue(), 20, message="never up")
        wait_until(lambda: out.getvalue().count("crasher  | boom") >= 3, 20, message="no restarts")
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
        from relay.state import api_keys

        client = redis.Redis.from_url(server.url)
        try:
            assert api_keys.lookup_key(client, api_key) == "dev"
        finally:
            client.close()
    finally:
        server.stop()
    assert (tmp_path / "encryption.key").is_file()
    # The other relay commands run in this checkout find this Redis by that file.
    assert (tmp_path / dev.REDIS_URL_FILE).read_text().strip() == server.url
    assert _mode(tmp_path / dev.REDIS_URL_FILE) == 0o600
    assert not (tmp_path / "dev.pids").exists()
    assert all(c.proc is not None and c.proc.poll() is not None for c in supervisor.children)


def test_a_busy_port_stops_relay_dev_with_a_hint_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert dev.port_in_use("127.0.0.1", port) is not None
        assert dev.port_in_use("0.0.0.0", port) is not None  # what uvicorn on 0.0.0.0 meets
        supervisor, out = _supervisor(tmp_path, port, {"api": _python("print('started')")})
        assert supervisor.run() == 1
    text = out.getvalue()
    assert text.splitlines() == [
        f"dev      | cannot start: port {port} on 127.0.0.1 is not available (Address already "
        f"in use); stop what listens there, or pick another port: relay dev --port {port + 1} "
        f"(make run PORT={port + 1}, or RELAY_PORT={port + 1})"
    ]
    assert supervisor.children == [] and supervisor.redis is None
    assert dev.port_in_use("127.0.0.1", port) is None  # free again once the listener closed


def test_relay_dev_with_a_busy_port_exits_non_zero(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        out = subprocess.run(
            [sys.executable, "-m", "relay", "dev", "--port", str(port), "--state-dir", "s"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"port {port} on 127.0.0.1 is not available" in out.stdout
    assert "restarting" not in out.stdout and "Traceback" not in out.stdout + out.stderr


def _make_dry_run(*args: str) -> list[str]:
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        ["make", "-n", "-C", str(root), "--no-print-directory", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout.splitlines()


def test_make_run_takes_a_port_and_make_clean_keeps_the_dev_data() -> None:
    assert _make_dry_run("run", "PORT=8080")[-1] == ".venv/bin/relay dev --port 8080"
    assert _make_dry_run("run")[-1].split() == [".venv/bin/relay", "dev"]
    clean = "\n".join(_make_dry_run("clean"))
    assert ".relay" not in clean and ".pytest_cache" in clean
    data = _make_dry_run("clean-data")
    assert data[-1] == "rm -rf .relay"
    said = "\n".join(data)
    assert "dev API key" in said and "encryption key" in said and "Redis data" in said


# -- nothing relay dev started outlives it ---------------------------------------------------


def _started_by(redis_url: str) -> list[int]:
    """Pids of the running processes whose environment points at ``redis_url`` (the children
    of a relay dev and whatever they forked: they all inherit ``RELAY_REDIS_URL``)."""
    marker = f"RELAY_REDIS_URL={redis_url}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0") and dev_pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def dev_pid_alive(pid: int) -> bool:
    from relay.devtools.supervisor import _pid_alive

    return _pid_alive(pid)


_PRIVATE_REDIS = re.compile(r"private Redis (redis://\S+) \(pid (\d+),")


def _relay_dev(tmp_path: Path, pipe: str = "") -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    command = f"{sys.executable} -m relay dev --port {free_port()} --state-dir s {pipe}"
    return subprocess.Popen(
        ["bash", "-c", command],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own group: the test signals it, nothing else
    )


def _assert_nothing_left(redis_url: str, redis_pid: int, output: str) -> None:
    wait_until(lambda: not dev_pid_alive(redis_pid), 30, 0.2, "redis-server still runs")
    wait_until(lambda: not _started_by(redis_url), 30, 0.2, f"children left: {output}")


@pytest.mark.timeout(240)
def test_relay_dev_piped_into_head_leaves_no_process(tmp_path: Path) -> None:
    proc = _relay_dev(tmp_path, "| head -n 3")
    try:
        output, _ = proc.communicate(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert len(output.splitlines()) == 3, output
    found = _PRIVATE_REDIS.search(output)
    assert found is not None, output
    _assert_nothing_left(found.group(1), int(found.group(2)), output)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_relay_dev_stops_everything_on_a_signal(tmp_path: Path, sig: signal.Signals) -> None:
    proc = _relay_dev(tmp_path)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        # Every child has started once dev.pids is written.
        wait_until(lambda: (tmp_path / "s" / "dev.pids").exists(), 120, 0.1, "never started")
        text = "".join(lines)
        found = _PRIVATE_REDIS.search(text)
        assert found is not None, text
        wait_until(lambda: _started_by(found.group(1)), 60, 0.1, "no child seen")
        # The signal to relay dev alone (bash exec'd it: a single command).
        os.kill(proc.pid, sig)
        assert proc.wait(120) == 0, "".join(lines)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(10)
    if proc.stdout is not None:
        proc.stdout.close()
    text = "".join(lines)
    assert "stopping the private Redis" in text, text
    _assert_nothing_left(found.group(1), int(found.group(2)), text)


@pytest.mark.timeout(240)
def test_relay_dev_sigkilled_leaves_no_process(tmp_path: Path) -> None:
    """SIGKILL: relay dev cleans nothing up itself; its children and its Redis stop on their
    own (the parent-death signal, ``relay.devtools.supervisor.die_with_parent``)."""
    proc = _relay_dev(tmp_path)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    found: re.Match[str] | None = None
    try:
        wait_until(lambda: (tmp_path / "s" / "dev.pids").exists(), 120, 0.1, "never started")
        pids = json.loads((tmp_path / "s" / "dev.pids").read_text())
        text = "".join(lines)
        found = _PRIVATE_REDIS.search(text)
        assert found is not None, text
        url, redis_pid = found.group(1), int(found.group(2))
        wait_until(lambda: _started_by(url), 60, 0.1, "no child seen")
        os.kill(proc.pid, signal.SIGKILL)  # relay dev alone (bash exec'd it)
        assert proc.wait(30) == -signal.SIGKILL
        _assert_nothing_left(url, redis_pid, text)
        assert not [name for name, pid in pids.items() if dev_pid_alive(pid)]
        found = None  # nothing to clean up
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if found is not None:  # what the failed test left running
            for pid in [*_started_by(found.group(1)), int(found.group(2))]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        reader.join(10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_an_api_up_after_the_banner_is_announced_when_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A busy machine: the API answers after the banner gave up waiting for it.
    monkeypatch.setattr(dev, "HEALTH_TIMEOUT", 0.5)
    api_port = free_port()
    supervisor, out = _supervisor(
        tmp_path,
        api_port,
        {"api": [*_python("import time; time.sleep(3)\n" + _HEALTHZ_SERVER), str(api_port)]},
    )
    with _running(supervisor):
        wait_until(lambda: "relay dev is up: the API answers" in out.getvalue(), 60, 0.1, "never")
    text = out.getvalue()
    assert text.index("relay dev is running (the API is not up yet)") < text.index(
        "relay dev is up: the API answers"
    )


def test_what_a_crashed_child_started_does_not_outlive_it(tmp_path: Path) -> None:
    api_port = free_port()
    # The child starts a grandchild (its own process group, as a worker's work-horse is) and
    # crashes; it is restarted after a long backoff.
    crasher = (
        "import subprocess, sys\n"
        "p = subprocess.Popen(['sleep', '300'])\n"
        "print('grandchild', p.pid, flush=True)\n"
        "sys.exit(3)\n"
    )
    supervisor, out = _supervisor(tmp_path, api_port, {"crasher": _python(crasher)})
    with _running(supervisor):
        wait_until(lambda: "crasher exited with code 3" in out.getvalue(), 60, 0.1, "no crash")
        (pid,) = re.findall(r"grandchild (\d+)", out.getvalue())[:1]
        wait_until(lambda: not dev_pid_alive(int(pid)), 10, 0.05, "the grandchild still runs")
