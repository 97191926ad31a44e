"""End to end: hostile documents on a real worker process, which fails them and goes on.

One worker (``RELAY_EXTRACTOR=tests.support.hostile_extractors:hostile``, which reads ordinary
documents with the default extractor) takes the 71 KB CSV that would become 340 MB of rows,
a 1 MB PDF that inflates to 1 GiB, and a document that never finishes; then an ordinary one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from relay.devtools.processes import Stack
from relay.devtools.sample_documents import pdf_bomb, wide_csv
from tests.e2e.client import Api
from tests.support.helpers import wait_until

CSV = b"sku,qty\nA-1,2\nB-7,5\n"
MIB = 1 << 20


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:  # the process ended while we looked
        return found
    for task in tasks:
        try:  # a thread (a document's, a lease keeper) may end while we look
            children = (task / "children").read_text().split()
        except FileNotFoundError:
            continue
        for child in children:
            found += [int(child), *_descendants(int(child))]
    return found


def _peaks_mib(pids: list[int]) -> dict[int, float]:
    """VmHWM of each of ``pids`` still there (a background document's child is closed
    right after its document is stored)."""
    peaks: dict[int, float] = {}
    for pid in pids:
        try:
            peaks[pid] = _status_kib(pid, "VmHWM") / 1024
        except FileNotFoundError:
            continue
    return peaks


def _documents(api: Api, batch: str) -> dict[str, dict[str, Any]]:
    r = api.http.get(f"/batches/{batch}/results")
    assert r.status_code == 200, r.text
    return {d["filename"]: d for d in r.json()["documents"]}


def _done(api: Api, batch: str) -> bool:
    return bool(api.batch(batch)["all_done"])


def test_hostile_documents_fail_with_their_codes_and_the_worker_goes_on(stack: Stack) -> None:
    stack.env["RELAY_EXTRACTOR"] = "tests.support.hostile_extractors:hostile"
    # The bomb takes ~1-2 s to hit the memory limit below on a quiet machine, over 8 s with
    # another `make test` beside this one: the timeout leaves it room (slow.csv waits it out).
    stack.env["RELAY_EXTRACT_TIMEOUT"] = "30"
    stack.env["RELAY_EXTRACT_WALL_FACTOR"] = "1"  # slow.csv sleeps: cut at 30 s of wall clock
    stack.env["RELAY_EXTRACT_MEMORY"] = str(512 << 20)  # CSV and PDF need far less than 1 GiB
    stack.api()
    worker = stack.worker()
    stack.detector()
    api = Api(stack.api_url, stack.create_key("acme"))
    api.upload("h1", wide_csv(), "wide.csv")
    api.upload("h1", pdf_bomb(), "bomb.pdf")
    api.upload("h1", b"slow\nsku\nA\n", "slow.csv")
    api.upload("h1", CSV, "fine.csv")
    api.process("h1")
    wait_until(lambda: _done(api, "h1"), 180, message="the hostile batch never finished")
    docs = _documents(api, "h1")
    codes = {name: (d["processing_error"] or {}).get("code") for name, d in docs.items()}
    assert codes == {
        "wide.csv": "result_too_large",
        "bomb.pdf": "extraction_memory",
        "slow.csv": "extraction_timeout",
        "fine.csv": None,
    }, docs
    assert docs["fine.csv"]["line_items"] == [
        {"sku": "A-1", "qty": "2"},
        {"sku": "B-7", "qty": "5"},
    ]
    assert docs["wide.csv"]["line_items"] is None

    # The worker survived within its budget, and so did its extraction processes.
    assert worker.alive
    worker_peak = _status_kib(worker.popen.pid, "VmHWM") / 1024
    children = _peaks_mib(_descendants(worker.popen.pid))
    print(f"peak RSS: worker {worker_peak:.0f} MiB; its children (MiB) {children}")
    assert worker_peak < 400
    assert all(peak < 512 for peak in children.values()), children

    # ...and goes on with the next batch.
    api.upload("h2", CSV, "next.csv")
    api.process("h2")
    wait_until(lambda: _done(api, "h2"), 20, message="the worker did not go on")
    assert _documents(api, "h2")["next.csv"]["status"] == "succeeded"
    assert worker.alive
    api.close()


def test_a_lone_surrogate_in_a_document_never_breaks_its_batch_results(stack: Stack) -> None:
    stack.api()
    stack.worker()
    stack.detector()
    api = Api(stack.api_url, stack.create_key("acme"))
    content = b'[{"sku": "A\\ud800", "name": "caf\\u00e9 \\ud83d\\ude00"}]'
    api.upload("s1", content, "items.json")
    api.process("s1")
    wait_until(lambda: _done(api, "s1"), 30, message="never processed")
    r = api.http.get("/batches/s1/results")
    assert r.status_code == 200, r.text
    (doc,) = json.loads(r.content.decode("utf-8"))["documents"]
    assert doc["line_items"] == [{"sku": "A\ufffd", "name": "café 😀"}]
    api.close()
