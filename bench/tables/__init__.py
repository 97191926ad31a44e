"""``python -m bench tables``: table quality on public ground truth, relay beside its peers.

Three corpora (``bench.tables.corpora``): ``pdf`` (the ICDAR 2013 EU PDFs), ``images``
(the PubTabNet example images) and ``scans`` (the same PDFs as office scans,
``bench.tables.scans``). On each, relay's default extractor (``bench.tables.relay_side``)
and the peers a user would pick instead (``bench.tables.peers``: each pinned in a venv of
its own, run in a subprocess) are scored the same way (``bench.tables.score``, the ICDAR
2013 adjacency relations): mean per-document F1, micro precision/recall/F1, documents
with no table, seconds per page.

Seconds: wall clock around the extraction of each document (relay through its extraction
child as the worker runs it, a peer in its driver process), after the engine's imports and
without reading the file from disk; summed over the corpus and divided by its pages.

The engines take turns, ``TURN`` documents at a time (relay on documents 1-5, each peer on
1-5, relay on 6-10...), so that on a shared machine a change of load in the middle of a
run falls on every engine alike instead of on whichever ran then; each turn starts the
engine afresh (imports and models loaded outside the measured seconds).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from bench._common import RESULTS, BenchError, CpuMeter, Outcome, environment, progress, table
from bench.tables import peers
from bench.tables.corpora import Doc, Grid, corpora_dir, load_images, load_pdfs
from bench.tables.relay_side import RelayRunner
from bench.tables.scans import PARAMS as SCAN_PARAMS
from bench.tables.scans import build_scans
from bench.tables.score import Counts, score_document, summarise

NAME = "tables"
CORPORA = ("pdf", "images", "scans")
ENGINES: dict[str, tuple[str, ...]] = {
    "pdf": ("relay", *peers.PDF_PEERS),
    "images": ("relay", *peers.IMAGE_PEERS),
    "scans": ("relay", *peers.IMAGE_PEERS),
}
QUICK_LIMIT = 3
TURN = 5  # documents an engine reads before the next engine's turn
# What relay's engines run on (reported with the figures).
_DISTRIBUTIONS = (
    "pdfplumber",
    "pdfminer.six",
    "pypdfium2",
    "rapidocr-onnxruntime",
    "rapid-table",
    "onnxruntime",
    "opencv-python",
    "opencv-contrib-python",
    "opencv-python-headless",
    "numpy",
    "pillow",
)
_HEADER = ["engine", "mean F1", "micro P", "micro R", "micro F1", "no table", "s/page", "failed"]


@dataclass
class DocResult:
    """What one engine did with one document."""

    name: str
    pages: int
    tables: list[Grid] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    message: str = ""


def _load(corpus: str, limit: int | None) -> list[Doc]:
    if corpus == "pdf":
        return load_pdfs(limit)
    if corpus == "images":
        return load_images(limit)
    return build_scans(load_pdfs(limit))


_RELAY_SETTINGS: dict[str, Any] = {}


def _run_relay(docs: Sequence[Doc], meter: CpuMeter) -> tuple[list[DocResult], dict[str, Any]]:
    out: list[DocResult] = []
    with RelayRunner() as relay:
        _RELAY_SETTINGS.update(relay.settings())
        if relay.host.pid:  # the extraction child (a replacement child is not counted)
            meter.track("relay-extract", relay.host.pid)
        for doc in docs:
            content = doc.path.read_bytes()
            got = relay.run(content, f"{doc.name}{doc.path.suffix}")
            out.append(
                DocResult(doc.name, doc.pages, got.tables, got.seconds, got.error, got.message)
            )
        cpu = meter.stop()  # before the extraction child is gone with its counters
    return out, cpu


def _run_engine(
    engine: str, docs: Sequence[Doc], meter: CpuMeter
) -> tuple[list[DocResult], dict[str, Any]]:
    if engine == "relay":
        return _run_relay(docs, meter)
    answers = peers.run_peer(engine, [(doc.name, doc.path, doc.kind) for doc in docs])
    out: list[DocResult] = []
    for doc in docs:
        answer = answers.get(doc.name, {"error": "no_answer", "tables": [], "seconds": 0.0})
        out.append(
            DocResult(
                doc.name,
                doc.pages,
                [[list(row) for row in grid] for grid in answer.get("tables", [])],
                float(answer.get("seconds", 0.0)),
                answer.get("error"),
                str(answer.get("message", "")),
            )
        )
    return out, meter.stop()


def _merge_cpu(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The CPU figures of an engine's turns as one: cores weighted by each turn's wall."""
    wall = sum(float(p["wall_s"]) for p in parts) or 1e-6
    merged: dict[str, Any] = {"wall_s": round(wall, 2)}
    for key in ("machine_busy_cores", "ours_cores", "foreign_cores"):
        merged[key] = round(sum(float(p[key]) * float(p["wall_s"]) for p in parts) / wall, 2)
    by_process: dict[str, float] = {}
    for p in parts:
        for name, cores in p["by_process_cores"].items():
            by_process[name] = by_process.get(name, 0.0) + float(cores) * float(p["wall_s"])
    merged["by_process_cores"] = {k: round(v / wall, 2) for k, v in by_process.items()}
    merged["turns"] = len(parts)
    return merged


def _versions() -> dict[str, str]:
    versions: dict[str, str] = {}
    for dist in _DISTRIBUTIONS:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    binary = shutil.which("tesseract")
    if binary:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
        lines = (done.stdout or done.stderr).splitlines()
        versions["tesseract"] = lines[0].removeprefix("tesseract ") if lines else "?"
    return versions


def _score(
    docs: Sequence[Doc], results: Sequence[DocResult]
) -> tuple[list[Counts], dict[str, Any]]:
    counts = [score_document(r.tables, d.truth) for d, r in zip(docs, results, strict=True)]
    summary = summarise(counts)
    pages = sum(r.pages for r in results)
    seconds = sum(r.seconds for r in results)
    errors = Counter(r.error for r in results if r.error)
    data = {
        "documents": summary.documents,
        "pages": pages,
        "mean_f1": round(summary.mean_f1, 4),
        "micro_precision": round(summary.micro.precision, 4),
        "micro_recall": round(summary.micro.recall, 4),
        "micro_f1": round(summary.micro.f1, 4),
        "relations": {
            "correct": summary.micro.correct,
            "detected": summary.micro.detected,
            "truth": summary.micro.truth,
        },
        "no_table": sum(1 for r in results if not any(r.tables)),
        "failed": dict(sorted(errors.items())),
        "seconds": round(seconds, 3),
        "seconds_per_page": round(seconds / pages, 4) if pages else None,
        "per_document": [
            {
                "name": r.name,
                "pages": r.pages,
                "f1": round(c.f1, 4),
                "precision": round(c.precision, 4),
                "recall": round(c.recall, 4),
                "correct": c.correct,
                "detected": c.detected,
                "truth": c.truth,
                "tables": len(r.tables),
                "seconds": round(r.seconds, 3),
                "error": r.error,
                "message": r.message,
            }
            for r, c in zip(results, counts, strict=True)
        ],
    }
    return counts, data


def _per_document(corpus: str, results: dict[str, Any]) -> str:
    """Each document's F1 by engine (``!code`` for a failure), to see where they differ."""
    scored = {e: r["per_document"] for e, r in results.items() if "per_document" in r}
    if not scored:
        return ""
    names = [d["name"] for d in next(iter(scored.values()))]
    rows = []
    for i, name in enumerate(names):
        cells: list[Any] = [name]
        for docs in scored.values():
            doc = docs[i]
            cells.append(f"!{doc['error']}" if doc["error"] else f"{doc['f1']:.2f}")
        rows.append(cells)
    return table(f"{corpus}: F1 per document", ["document", *scored], rows)


def _goals(out: Outcome, corpus: str, results: dict[str, Any]) -> None:
    """Issue 14's goal on ``corpus``: relay's mean F1 at least the best peer's, and its
    seconds per page at most that peer's (reported, not asserted)."""
    relay = results.get("relay")
    scored = {e: r for e, r in results.items() if e != "relay" and "mean_f1" in r}
    if not relay or "mean_f1" not in relay or not scored:
        return
    best = max(scored, key=lambda e: (scored[e]["mean_f1"], -(scored[e]["seconds_per_page"] or 0)))
    peer = scored[best]
    out.goal(
        f"{corpus}: relay mean F1 (best peer {best} {peer['mean_f1']:.3f})",
        relay["mean_f1"],
        "",
        f">= {peer['mean_f1']:.3f}",
        relay["mean_f1"] >= peer["mean_f1"],
    )
    relay_s, peer_s = relay["seconds_per_page"] or 0.0, peer["seconds_per_page"] or 0.0
    out.goal(
        f"{corpus}: relay s/page ({best} {peer_s:.3f})",
        relay_s,
        "s",
        f"<= {peer_s:.3f}",
        relay_s <= peer_s,
    )


def _choose(requested: Sequence[str] | None, allowed: Sequence[str], what: str) -> list[str]:
    if not requested:
        return list(allowed)
    unknown = [r for r in requested if r not in allowed]
    if unknown:
        raise BenchError(f"unknown {what} {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return list(requested)


def run(
    quick: bool = False,
    profile: bool = False,
    *,
    corpus: Sequence[str] | None = None,
    engines: Sequence[str] | None = None,
    limit: int | None = None,
) -> Outcome:
    corpora = _choose(corpus, CORPORA, "corpus")
    all_engines = sorted({e for names in ENGINES.values() for e in names})
    chosen = _choose(engines, all_engines, "engine")
    if limit is None and quick:
        limit = QUICK_LIMIT
    out = Outcome()
    versions = _versions()
    progress(NAME, f"corpora in {corpora_dir()}")
    data: dict[str, Any] = {
        "options": {"corpus": corpora, "engines": chosen, "limit": limit},
        "relay_settings": _RELAY_SETTINGS,
        "versions": {"relay": versions},
        "scan_params": SCAN_PARAMS,
        "corpora": {},
    }
    for name in corpora:
        docs = _load(name, limit)
        if not docs:
            raise BenchError(f"corpus {name!r} is empty: is {corpora_dir()} there?")
        rows: list[list[Any]] = []
        results: dict[str, Any] = {}
        grids: dict[str, Any] = {"truth": {d.name: d.truth for d in docs}}
        pages = sum(d.pages for d in docs)
        engines = [e for e in ENGINES[name] if e in chosen]
        progress(NAME, f"{name}: {', '.join(engines)} on {len(docs)} documents ({pages} pages)")
        got_by: dict[str, list[DocResult]] = {e: [] for e in engines}
        cpu_by: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
        wall_by: dict[str, float] = dict.fromkeys(engines, 0.0)
        unavailable: dict[str, str] = {}
        for start in range(0, len(docs), TURN):
            turn = docs[start : start + TURN]
            progress(NAME, f"{name}: documents {start + 1}-{start + len(turn)} of {len(docs)}")
            for engine in engines:
                if engine in unavailable:
                    continue
                meter = CpuMeter({})
                t0 = time.monotonic()
                try:
                    got, cpu = _run_engine(engine, turn, meter)
                except peers.PeerUnavailable as exc:
                    progress(NAME, f"{name}: {engine} unavailable: {exc}")
                    unavailable[engine] = str(exc)
                    continue
                wall_by[engine] += time.monotonic() - t0
                got_by[engine] += got
                cpu_by[engine].append(cpu)
        for engine in engines:
            if engine in unavailable:
                results[engine] = {"unavailable": unavailable[engine]}
                rows.append([engine, "unavailable", "", "", "", "", "", ""])
                continue
            got = got_by[engine]
            grids[engine] = {r.name: r.tables for r in got}
            _, scored = _score(docs, got)
            scored["wall_s"] = round(wall_by[engine], 1)
            scored["cpu"] = _merge_cpu(cpu_by[engine])
            results[engine] = scored
            failed = ", ".join(f"{k} {v}" for k, v in scored["failed"].items()) or "-"
            rows.append(
                [
                    engine,
                    scored["mean_f1"],
                    scored["micro_precision"],
                    scored["micro_recall"],
                    scored["micro_f1"],
                    scored["no_table"],
                    scored["seconds_per_page"],
                    failed,
                ]
            )
        data["corpora"][name] = {"documents": len(docs), "pages": pages, "engines": results}
        _goals(out, name, results)
        grids_path = RESULTS / f"tables-grids-{name}{'.quick' if quick or limit else ''}.json"
        RESULTS.mkdir(exist_ok=True)
        grids_path.write_text(json.dumps(grids) + "\n")
        data["corpora"][name]["grids"] = str(grids_path.relative_to(RESULTS.parent.parent))
        out.tables.append(
            table(
                f"{name}: {len(docs)} documents, {pages} pages"
                + (f" (--limit {limit})" if limit else ""),
                _HEADER,
                rows,
            )
        )
        out.tables.append(_per_document(name, results))
    data["versions"].update(peers.versions_seen())
    if _RELAY_SETTINGS:
        out.tables.append(
            "relay: "
            + ", ".join(f"{k} {v}" for k, v in _RELAY_SETTINGS.items())
            + f"; commit {environment()['commit']}"
        )
    out.tables.append(
        "versions: "
        + "; ".join(
            f"{engine}: " + ", ".join(f"{k} {v}" for k, v in sorted(vs.items()))
            for engine, vs in data["versions"].items()
        )
    )
    out.data.update(data)
    return out
