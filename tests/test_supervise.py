"""Process supervision for ``relay dev`` (relay.devtools.supervisor): the state directory lock, restart
budget, health probe, children and orphans."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from relay.devtools import supervisor
from tests.support.helpers import free_port, wait_until

# -- the state directory --------------------------------------------------------------------


def test_only_one_supervisor_per_state_dir(tmp_path: Path) -> None:
    with (
        supervisor.lock_state_dir(tmp_path),
        pytest.raises(supervisor.DevError, match="another `relay dev`"),
    ):
        supervisor.lock_state_dir(tmp_path)
    supervisor.lock_state_dir(tmp_path).close()  # released with the first one


# -- pure pieces ----------------------------------------------------------------------------


def test_restart_budget_backs_off_and_allows_five_a_minute() -> None:
    budget = supervisor.RestartBudget()
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
    assert supervisor.healthy(f"{http_server}/healthz")
    assert not supervisor.healthy(f"{http_server}/missing")
    assert not supervisor.healthy(f"http://127.0.0.1:{free_port()}/healthz")


# -- children and orphans (real processes) --------------------------------------------------


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_child_output_is_prefixed_with_its_name() -> None:
    out = io.StringIO()
    console = supervisor.Console(out)
    child = supervisor.Child(
        "worker", _python("print('one'); print('two')"), dict(os.environ), console
    )
    child.start()
    assert child.proc is not None
    assert child.proc.wait(10) == 0
    child.join_output()
    assert out.getvalue() == "worker   | one\nworker   | two\n"


def test_stop_children_terminates_then_kills(tmp_path: Path) -> None:
    out = io.StringIO()
    console = supervisor.Console(out)
    polite = supervisor.Child(
        "polite", _python("import time; time.sleep(60)"), dict(os.environ), console
    )
    stubborn_code = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    stubborn = supervisor.Child("stubborn", _python(stubborn_code), dict(os.environ), console)
    for child in (polite, stubborn):
        child.start()
    # It says "ready" once SIGTERM is ignored.
    wait_until(lambda: "stubborn | ready" in out.getvalue(), 10, message="stubborn not ready")

    started = time.monotonic()
    supervisor.stop_children([polite, stubborn], timeout=1.0)
    assert time.monotonic() - started < 5
    assert polite.proc is not None and polite.proc.returncode == -signal.SIGTERM
    assert stubborn.proc is not None and stubborn.proc.returncode == -signal.SIGKILL


def test_orphans_of_a_killed_supervisor_are_stopped(tmp_path: Path) -> None:
    # An orphan looks like ours ("relay" in its command line); a stranger does not.
    orphan = subprocess.Popen(_python("import time; time.sleep(60)  # relay worker"))
    stranger = subprocess.Popen(_python("import time; time.sleep(60)"))
    try:
        # Popen returns once execve has begun, a moment before the kernel sets the new
        # command line (/proc/PID/cmdline reads empty meanwhile): a real orphan has long run.
        for proc in (orphan, stranger):
            wait_until(
                lambda proc=proc: b"sleep" in Path(f"/proc/{proc.pid}/cmdline").read_bytes(),  # type: ignore[misc]
                5,
                0.01,
                "the child's command line never showed",
            )
        (tmp_path / "dev.pids").write_text(
            json.dumps({"worker": orphan.pid, "api": stranger.pid, "detector": 2**22 + 1})
        )
        supervisor.stop_orphans(tmp_path, supervisor.Console(io.StringIO()))
        assert orphan.wait(5) == -signal.SIGTERM
        assert stranger.poll() is None
        assert not (tmp_path / "dev.pids").exists()
    finally:
        for proc in (orphan, stranger):
            proc.kill()
            proc.wait()
