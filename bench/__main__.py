"""``python -m bench [NAME ...] [--quick] [--profile]``: run relay's benchmarks.

Each benchmark starts its own private Redis and relay processes, runs relay and its baseline
side by side, prints its tables and writes ``bench/results/NAME.json`` (``NAME.quick.json``
with ``--quick``). Goals are reported, never asserted: the exit status is 0 unless a
benchmark could not run to the end.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from collections.abc import Sequence

from bench._common import Goal, Outcome, fmt, table, write_result

BENCHMARKS = (
    "processing",
    "lag",
    "feed",
    "drain",
    "status",
    "http_bounds",
    "memory",
    "ocr",
    "extract_overhead",
    "retention",
    "hostile",
    "recover",
    "quickstart",
    "redis_cost",
    "heavy",
    "cluster",
    "exports",
    "document_events",
)
# Valid names that the default run (no NAME) leaves out: ``tables`` makes venvs for its peers
# (from the package index on first use) and takes tens of minutes over its three corpora.
# ``pages`` reads real pages by OCR for minutes (and twice over with --against).
ON_DEMAND = ("tables", "pages")


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"default: all of {', '.join(BENCHMARKS)}"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run (< 60 s)")
    parser.add_argument("--profile", action="store_true", help="sample relay processes with py-spy")
    tables = parser.add_argument_group("tables")
    tables.add_argument("--corpus", help="tables: pdf, images, scans (comma-separated; all)")
    tables.add_argument("--engines", help="tables: relay, camelot-stream... (comma-separated)")
    tables.add_argument(
        "--limit", type=int, help="tables: the first N documents of each corpus; pages: N a kind"
    )
    pages = parser.add_argument_group("pages")
    pages.add_argument("--against", help="pages: another checkout of relay, measured alternately")
    pages.add_argument("--rounds", type=int, help="pages: head/--against pairs (default 2)")
    pages.add_argument("--kinds", help="pages: scans, images, pdf (comma-separated; all)")
    args = parser.parse_args(argv)
    names = args.names or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS + ON_DEMAND]
    if unknown:
        parser.error(
            f"unknown benchmark(s) {', '.join(unknown)}; choose from {BENCHMARKS + ON_DEMAND}"
        )
    options = {
        "corpus": _split(args.corpus),
        "engines": _split(args.engines),
        "limit": args.limit,
    }
    page_options = {
        "limit": args.limit,
        "against": args.against,
        "rounds": args.rounds,
        "kinds": _split(args.kinds),
    }
    table_only = args.corpus is not None or args.engines is not None
    if "tables" not in names and (table_only or (args.limit is not None and "pages" not in names)):
        parser.error("--corpus and --engines apply to tables only, --limit to tables and pages")
    if "pages" not in names and any(
        page_options[k] is not None for k in ("against", "rounds", "kinds")
    ):
        parser.error("--against, --rounds and --kinds apply to the pages benchmark only")
    goals: list[tuple[str, Goal]] = []
    failed: list[str] = []
    started = time.monotonic()
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        t0 = time.monotonic()
        try:
            extra = options if name == "tables" else page_options if name == "pages" else {}
            outcome: Outcome = module.run(quick=args.quick, profile=args.profile, **extra)
        except Exception:
            traceback.print_exc()
            print(f"[{name}] FAILED", flush=True)
            failed.append(name)
            continue
        elapsed = time.monotonic() - t0
        outcome.data["goals"] = [g.__dict__ for g in outcome.goals]
        outcome.data["elapsed_s"] = round(elapsed, 1)
        # A partial tables run (--limit) is named like a quick one: it never replaces a full run.
        partial = name == "tables" and bool(args.limit)
        path = write_result(name, args.quick or partial, outcome.data)
        print()
        for text in outcome.tables:
            print(text, end="\n\n")
        print(f"[{name}] {elapsed:.1f} s; results in {path}\n", flush=True)
        goals += [(name, g) for g in outcome.goals]
    if goals:
        print(
            table(
                "goals (reported, not asserted)" + (" -- quick run, sizes too small" * args.quick),
                ["benchmark", "measure", "value", "goal", "met"],
                [
                    [n, g.what, f"{fmt(g.value)} {g.unit}", g.target, "yes" if g.met else "NO"]
                    for n, g in goals
                ],
            )
        )
    print(f"\ntotal {time.monotonic() - started:.1f} s", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
