"""The peers a user would pick instead of relay, each pinned in a venv of its own.

Each peer's venv is made by the bench on first use in ``bench/results/venvs/<venv>/``
(``python -m venv``, then ``pip install`` of the pinned requirements below from the package
index) and reused while its ``requirements.txt`` stamp matches. A peer runs in a subprocess
of its venv's Python: ``bench/tables/peer_driver.py ENGINE`` (standalone: it imports
nothing of relay or of the bench) reads the documents' paths as JSON on stdin and prints
one JSON line per document: the tables as grids, the seconds of its extraction (wall clock
around the call, after the driver's imports and the engine's construction), or the error.
All engines are then scored by the same scorer.

Every driver process runs with one thread for the native libraries that honour the usual
variables (``OMP_NUM_THREADS``, ``OMP_THREAD_LIMIT``, ``OPENBLAS_NUM_THREADS``,
``MKL_NUM_THREADS``); onnxruntime's sessions (rapid-table, rapidocr) are given one intra-op
thread by the driver. relay's worker gives a document one core too (its Tesseract runs
with ``OMP_THREAD_LIMIT=1``).

A driver that dies on a document (a crash in native code) is restarted on the documents
after it; that document is recorded as ``peer_crashed``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._common import RESULTS

__all__ = [
    "IMAGE_PEERS",
    "PDF_PEERS",
    "PEERS",
    "PeerUnavailable",
    "run_peer",
    "versions_seen",
]

DRIVER = Path(__file__).resolve().parent / "peer_driver.py"
VENVS = RESULTS / "venvs"
_INSTALL_TIMEOUT = 1800.0
_PER_DOCUMENT_TIMEOUT = 600.0
_SINGLE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "OMP_THREAD_LIMIT": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


@dataclass(frozen=True)
class Peer:
    """One engine: the venv it runs in (shared by the flavours of one package), its pinned
    requirements and the kinds of document it takes."""

    venv: str
    requirements: tuple[str, ...]
    kinds: tuple[str, ...]
    # The distributions whose versions are reported with the figures.
    report: tuple[str, ...]


_CAMELOT = ("camelot-py==2.0.0",)
_RAPID = ("rapid-table==0.3.0", "rapidocr-onnxruntime==1.4.4", "onnxruntime==1.32.0")

PEERS: dict[str, Peer] = {
    "camelot-lattice": Peer("camelot", _CAMELOT, ("pdf",), ("camelot-py", "pypdfium2")),
    "camelot-stream": Peer("camelot", _CAMELOT, ("pdf",), ("camelot-py", "pypdfium2")),
    "pdfplumber": Peer(
        "pdfplumber",
        ("pdfplumber==0.11.10",),
        ("pdf",),
        ("pdfplumber", "pdfminer.six"),
    ),
    "img2table": Peer(
        "img2table",
        ("img2table==2.0.0",),
        ("image",),
        ("img2table", "opencv-contrib-python", "opencv-python", "polars"),
    ),
    "rapid-table": Peer(
        "rapid-table",
        _RAPID,
        ("image",),
        ("rapid-table", "rapidocr-onnxruntime", "onnxruntime", "opencv-python"),
    ),
}
PDF_PEERS = tuple(name for name, peer in PEERS.items() if "pdf" in peer.kinds)
IMAGE_PEERS = tuple(name for name, peer in PEERS.items() if "image" in peer.kinds)

_VERSIONS: dict[str, dict[str, str]] = {}


class PeerUnavailable(RuntimeError):
    """A peer's venv could not be made (offline, no wheel for this Python)."""


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_venv(peer: Peer) -> Path:
    """The peer's venv, made (or remade, when its pins changed) if need be."""
    venv = VENVS / peer.venv
    stamp = venv / "requirements.txt"
    wanted = "\n".join(peer.requirements) + "\n"
    if _python(venv).exists() and stamp.exists() and stamp.read_text() == wanted:
        return venv
    print(f"[tables] making the venv of {peer.venv}: {' '.join(peer.requirements)}", flush=True)
    VENVS.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(_python(venv)), "-m", "pip", "install", "-q", *peer.requirements],
    ]
    for step in steps:
        try:
            done = subprocess.run(
                step, capture_output=True, text=True, timeout=_INSTALL_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise PeerUnavailable(f"{' '.join(step[:4])} took over {exc.timeout:g} s") from None
        if done.returncode != 0:
            said = [ln for ln in done.stderr.splitlines() if not ln.startswith("WARNING")]
            raise PeerUnavailable(f"{' '.join(step[:4])} failed: {' | '.join(said[-3:])}")
    stamp.write_text(wanted)
    print(f"[tables] venv {peer.venv} ready in {time.monotonic() - t0:.0f} s", flush=True)
    return venv


def _versions(venv: Path, peer: Peer) -> dict[str, str]:
    code = (
        "import json, sys\nfrom importlib import metadata\nout = {}\n"
        "for d in sys.argv[1:]:\n"
        "    try:\n        out[d] = metadata.version(d)\n"
        "    except metadata.PackageNotFoundError:\n        pass\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [str(_python(venv)), "-c", code, *peer.report],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        found = json.loads(done.stdout)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in found.items()}


def _drive(
    venv: Path, engine: str, docs: list[dict[str, str]]
) -> tuple[dict[str, dict[str, Any]], str]:
    """Run the driver over ``docs`` until it finishes or dies; its answers and stderr tail."""
    env = {**os.environ, **_SINGLE_THREAD}
    env.pop("PYTHONPATH", None)
    answers: dict[str, dict[str, Any]] = {}
    timeout = 300.0 + _PER_DOCUMENT_TIMEOUT * len(docs)
    try:
        done = subprocess.run(
            [str(_python(venv)), str(DRIVER), engine],
            input=json.dumps(docs),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=str(VENVS),
            check=False,
        )
        stdout, stderr = done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = f"timed out after {timeout:g} s"
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        if isinstance(answer, dict) and "name" in answer:
            answers[str(answer["name"])] = answer
    return answers, "\n".join(stderr.strip().splitlines()[-5:])


def run_peer(engine: str, docs: list[tuple[str, Path, str]]) -> dict[str, dict[str, Any]]:
    """``{name: {"tables": [grid...], "seconds": s, "error": code|None, "message": ...}}`` for
    every document of ``docs`` (``(name, path, kind)``) the peer takes."""
    peer = PEERS.get(engine)
    if peer is None:
        raise PeerUnavailable(f"no peer {engine!r}")
    if peer.venv == "img2table" and shutil.which("tesseract") is None:
        # Each document would fail inside img2table ("Tesseract not found"): say it once.
        raise PeerUnavailable(
            "img2table needs the system's Tesseract (apt-get install tesseract-ocr)"
        )
    venv = ensure_venv(peer)
    _VERSIONS[engine] = _versions(venv, peer)
    todo = [
        {"name": name, "path": str(path), "kind": kind}
        for name, path, kind in docs
        if kind in peer.kinds
    ]
    answers: dict[str, dict[str, Any]] = {}
    while todo:
        got, said = _drive(venv, engine, todo)
        answers.update(got)
        left = [doc for doc in todo if doc["name"] not in answers]
        if not left:
            break
        # The driver died or hung on the first document it did not answer: skip that one.
        answers[left[0]["name"]] = {
            "name": left[0]["name"],
            "tables": [],
            "seconds": 0.0,
            "error": "peer_crashed",
            "message": said[-300:],
        }
        print(f"[tables] {engine} died on {left[0]['name']}: {said[-200:]}", flush=True)
        todo = left[1:]
    return answers


def versions_seen() -> dict[str, dict[str, str]]:
    """The versions of every peer that ran (what its venv holds)."""
    return dict(_VERSIONS)
