"""Page ranges (``relay.extract.pages``): the grammar and its published pattern agree, the
canonical form, which pages a range selects; and the default extractor reads only those
pages of a PDF or TIFF (in process, and in the real extraction child), keeping their
numbers."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from relay.devtools.drawn_tables import draw_table, encode
from relay.devtools.sample_documents import HEADER, pdf, table_ops
from relay.extract import ExtractionError, extract_document
from relay.extract.bounds import ExtractLimits, applied
from relay.extract.pages import InvalidPages, PageRanges, pages_pattern, parse
from relay.runtime.sandbox import ExtractorHost, SandboxConfig


def page_tables(pages: int) -> bytes:
    """A PDF of ``pages`` pages, page N holding a table whose one row says ``P<N>``."""
    return pdf([table_ops([HEADER, [f"P{n}", f"part {n}", str(n)]]) for n in range(1, pages + 1)])


# --- the grammar ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("1", "1"),
        ("1-3,12", "1-3,12"),
        ("12, 2-3,1", "1-3,12"),  # any order, spaces around the commas
        (" 1 - 3 ", "1-3"),
        ("1-3,2-5", "1-5"),  # overlapping ranges merge
        ("5,6,7", "5-7"),  # so do adjacent pages
        ("4-4", "4"),
        ("999999", "999999"),
    ],
)
def test_a_range_has_one_canonical_form(text: str, canonical: str) -> None:
    assert parse(text).text == canonical
    assert PageRanges.of(canonical) == parse(text)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "got an empty string"),
        ("  ", "got an empty string"),
        ("0", "page numbers start at 1"),
        ("0-3", "page numbers start at 1"),
        ("3-1", "'3-1' ends before it starts"),
        ("a", "'a' is not a page number or a range like 1-3"),
        ("1-", "'1-' is not a page number"),
        ("-3", "'-3' is not a page number"),
        ("1.5", "'1.5' is not a page number"),
        ("1 2", "'1 2' is not a page number"),
        ("1,", "an empty item"),
        ("1,,2", "an empty item"),
        ("01", "'01' has a leading zero"),
        ("1234567", "more than 6 digits"),
        ("1\t", "is not a page number"),
        (",".join(str(n) for n in range(1, 102)), "has 101 ranges; at most 100 are allowed"),
    ],
)
def test_a_malformed_range_is_refused_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(InvalidPages) as caught:
        parse(text)
    assert says in str(caught.value)
    assert str(caught.value).startswith("pages")


def _accepted(text: str, max_ranges: int) -> bool:
    try:
        parse(text, max_ranges=max_ranges)
    except InvalidPages:
        return False
    return True


def _reversed(text: str) -> bool:
    return any(int(a) > int(b) for a, b in re.findall(r"([0-9]+) *- *([0-9]+)", text))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789-, a", max_size=24))
def test_the_published_pattern_is_the_grammar(text: str) -> None:
    """What the OpenAPI document's pattern admits is what the server reads, but for the one
    rule a pattern cannot state: a range must not end before it starts."""
    matches = re.fullmatch(pages_pattern(4), text) is not None
    assert _accepted(text, 4) == (matches and not _reversed(text)), text


@settings(max_examples=200, deadline=None)
@given(st.from_regex(pages_pattern(4), fullmatch=True))
def test_every_string_the_pattern_generates_is_read_unless_reversed(text: str) -> None:
    assert _accepted(text, 4) == (not _reversed(text)), text


def test_a_range_selects_the_pages_a_document_has() -> None:
    ranges = parse("2-3,10-20")
    assert ranges.select(15) == [2, 3, 10, 11, 12, 13, 14, 15]
    assert ranges.select(3) == [2, 3]
    assert ranges.select(1) == []
    assert 12 in ranges and 4 not in ranges
    assert ranges.out_of_range(1) == (
        "the document has 1 page; the pages asked for (2-3,10-20) are past its end"
    )


# --- the default extractor -------------------------------------------------------------------


def _document(content: bytes, filename: str, pages: str | None, **kw: Any) -> Any:
    selected = parse(pages) if pages is not None else None
    return extract_document(
        content, filename=filename, content_type="", fields=[], pages=selected, **kw
    )


def test_only_the_asked_pages_of_a_pdf_are_read_with_their_own_numbers() -> None:
    content = page_tables(4)
    every = _document(content, "four.pdf", None)
    assert [t.page for t in every.tables] == [1, 2, 3, 4]
    declared: list[int] = []
    with applied(ExtractLimits(on_pages=declared.append)):
        some = _document(content, "four.pdf", "4, 2")
    assert [t.page for t in some.tables] == [2, 4]
    assert [t.rows[1][0] for t in some.tables] == ["P2", "P4"]
    # The first table asked for gives line_items (page 2's, not page 1's).
    assert some.line_items == [{"SKU": "P2", "Description": "part 2", "Qty": "2"}]
    # The deadline grows with the pages read, not with the document's.
    assert declared == [2]


def test_pages_past_the_end_are_left_out_and_none_at_all_is_pages_out_of_range() -> None:
    content = page_tables(3)
    assert [t.page for t in _document(content, "three.pdf", "3-40").tables] == [3]
    with pytest.raises(ExtractionError) as caught:
        _document(content, "three.pdf", "4-9")
    assert caught.value.code == "pages_out_of_range"
    assert caught.value.message == (
        "the document has 3 pages; the pages asked for (4-9) are past its end"
    )


def test_the_range_given_to_the_sandbox_reaches_the_extractor() -> None:
    """Outside an explicit ``pages``, the extractor reads the range from its limits (how the
    extraction child hands it over)."""
    with applied(ExtractLimits(pages=parse("3"))):
        found = extract_document(page_tables(3), filename="t.pdf", content_type="", fields=[])
    assert [t.page for t in found.tables] == [3]


def test_documents_without_pages_are_read_whole() -> None:
    csv = b"sku,qty\nA-1,2\n"
    assert _document(csv, "a.csv", "2-3").line_items == [{"sku": "A-1", "qty": "2"}]


def test_only_the_asked_frames_of_a_tiff_are_decoded() -> None:
    """A frame not asked for is not even checked against the pixel bound: it is not read."""
    page = draw_table()
    big = Image.new("RGB", (page.width * 3, page.height), "white")
    content = encode(page, "TIFF", save_all=True, append_images=[big, page])
    bound = page.width * page.height
    with pytest.raises(ExtractionError) as caught:
        _document(content, "scan.tiff", None, max_image_pixels=bound)
    assert caught.value.code == "image_too_large"
    found = _document(content, "scan.tiff", "3", max_image_pixels=bound)
    assert [t.page for t in found.tables] == [3]
    assert found.tables[0].rows[1][0] == "apple"


def test_a_single_image_is_page_one() -> None:
    content = encode(draw_table(), "PNG")
    with pytest.raises(ExtractionError) as caught:
        _document(content, "t.png", "2")
    assert caught.value.code == "pages_out_of_range"
    assert [t.page for t in _document(content, "t.png", "1-2").tables] == [1]


def test_the_extraction_child_reads_only_the_pages_it_is_sent() -> None:
    host = ExtractorHost(
        SandboxConfig(
            extractor="relay.extract:extract",
            timeout=20.0,
            memory=512 << 20,
            max_result_bytes=16 << 20,
            max_depth=64,
        )
    )
    try:
        content = page_tables(3)
        data, error = host.run(content, filename="t.pdf", content_type="", fields=[], pages="1,3")
        assert error is None and data is not None
        assert [t["page"] for t in json.loads(data)["tables"]] == [1, 3]
        # The next document of the same child, without pages, is read whole.
        data, error = host.run(content, filename="t.pdf", content_type="", fields=[])
        assert error is None and data is not None
        assert [t["page"] for t in json.loads(data)["tables"]] == [1, 2, 3]
        _, error = host.run(content, filename="t.pdf", content_type="", fields=[], pages="7")
        assert error is not None and error[0] == "pages_out_of_range"
    finally:
        host.close()
