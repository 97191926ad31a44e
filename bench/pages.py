"""CPU seconds per real page, stage by stage, beside the models alone (issue 27).

The pages: a fixed sample of each kind from the ``tables`` corpora (``--limit`` per kind, 12
by default, 3 with ``--quick``): *scans* (pages of the scan corpus, ``bench.tables.scans``,
each as a one-page TIFF, spread evenly over its 111 pages), *images* (the first PubTabNet
images) and *pdf* (the same pages as the scans, each as a one-page PDF with its text layer).

Each kind is read in a child process of its own (``bench/pages_child.py``: what it times
and how is in its docstring), so each has its own peak RSS: relay's reader for that kind,
models warm, one thread for every native library, CPU seconds (``time.process_time``) by
stage (decode/render, text detection, recognition, table structure, layout and matching)
and inside onnxruntime; then the models alone on the same pages (rapidocr's own pipeline,
SLANet-plus on a whole table image) in the same child.

``--against PATH`` measures another checkout of relay in the same run (e.g. a worktree of
4bb9c3f): for each kind, a child on the head and a child on PATH take turns (``--rounds``
times, the order flipped each round: head, base, base, head...), so a change of load on the
shared machine falls on both; the ratio head/base of relay's CPU seconds per page is
reported per round and as the median, beside the same ratio for the models alone (the same
code in both children: how far two runs of identical work differ here, the noise).

Writes ``bench/results/pages.json``.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench._common import ROOT, BenchError, CpuMeter, Outcome, progress, table
from bench.tables.corpora import load_images, load_pdfs
from bench.tables.scans import build_scans

NAME = "pages"
KINDS = ("scans", "images", "pdf")
STAGES = ("decode", "detection", "recognition", "structure", "layout")
CHILD = Path(__file__).resolve().parent / "pages_child.py"
# Relay's CPU per page must be at most this share of the baseline's (issue 27).
GOAL_RATIO = 1 / 3


def _spread(count: int, wanted: int) -> list[int]:
    """``wanted`` indexes spread evenly over ``range(count)``."""
    wanted = min(wanted, count)
    return sorted({int((i + 0.5) * count / wanted) for i in range(wanted)})


def _sample(folder: Path, limit: int) -> dict[str, list[Path]]:
    """The pages of each kind, written into ``folder``."""
    import pypdfium2 as pdfium
    from PIL import Image

    pdfs = load_pdfs()
    scans = build_scans(pdfs, log=False)
    pages = [(doc, n) for doc in pdfs for n in range(doc.pages)]
    chosen = [pages[i] for i in _spread(len(pages), limit)]
    out: dict[str, list[Path]] = {kind: [] for kind in KINDS}
    by_name = {doc.name: doc for doc in scans}
    for doc, n in chosen:
        stem = f"{doc.name}-p{n + 1}"
        with Image.open(by_name[doc.name].path) as tiff:
            tiff.seek(n)
            path = folder / f"{stem}.tif"
            tiff.save(path, compression="tiff_adobe_deflate", dpi=(200, 200))
        out["scans"].append(path)
        source = pdfium.PdfDocument(str(doc.path))
        single = pdfium.PdfDocument.new()
        try:
            single.import_pages(source, [n])
            buffer = io.BytesIO()
            single.save(buffer)
        finally:
            single.close()
            source.close()
        path = folder / f"{stem}.pdf"
        path.write_bytes(buffer.getvalue())
        out["pdf"].append(path)
    out["images"] = [doc.path for doc in load_images(limit)]
    return out


def _child(tree: Path, kind: str, paths: list[Path]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env["PYTHONPATH"] = str(tree)
    meter = CpuMeter({})
    done = subprocess.run(
        [sys.executable, str(CHILD), kind, *map(str, paths)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    cpu = meter.stop()
    if done.returncode != 0:
        raise BenchError(f"the {kind} child on {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["cpu"] = cpu
    result["tree"] = str(tree)
    return result


def _per_page(pages: list[dict[str, Any]], key: str) -> float:
    return sum(float(p.get(key, 0.0)) for p in pages) / max(len(pages), 1)


def _stage(pages: list[dict[str, Any]], stage: str) -> float:
    return sum(float(p["stages"].get(stage, 0.0)) for p in pages) / max(len(pages), 1)


def _rows(label: str, run: dict[str, Any]) -> list[list[Any]]:
    relay, models = run["relay"], run["models"]
    row = [
        f"{label} {run['kind']}",
        *(round(_stage(relay, s), 3) for s in STAGES),
        round(_per_page(relay, "cpu_s"), 3),
        round(_per_page(relay, "onnx_s"), 3),
        round(_per_page(relay, "wall_s"), 2),
        run["relay_peak_rss_mib"],
        run["cpu"]["foreign_cores"],
    ]
    rows = [row]
    if models:
        rows.append(
            [
                f"  models alone {run['kind']}",
                "",
                round(_stage(models, "detection"), 3),
                round(_stage(models, "recognition"), 3),
                round(_stage(models, "structure"), 3),
                "",
                round(_per_page(models, "cpu_s"), 3),
                round(_per_page(models, "onnx_s"), 3),
                "",
                "",
                "",
            ]
        )
    return rows


def run(
    quick: bool = False,
    profile: bool = False,
    limit: int | None = None,
    against: str | None = None,
    rounds: int | None = None,
    kinds: list[str] | None = None,
) -> Outcome:
    outcome = Outcome()
    per_kind = limit or (3 if quick else 12)
    base = Path(against).resolve() if against else None
    if base is not None and not (base / "relay" / "extract").is_dir():
        raise BenchError(f"{base} is no checkout of relay (no relay/extract)")
    n_rounds = rounds or (2 if base is not None else 1)
    wanted = [k for k in (kinds or KINDS) if k in KINDS]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="relay-pages-") as tmp:
        sample = _sample(Path(tmp), per_kind)
        for r in range(n_rounds):
            for kind in wanted:
                trees = [("head", ROOT)] + ([("base", base)] if base is not None else [])
                if r % 2:
                    trees.reverse()
                for label, tree in trees:
                    progress(NAME, f"round {r + 1}: {kind} on {label} ({len(sample[kind])} pages)")
                    result = _child(tree, kind, sample[kind])
                    result.update(label=label, round=r + 1)
                    runs.append(result)
    header = ["run", *STAGES, "cpu s/page", "onnx s", "wall s", "peak MiB", "foreign"]
    rows: list[list[Any]] = []
    for result in runs:
        rows += _rows(f"r{result['round']} {result['label']}", result)
    outcome.tables.append(
        table(
            f"CPU seconds per page by stage ({per_kind} pages a kind, one thread, models warm)",
            header,
            rows,
        )
    )
    data: dict[str, Any] = {"pages_per_kind": per_kind, "rounds": n_rounds, "runs": runs}
    if base is not None:
        pairs = _pairs(runs, wanted, n_rounds)
        data["against"] = str(base)
        data["pairs"] = pairs
        outcome.tables.append(
            table(
                f"head / {base.name}: relay's CPU per page, same run, alternating",
                ["kind", "ratio by round", "median", "models alone (noise)", "head s", "base s"],
                [
                    [
                        kind,
                        " ".join(f"{x:.3f}" for x in p["ratios"]),
                        round(p["median"], 3),
                        " ".join(f"{x:.3f}" for x in p["model_ratios"]),
                        round(p["head_s"], 3),
                        round(p["base_s"], 3),
                    ]
                    for kind, p in pairs.items()
                ],
            )
        )
        for kind in ("scans", "images"):
            if kind in pairs:
                value = pairs[kind]["median"]
                outcome.goal(
                    f"{kind}: CPU/page vs {base.name}",
                    round(value, 3),
                    "x",
                    f"<= {GOAL_RATIO:.3f}",
                    value <= GOAL_RATIO,
                )
    outcome.data = data
    return outcome


def _pairs(runs: list[dict[str, Any]], kinds: list[str], rounds: int) -> dict[str, Any]:
    pairs: dict[str, Any] = {}
    for kind in kinds:
        ratios, model_ratios, heads, bases = [], [], [], []
        for r in range(1, rounds + 1):
            found = {x["label"]: x for x in runs if x["kind"] == kind and x["round"] == r}
            if set(found) != {"head", "base"}:
                continue
            head, base = found["head"], found["base"]
            h, b = _per_page(head["relay"], "cpu_s"), _per_page(base["relay"], "cpu_s")
            heads.append(h)
            bases.append(b)
            ratios.append(h / b if b else float("nan"))
            if head["models"] and base["models"]:
                hm, bm = _per_page(head["models"], "cpu_s"), _per_page(base["models"], "cpu_s")
                model_ratios.append(hm / bm if bm else float("nan"))
        if ratios:
            pairs[kind] = {
                "ratios": ratios,
                "median": statistics.median(ratios),
                "model_ratios": model_ratios,
                "head_s": statistics.median(heads),
                "base_s": statistics.median(bases),
            }
    return pairs
