"""The README's quick start, run as a newcomer runs it, on a fresh clone (issue 11).

The two shell blocks of README.md's "Quick start" are taken from the README as they are
(nothing is copied by hand, so they cannot drift) and run in two shells, the two terminals:

1. ``git clone <this repo> relay && cd relay`` / ``make run`` with ``<this repo>`` replaced by
   this checkout (what is committed: a clone sees nothing else);
2. once ``relay dev is up`` shows, the second block in the clone, followed by ``wait`` (a
   terminal stays open); then SIGINT to that shell alone (Ctrl-C), which must stop the
   receiver, and SIGINT to the first terminal's process group (Ctrl-C), which stops relay dev.

Both get ``RELAY_PORT`` and ``HOOK_PORT`` set to free ports (the README says how to move off
8000 and 9000), so a run never depends on those ports being free.

``venv_from``: with a path, the clone's ``.venv`` is made before ``make run`` (a venv whose
dependencies are that venv's packages, and whose ``relay`` is the clone's), so the run needs
no network (the test suite); without, ``make run`` installs everything from the index as a
newcomer's does (``python -m bench quickstart``, which times it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench._common import ROOT, BenchError, Outcome, progress, table

NAME = "quickstart"
_AT_PROMPT = "__quickstart_block_done__"
# How long a Ctrl-C may take to stop a terminal's processes: what a busy machine (two
# `make test` side by side on two cores) meets, not what a quiet one needs.
STOP_SECONDS = 60.0
_FENCE = re.compile(r"^```sh\n(.*?)^```$", re.M | re.S)


def quickstart_blocks(readme: Path = ROOT / "README.md") -> tuple[str, str]:
    """The two ``sh`` blocks of the README's "Quick start": first terminal, second terminal."""
    text = readme.read_text()
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    blocks = _FENCE.findall(section)
    if len(blocks) != 2:
        raise BenchError(f"README.md's Quick start has {len(blocks)} sh blocks, expected 2")
    return blocks[0], blocks[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _as_in_a_terminal() -> None:
    """In the shell's process before it starts: Ctrl-C and Ctrl-\\ as a terminal's shell
    has them. A process started in the background of a shell without job control (``make
    test &`` from a script, as some CI runners do) ignores SIGINT and SIGQUIT, its children
    inherit that, and bash cannot trap a signal ignored on entry: the quick start's
    ``trap ... INT`` would do nothing and Ctrl-C would not stop the receiver."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


class Terminal:
    """A shell running a script in its own session, its output (stdout and stderr) collected."""

    def __init__(self, script: str, cwd: Path, env: dict[str, str]) -> None:
        self._chunks: list[bytes] = []
        self.proc = subprocess.Popen(
            ["bash", "-c", script],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_as_in_a_terminal,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        # Chunks, not lines: curl prints its JSON without a newline at the end.
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while chunk := os.read(fd, 65536):
            self._chunks.append(chunk)

    @property
    def text(self) -> str:
        return b"".join(self._chunks).decode(errors="replace")

    def wait_for(self, needle: str, timeout: float, what: str) -> float:
        """Seconds until ``needle`` shows in the output; BenchError after ``timeout``."""
        started = time.monotonic()
        while needle not in self.text:
            if self.proc.poll() is not None:
                time.sleep(0.2)  # the last lines
                if needle in self.text:
                    break
                raise BenchError(f"{what}: the shell exited ({self.proc.returncode}):\n{self.text}")
            if time.monotonic() - started > timeout:
                raise BenchError(f"{what}: not within {timeout:g} s:\n{self.text}")
            time.sleep(0.05)
        return time.monotonic() - started

    def wait_asleep(self, timeout: float) -> None:
        """Wait until the shell sleeps (in ``wait``, the stand-in for a terminal at its
        prompt), at most ``timeout`` seconds. bash misses a SIGINT that arrives between the
        command before ``wait`` and ``wait`` itself (it then waits for its jobs first: 1 run
        in 200 here, bash 5.2), which a person's Ctrl-C at a prompt never meets."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{self.proc.pid}/stat") as stat:
                    if stat.read().rpartition(")")[2].split()[0] == "S":
                        return
            except (OSError, IndexError):
                return  # gone, or no /proc: nothing to wait for
            time.sleep(0.01)

    def interrupt(self, *, group: bool, timeout: float) -> int | None:
        """Ctrl-C: SIGINT to the shell (``group``: to its whole process group); its exit code,
        or None when it did not exit within ``timeout`` (it is then killed)."""
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(self.proc.pid, signal.SIGINT)
            else:
                self.proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout
        try:
            code: int | None = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        # What the shell started may still be stopping (relay dev stops its Redis last).
        while self._group_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.kill()
        return code

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@dataclass
class QuickstartRun:
    """What one run of the quick start showed."""

    first: str = ""  # the first terminal's output (make run, relay dev)
    second: str = ""  # the second terminal's output (the receiver, the curls)
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    second_exit: int | None = None  # the second shell's exit code after Ctrl-C
    receiver_stopped: bool = False  # its port no longer answers after Ctrl-C
    first_exit: int | None = None
    git_status: str = ""  # `git status --porcelain` in the clone at the end
    seconds: dict[str, float] = field(default_factory=dict)


def provision_venv(clone: Path, venv_from: Path) -> None:
    """``clone/.venv`` whose dependencies are ``venv_from``'s packages and whose ``relay`` is
    the clone's, with the install stamps ``make`` checks, so ``make run`` installs nothing."""
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
    outer = sysconfig.get_path("purelib", vars={"base": str(venv_from), "platbase": str(venv_from)})
    # A path line adds a folder to sys.path without running its .pth files: the outer venv's
    # editable install of relay stays out, the clone's relay comes first.
    Path(purelib, "_quickstart.pth").write_text(f"{clone}\n{outer}\n")
    for name, code in {
        "relay": "import sys\nfrom relay.cli.commands import main\nsys.exit(main())\n",
        "pip": "import sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n",
    }.items():
        script = venv / "bin" / name
        script.write_text(f"#!{venv / 'bin' / 'python'}\n{code}")
        script.chmod(0o755)
    for stamp in (".installed-run", ".installed-dev"):
        (venv / stamp).touch()


def run_quickstart(
    workdir: Path,
    *,
    source: Path = ROOT,
    venv_from: Path | None = None,
    up_timeout: float = 120.0,
    notified_timeout: float = 60.0,
) -> QuickstartRun:
    """Clone ``source`` into ``workdir/relay`` and run the README's quick start there."""
    first_block, second_block = quickstart_blocks(source / "README.md")
    if "<this repo>" not in first_block:
        raise BenchError(f"the first block no longer clones <this repo>:\n{first_block}")
    clone_line, _, rest = first_block.partition("\n")
    clone_line = clone_line.replace("<this repo>", str(source))
    relay_port, hook_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "VIRTUAL_ENV"))}
    env.update(RELAY_PORT=str(relay_port), HOOK_PORT=str(hook_port))
    clone = workdir / "relay"
    out = QuickstartRun()
    t0 = time.monotonic()
    if venv_from is not None:
        # The clone line runs first on its own so that the venv exists before `make run`.
        subprocess.run(["bash", "-c", clone_line], cwd=workdir, env=env, check=True)
        provision_venv(clone, venv_from)
        clone_line = "cd relay"
    first = Terminal(f"{clone_line}\n{rest}", workdir, env)
    second: Terminal | None = None
    try:
        out.seconds["clone_to_up"] = first.wait_for("relay dev is up", up_timeout, "relay dev")
        # A terminal stays open after the pasted block: `wait` stands for that. The marker
        # says the block is done and the shell is at its prompt: Ctrl-C comes after it.
        second = Terminal(second_block + f"\necho {_AT_PROMPT}\nwait\n", clone, env)
        second.wait_for("processed msg_", notified_timeout, "the receiver's notification")
        out.seconds["up_to_notified"] = time.monotonic() - t0 - out.seconds["clone_to_up"]
        second.wait_for('{"deliveries":', notified_timeout, "the deliveries listing")
        second.wait_for(_AT_PROMPT, notified_timeout, "the end of the second block")
        out.deliveries = _deliveries(clone, relay_port)
        second.wait_asleep(notified_timeout)
        out.second_exit = second.interrupt(group=False, timeout=STOP_SECONDS)
        deadline = time.monotonic() + STOP_SECONDS
        while _listening(hook_port) and time.monotonic() < deadline:
            time.sleep(0.1)
        out.receiver_stopped = not _listening(hook_port)
        out.git_status = subprocess.run(
            ["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True, check=True
        ).stdout
    finally:
        if second is not None:
            second.kill()
            out.second = second.text
        out.first_exit = first.interrupt(group=True, timeout=2 * STOP_SECONDS)
        out.first = first.text
    return out


def _deliveries(clone: Path, port: int) -> list[dict[str, Any]]:
    """The demo batch's deliveries once the newest succeeded (or 30 s went by)."""
    key = (clone / ".relay" / "dev_api_key").read_text().strip()
    url = f"http://127.0.0.1:{port}/api/v1/batches/demo/webhook/deliveries"
    deadline = time.monotonic() + 30
    while True:
        found: list[dict[str, Any]] = httpx.get(
            url, headers={"authorization": f"Bearer {key}"}, timeout=30
        ).json()["deliveries"]
        if (found and found[0]["status"] == "succeeded") or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def run(quick: bool = False, profile: bool = False) -> Outcome:
    """``python -m bench quickstart``: the fresh clone with a fresh ``make run`` (network)."""
    import tempfile

    progress(NAME, "git clone, make run (a new .venv from the package index), the second block")
    with tempfile.TemporaryDirectory(prefix="relay-quickstart-") as tmp:
        result = run_quickstart(Path(tmp), up_timeout=1200.0)
    attempts = [len(d["attempts"]) for d in result.deliveries]
    verified = "v1 secrets: 1, v1a keys: 1" in result.second and "processed msg_" in result.second
    ok = verified and attempts == [1] and result.receiver_stopped and not result.git_status
    if not ok:
        raise BenchError(
            f"the quick start did not go through: attempts {attempts}, receiver stopped "
            f"{result.receiver_stopped}, git status {result.git_status!r}\n{result.second}"
        )
    rows = [
        ["git clone → make run → relay dev is up", round(result.seconds["clone_to_up"], 1)],
        ["second block → receiver printed it", round(result.seconds["up_to_notified"], 1)],
    ]
    outcome = Outcome()
    outcome.tables.append(table("README quick start, fresh clone (s)", ["step", "s"], rows))
    outcome.data.update(
        seconds=result.seconds,
        attempts=attempts,
        deliveries=json.loads(json.dumps(result.deliveries)),
    )
    outcome.goal("first-attempt verified notification", float(attempts == [1]), "", "1", ok)
    return outcome
