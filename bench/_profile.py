"""Optional sampling profiles of relay processes with py-spy (``--profile``).

``Profiler(pids, label)`` starts one ``py-spy record --format raw --gil`` per process
(non-blocking sampling of the thread holding the GIL, so a CPU profile of the Python code; line
numbers dropped so samples aggregate by function); ``stop()``
ends them with SIGINT, which makes py-spy write its collapsed stacks, and returns the top frames
by self time (the innermost frame) and by inclusive time (anywhere on the stack). The raw files
stay in ``bench/results/`` for flame graphs (e.g. ``inferno-flamegraph``).
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench._common import RESULTS

TOP = 15


def py_spy() -> str | None:
    """The py-spy executable (the venv's first), or None when it is not installed."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def top_frames(raw: Path, top: int = TOP) -> dict[str, Any]:
    """Self and inclusive shares of a py-spy raw (collapsed stacks) file."""
    self_t: Counter[str] = Counter()
    incl_t: Counter[str] = Counter()
    total = 0
    try:
        lines = raw.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        self_t[frames[-1]] += count
        for frame in set(frames):
            incl_t[frame] += count

    def shares(counter: Counter[str]) -> list[tuple[str, float]]:
        return (
            [(f, round(100 * c / total, 1)) for f, c in counter.most_common(top)] if total else []
        )

    return {"samples": total, "self_pct": shares(self_t), "inclusive_pct": shares(incl_t)}


class Profiler:
    """py-spy on several processes at once, for the span between ``start`` and ``stop``."""

    def __init__(self, pids: dict[str, int], label: str, rate: int = 200) -> None:
        self.pids = pids
        self.label = label
        self.rate = rate
        self.exe = py_spy()
        self.procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}

    @property
    def available(self) -> bool:
        return self.exe is not None

    def start(self) -> None:
        if self.exe is None:
            return
        RESULTS.mkdir(exist_ok=True)
        for name, pid in self.pids.items():
            out = RESULTS / f"profile-{self.label}-{name}.txt"
            popen = subprocess.Popen(
                [
                    self.exe, "record", "--pid", str(pid), "--format", "raw",
                    "--output", str(out), "--rate", str(self.rate), "--nonblocking",
                    "--nolineno", "--gil",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            self.procs[name] = (popen, out)
        time.sleep(0.5)  # py-spy attaches in a few hundred ms

    def stop(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, (popen, path) in self.procs.items():
            with contextlib.suppress(ProcessLookupError):
                popen.send_signal(signal.SIGINT)
            try:
                popen.wait(20)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait(5)
            out[name] = {"file": str(path), **top_frames(path)}
        self.procs.clear()
        return out


def render(profiles: dict[str, Any]) -> str:
    """The top frames of each profile as text."""
    lines: list[str] = []
    for name, p in profiles.items():
        lines.append(f"== profile of {name}: {p['samples']} samples ({p['file']})")
        lines.append("   self %   function")
        lines += [f"   {pct:6.1f}   {frame}" for frame, pct in p["self_pct"]]
        lines.append("   incl %   function")
        lines += [f"   {pct:6.1f}   {frame}" for frame, pct in p["inclusive_pct"]]
    return "\n".join(lines)
