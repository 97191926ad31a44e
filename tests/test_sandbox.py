"""Bounded extraction (``relay.runtime.sandbox``): real child processes, real limits.

Hostile plug-ins live in ``tests/support/hostile_extractors.py``; hostile documents are built by
``relay/devtools/sample_documents.py``. Each test checks the failure *and* that the same host then extracts
an ordinary document: one bad document never costs the next one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from relay.devtools.sample_documents import blank_pages_pdf, pdf_bomb, wide_csv
from relay.extract import extract_document
from relay.extract.errors import ExtractorConfigError
from relay.runtime.sandbox import ExtractorHost, Outcome, SandboxConfig

MIB = 1 << 20
CSV = b"sku,qty\nA-1,2\nB-7,5\n"
HostFactory = Callable[..., ExtractorHost]


def _config(**overrides: Any) -> SandboxConfig:
    values: dict[str, Any] = {
        "extractor": "relay.extract:extract",
        "timeout": 20.0,
        "memory": 512 * MIB,
        "max_result_bytes": 16 * MIB,
        "max_depth": 64,
    }
    values.update(overrides)
    return SandboxConfig(**values)


@pytest.fixture
def host_factory() -> Iterator[HostFactory]:
    hosts: list[ExtractorHost] = []

    def make(**overrides: Any) -> ExtractorHost:
        host = ExtractorHost(_config(**overrides))
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        host.close()


def _run(
    host: ExtractorHost, content: bytes, filename: str = "doc.csv", fields: list[str] | None = None
) -> Outcome:
    return host.run(content, filename=filename, content_type="", fields=fields or [])


def _still_works(host: ExtractorHost) -> None:
    data, error = _run(host, CSV)
    assert error is None and data is not None
    assert json.loads(data)["line_items"] == [
        {"sku": "A-1", "qty": "2"},
        {"sku": "B-7", "qty": "5"},
    ]


def _peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_rows_come_back_as_json_identical_to_an_in_process_run(
    host_factory: HostFactory,
) -> None:
    host = host_factory()
    content = b"sku;desc;qty\nA;Caf\xc3\xa9 \xf0\x9f\x98\x80;1\nB;x;2\n"
    data, error = _run(host, content, fields=["qty", "desc", "missing"])
    assert error is None and data is not None
    expected = extract_document(
        content, filename="doc.csv", content_type="", fields=["qty", "desc", "missing"]
    )
    assert json.loads(data) == {
        "line_items": expected.line_items,
        "tables": [table.to_json() for table in expected.tables],
    }
    assert json.loads(data)["tables"] == [
        {
            "page": 1,
            "rows": [["qty", "desc", "missing"], ["1", "Café 😀", None], ["2", "x", None]],
            "confidence": None,
        }
    ]
    assert "😀".encode() in data, "valid non-ASCII text is stored as UTF-8, not escaped"


def test_a_lone_surrogate_becomes_u_fffd_and_valid_text_stays_intact(
    host_factory: HostFactory,
) -> None:
    host = host_factory()
    content = b'[{"bad": "x\\ud800y", "\\udfff": 1, "good": "caf\\u00e9 \\ud83d\\ude00"}]'
    data, error = _run(host, content, "doc.json")
    assert error is None and data is not None
    assert json.loads(data.decode("utf-8"))["line_items"] == [
        {"bad": "x\ufffdy", "\ufffd": 1, "good": "café \U0001f600"}
    ]


def test_the_wide_csv_fails_result_too_large_early_and_small(host_factory: HostFactory) -> None:
    host = host_factory()
    content = wide_csv()
    assert len(content) < 72_000
    started = time.monotonic()
    data, error = _run(host, content)
    assert data is None and error is not None and error[0] == "result_too_large"
    assert time.monotonic() - started < 5
    assert host.pid is not None
    # Stopped at the bound (16 MiB of JSON), not after building 340 MB of rows.
    assert _peak_rss_mib(host.pid) < 200
    _still_works(host)


def test_a_plugin_returning_more_than_the_bound_is_result_too_large(
    host_factory: HostFactory,
) -> None:
    host = host_factory(
        extractor="tests.support.hostile_extractors:hostile", max_result_bytes=8 * MIB
    )
    data, error = _run(host, b"huge\n")
    assert data is None and error is not None and error[0] == "result_too_large"
    assert "8388608 bytes" in error[1]
    _still_works(host)


def test_result_bound_is_exact_on_the_serialised_size(host_factory: HostFactory) -> None:
    rows = b'[{"v": "' + b"x" * 1000 + b'"}]'
    exact = len(
        json.dumps(
            {
                "line_items": [{"v": "x" * 1000}],
                "tables": [{"page": 1, "rows": [["v"], ["x" * 1000]], "confidence": None}],
            },
            separators=(",", ":"),
        )
    )
    fits = host_factory(max_result_bytes=exact)
    data, error = _run(fits, rows, "doc.json")
    assert error is None and data is not None and len(data) == exact
    too_small = host_factory(max_result_bytes=exact - 1)
    assert _run(too_small, rows, "doc.json")[1] == (
        "result_too_large",
        f"the extracted result exceeds {exact - 1} bytes of JSON (line_items and tables)",
    )


def test_json_nested_past_the_depth_bound_is_refused(host_factory: HostFactory) -> None:
    host = host_factory(max_depth=8)
    shallow = b'[{"a": [[[[1]]]]}]'  # 6 levels
    data, error = _run(host, shallow, "doc.json")
    assert (
        error is None and data is not None and json.loads(data)["line_items"] == [{"a": [[[[1]]]]}]
    )
    deep = b'[{"a": ' + b"[" * 20 + b"1" + b"]" * 20 + b"}]"
    data, error = _run(host, deep, "doc.json")
    assert data is None and error == (
        "too_deeply_nested",
        "the JSON document nests deeper than 8 levels",
    )
    _still_works(host)


def test_a_pdf_decompression_bomb_fails_on_memory_and_the_host_goes_on(
    host_factory: HostFactory,
) -> None:
    host = host_factory(timeout=30.0)
    bomb = pdf_bomb()
    assert len(bomb) < 1_200_000  # ~1 MB that inflates to 1 GiB
    data, error = _run(host, bomb, "bomb.pdf")
    assert data is None and error is not None
    assert error[0] == "extraction_memory", error
    _still_works(host)


def test_a_computing_extractor_is_cut_at_its_cpu_budget_not_by_the_wall_clock(
    host_factory: HostFactory,
) -> None:
    # 1 s of CPU time, a backstop far away (30 s): the budget is what cuts it.
    host = host_factory(
        extractor="tests.support.hostile_extractors:burning", timeout=1.0, wall_factor=30.0
    )
    _still_works(host)
    pid = host.pid
    assert pid is not None
    # Stopped for 1.5 s mid-document (as a loaded machine holds it off the CPU): wall-clock
    # time passes, its CPU time does not, so it is not cut before it has used its 1 s.
    threading.Timer(0.2, os.kill, (pid, signal.SIGSTOP)).start()
    threading.Timer(1.7, os.kill, (pid, signal.SIGCONT)).start()
    elapsed = _timed_out(host, b"burn\nsku\nA\n", "the extraction used more than 1 s of CPU time")
    # 1 s of CPU plus 1.5 s stopped, less the resolution of the CPU clock it is read from
    # (/proc counts in ticks, and the budget is the difference of two readings).
    assert 2.5 - 2 / os.sysconf("SC_CLK_TCK") <= elapsed < 30
    _replaced(host, pid)


def test_a_waiting_extractor_is_cut_by_the_wall_clock_backstop(
    host_factory: HostFactory,
) -> None:
    # It sleeps (no CPU time): the backstop, 2 x its 1 s budget, ends it.
    host = host_factory(
        extractor="tests.support.hostile_extractors:burning", timeout=1.0, wall_factor=2.0
    )
    _still_works(host)
    first_pid = host.pid
    assert first_pid is not None
    elapsed = _timed_out(
        host,
        b"slow\nsku\nA\n",
        "the extraction took longer than 2 s of wall-clock time (2 x its 1 s CPU budget)",
    )
    assert 2.0 <= elapsed < 5.0
    _replaced(host, first_pid)


def _timed_out(host: ExtractorHost, content: bytes, message: str) -> float:
    """Run ``content``, which must end in ``extraction_timeout`` saying ``message``; the
    seconds it took."""
    started = time.monotonic()
    data, error = _run(host, content)
    elapsed = time.monotonic() - started
    assert data is None and error == ("extraction_timeout", message)
    return elapsed


def _replaced(host: ExtractorHost, pid: int) -> None:
    """The cut child ``pid`` is gone (or a zombie) and a new one serves the next document."""
    assert _is_zombie_or_gone(pid)
    _still_works(host)
    assert host.pid != pid


def _is_zombie_or_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return any(line.startswith("State:") and "Z" in line for line in status)
    except FileNotFoundError:
        return True


def test_a_memory_hog_fails_extraction_memory(host_factory: HostFactory) -> None:
    host = host_factory(extractor="tests.support.hostile_extractors:hostile", memory=256 * MIB)
    data, error = _run(host, b"hog\n")
    assert data is None and error is not None and error[0] == "extraction_memory"
    _still_works(host)


def test_a_crashing_extractor_fails_extraction_crashed(host_factory: HostFactory) -> None:
    host = host_factory(extractor="tests.support.hostile_extractors:hostile")
    data, error = _run(host, b"crash\n")
    assert data is None and error == (
        "extraction_crashed",
        "the extraction process died (signal SIGSEGV)",
    )
    _still_works(host)


def test_an_extractor_that_cannot_be_loaded_is_a_config_error(host_factory: HostFactory) -> None:
    host = host_factory(extractor="tests.no_such_module:extract")
    with pytest.raises(
        ExtractorConfigError, match=re.escape("no module named 'tests.no_such_module'")
    ):
        _run(host, CSV)


def test_a_5000_page_pdf_is_too_many_pages_in_seconds_and_the_bound_is_the_settings(
    host_factory: HostFactory,
) -> None:
    host = host_factory()
    started = time.monotonic()
    data, error = _run(host, blank_pages_pdf(5_000), "blank.pdf")
    assert data is None and error is not None and error[0] == "too_many_pages"
    assert time.monotonic() - started < 10  # ~1 s on this busy machine
    _still_works(host)
    # RELAY_MAX_PAGES reaches the child: 4 pages past a bound of 3, 3 within it.
    strict = host_factory(max_pages=3, memory=1024 * MIB)  # blank pages go to OCR
    assert _run(strict, blank_pages_pdf(4), "blank.pdf")[1] == (
        "too_many_pages",
        "the document has more than the 3 pages allowed",
    )
    assert _run(strict, blank_pages_pdf(3), "blank.pdf")[1] == (
        "no_table_found",
        "no table found in the PDF",
    )


def test_the_deadline_grows_with_the_pages_and_still_bounds_a_hostile_document(
    host_factory: HostFactory,
) -> None:
    # RELAY_EXTRACT_TIMEOUT 0.3 s + 0.5 s a page of CPU time, at most 3 pages; the wall-clock
    # backstop far enough (x 20) that a loaded machine does not reach it first.
    host = host_factory(
        extractor="tests.support.hostile_extractors:paged",
        timeout=0.3,
        page_seconds=0.5,
        max_pages=3,
        wall_factor=20.0,
    )
    # Three pages of 0.2 s: longer than the flat 0.3 s, within 0.3 + 3 x 0.5 s.
    started = time.monotonic()
    data, error = _run(host, b"pages=3 seconds=0.2\nsku\nA-1\n")
    assert error is None and data is not None, error
    assert time.monotonic() - started > 0.6
    assert json.loads(data)["line_items"] == [{"sku": "A-1"}]
    # Two pages that never end: cut at 0.3 + 2 x 0.5 s.
    elapsed = _timed_out(
        host,
        b"pages=2 seconds=3600\nsku\nA-1\n",
        "the extraction used more than 1.3 s of CPU time (0.3 s and 0.5 s for each of its 2 pages)",
    )
    assert 1.3 <= elapsed < 20
    # A document claiming more pages than RELAY_MAX_PAGES gets no more than 3 pages' time.
    started = time.monotonic()
    data, error = _run(host, b"pages=1000000 seconds=3600\nsku\nA-1\n")
    assert data is None and error is not None and error[0] == "extraction_timeout"
    assert "1.8 s of CPU time" in error[1], error
    assert 1.8 <= time.monotonic() - started < 20
    _still_works(host)
