"""What every benchmark shares: bounded waiting, percentiles, RSS, tables and JSON results.

``wait_until`` is the tests' (``relay/devtools/processes.py``), re-exported for the benchmarks.
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.devtools.processes import wait_until as wait_until

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"

# A small CSV document: what the processing, lag and memory benchmarks upload.
CSV_DOC = b"sku,description,qty,unit_price\nA-100,Widget,2,9.99\nB-220,Gadget,1,19.50\n"


class BenchError(RuntimeError):
    """A benchmark could not run to the end (a process died, a wait timed out)."""


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100), nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary_ms(values_s: Sequence[float]) -> dict[str, float]:
    """p50 / p90 / p99 / max / mean in milliseconds of values given in seconds."""
    ms = [v * 1000 for v in values_s]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 2),
        "p90_ms": round(percentile(ms, 90), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "max_ms": round(max(ms), 2) if ms else math.nan,
        "mean_ms": round(sum(ms) / len(ms), 2) if ms else math.nan,
    }


def proc_status_kib(pid: int, field: str = "VmRSS") -> int | None:
    """A ``/proc/PID/status`` memory field (VmRSS, VmHWM...) in KiB; None when unreadable."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else math.nan


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table (first column left-aligned, the others right-aligned)."""
    cells = [[str(h) for h in header], *[[fmt(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r: list[str]) -> str:
        parts = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    out = [f"== {title}", line(cells[0]), rule, *(line(r) for r in cells[1:])]
    return "\n".join(out)


def git_output(*args: str, timeout: float = 10) -> str:
    """What ``git ARGS`` prints in the checkout, stripped; empty when git cannot run."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


def environment() -> dict[str, Any]:
    """Where the figures come from: machine, Python, relay's commit (read-only git)."""
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "commit": git_output("rev-parse", "--short", "HEAD", timeout=5),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_result(name: str, quick: bool, data: dict[str, Any]) -> Path:
    """``bench/results/NAME.json`` (``NAME.quick.json`` for a smoke run)."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / (f"{name}.quick.json" if quick else f"{name}.json")
    payload = {"benchmark": name, "quick": quick, "environment": environment(), **data}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


@dataclass
class Goal:
    """A target from the issues, and whether this run met it (reported, never asserted)."""

    what: str
    value: float
    unit: str
    target: str
    met: bool


@dataclass
class Outcome:
    """What one benchmark hands back: its tables, its JSON data and its goals."""

    tables: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    goals: list[Goal] = field(default_factory=list)

    def goal(self, what: str, value: float, unit: str, target: str, met: bool) -> None:
        self.goals.append(Goal(what, value, unit, target, met))


def progress(name: str, message: str) -> None:
    print(f"[{name}] {message}", flush=True)


def _machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from ``/proc/stat``."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _proc_jiffies(pid: int) -> int:
    """utime + stime of a live process (all its threads); 0 when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class CpuMeter:
    """How busy the machine was during a measurement, and how much of that was not ours.

    The machine is shared (other people's tests may run on the same 2 cores), so every
    figure is reported with ``foreign_cores``: CPU used by processes outside this benchmark
    (everything busy on the machine minus this process, its waited-for children and the
    tracked processes), in cores (2.0 = both cores of this machine fully busy). The tracked
    processes are also reported one by one (``by_process``).
    """

    def __init__(self, pids: Mapping[str, int | None]) -> None:
        self.tick = os.sysconf("SC_CLK_TCK")
        self.pids = {name: pid for name, pid in pids.items() if pid}
        self.start()

    def start(self) -> None:
        self.t0 = time.monotonic()
        self.machine0 = _machine_jiffies()
        self.procs0 = {name: _proc_jiffies(pid) for name, pid in self.pids.items()}
        self.self0 = self._own_seconds()

    def track(self, name: str, pid: int) -> None:
        """Count a process started after the meter, from now on."""
        self.pids[name] = pid
        self.procs0[name] = _proc_jiffies(pid)

    @staticmethod
    def _own_seconds() -> float:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    def stop(self) -> dict[str, Any]:
        wall = max(time.monotonic() - self.t0, 1e-6)
        busy1, _ = _machine_jiffies()
        busy = (busy1 - self.machine0[0]) / self.tick
        by_process = {
            name: max(0, _proc_jiffies(self.pids[name]) - j) / self.tick
            for name, j in self.procs0.items()
        }
        own = self._own_seconds() - self.self0
        ours = sum(by_process.values()) + own
        return {
            "wall_s": round(wall, 2),
            "machine_busy_cores": round(busy / wall, 2),
            "ours_cores": round(ours / wall, 2),
            "foreign_cores": round(max(0.0, busy - ours) / wall, 2),
            "by_process_cores": {
                "bench": round(own / wall, 2),
                **{k: round(v / wall, 2) for k, v in by_process.items()},
            },
        }
