"""What README.md tells a newcomer about results holds: the table of ``processing_error``
codes (in docs/extraction.md) is exactly the codes relay produces, the batch status example
is what the store answers, and ``fields`` and value types behave as described."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.extract import extract
from relay.extract.errors import CODES
from relay.state.model import Status
from relay.state.store import BatchRef
from tests.support.helpers import closed_after
from tests.test_store import Harness

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"**{title}**")
    return README[start : README.index("\n## ", start)]


def test_the_readme_table_of_codes_is_the_codes_in_code() -> None:
    text = (ROOT / "docs" / "extraction.md").read_text()
    start = text.index("\n## Why a document failed")
    section = text[start : text.index("\n## ", start + 1)]
    rows = re.findall(r"^\| `([a-z_]+)` \| (.+) \|$", section, re.M)
    expected = "\n".join(f"| `{code}` | {why} |" for code, why in CODES.items())
    assert rows == list(CODES.items()), f"docs/extraction.md's table should read:\n{expected}"


def _codes_raised_in_source() -> set[str]:
    """The codes relay's code fails documents with, found where it names them."""
    patterns = [
        r'ExtractionError\(\s*"([a-z_]+)"',  # raised by the default extractor and the loader
        r'_failure\(\s*"([a-z_]+)"',  # the sandbox's replies
        r'return None, \(\s*"([a-z_]+)"',  # the sandbox's timeouts and limits
        r'return "([a-z_]+)", f"',  # the sandbox's view of a dead child
        r"'error_code', '([a-z_]+)'",  # the Lua script of a lost worker
        r'None = \(\s*"([a-z_]+)",',  # the worker's own: the bytes gone or unreachable
    ]
    found: set[str] = set()
    sources = [
        *(ROOT / "relay" / "extract").rglob("*.py"),
        ROOT / "relay" / "runtime" / "processing.py",
        ROOT / "relay" / "runtime" / "sandbox.py",
    ]
    for path in [*sources, *(ROOT / "relay" / "state" / "lua").glob("*.lua")]:
        text = path.read_text()
        for pattern in patterns:
            found.update(re.findall(pattern, text))
    return found


def test_every_code_relay_produces_is_listed_and_every_listed_code_is_produced() -> None:
    assert _codes_raised_in_source() == set(CODES)


@pytest.fixture
def h(redis_url: str) -> Iterator[Harness]:
    yield from closed_after(Harness(redis_url))


def test_four_succeeded_and_six_failed_make_a_succeeded_batch(h: Harness) -> None:
    assert "4 succeeded\nand 6 failed documents is `succeeded`" in README
    ref = BatchRef("acme", "mixed")
    docs = [h.upload(ref) for _ in range(10)]
    for i, doc in enumerate(docs):
        claim = h.claim(ref, doc.id, f"t{i}")
        assert claim is not None
        if i < 4:
            h.worker.finish(claim, line_items=[{"a": "1"}], error=None)
        else:
            h.worker.finish(claim, line_items=None, error=("invalid_csv", "x"))
    batch = h.batch(ref)
    assert batch.status is Status.SUCCEEDED and batch.all_done
    assert (batch.counts[Status.SUCCEEDED], batch.counts[Status.FAILED]) == (4, 6)

    failed = BatchRef("acme", "all-failed")
    for i, doc in enumerate([h.upload(failed) for _ in range(10)]):
        claim = h.claim(failed, doc.id, f"f{i}")
        assert claim is not None
        h.worker.finish(claim, line_items=None, error=("invalid_csv", "x"))
    assert h.batch(failed).status is Status.FAILED


def test_fields_keep_exactly_those_keys_and_fill_missing_with_null() -> None:
    section = _section("Values and `fields`.")
    assert '`{"sku": "A-100", "total": null}`' in section
    csv = b"sku,qty,unit_price\nA-100,2,9.90\nB-200,1,24.00\n"
    rows = extract(csv, filename="items.csv", content_type="text/csv", fields=["sku", "total"])
    assert rows == [{"sku": "A-100", "total": None}, {"sku": "B-200", "total": None}]
    assert [list(r) for r in rows] == [["sku", "total"]] * 2  # that order, nothing else

    reordered = extract(csv, filename="items.csv", content_type="text/csv", fields=["qty", "sku"])
    assert list(reordered[0].items()) == [("qty", "2"), ("sku", "A-100")]


def test_csv_values_are_strings_and_json_values_keep_their_types() -> None:
    section = _section("Values and `fields`.")
    assert "CSV, TSV, PDF, image and office values are strings" in section
    assert "JSON values keep their JSON types" in section
    csv = extract(
        b"sku,qty,code\nA-1,2,007\n", filename="a.csv", content_type="text/csv", fields=[]
    )
    assert csv == [{"sku": "A-1", "qty": "2", "code": "007"}]
    doc = [{"sku": "A-1", "qty": 2, "price": 9.9, "gift": True, "note": None, "meta": {"k": [1]}}]
    rows = extract(
        json.dumps(doc).encode(), filename="a.json", content_type="application/json", fields=[]
    )
    assert rows == doc
    assert type(rows[0]["qty"]) is int and type(rows[0]["price"]) is float
