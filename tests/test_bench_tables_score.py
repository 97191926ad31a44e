"""The table benchmark's scorer (``bench.tables.score``, the ICDAR 2013 adjacency relations)
and its ground-truth readers (``bench.tables.corpora``), on small hand-made grids whose
precision, recall and F1 are worked out by hand."""

from __future__ import annotations

import io
import math
from collections import Counter
from pathlib import Path

import pytest

from bench.tables.corpora import corpora_dir, html_grid, icdar_truth
from bench.tables.peer_driver import html_tables
from bench.tables.scans import scan_tiff
from bench.tables.score import Counts, normalise, relations, score_document, summarise

TRUTH = [["a", "b"], ["1", "2"]]  # (a,b,R) (1,2,R) (a,1,B) (b,2,B)


def test_normalise_keeps_lowercased_letters_and_digits() -> None:
    assert normalise("Total (€) 2012") == "total2012"
    assert normalise("  Über-Größe ") == "übergröße"
    assert normalise("-") == ""
    assert normalise(None) == ""


def test_relations_of_a_full_grid() -> None:
    assert relations(TRUTH) == Counter(
        {
            ("a", "b", "right"): 1,
            ("1", "2", "right"): 1,
            ("a", "1", "below"): 1,
            ("b", "2", "below"): 1,
        }
    )


def test_relations_skip_empty_cells_to_the_nearest_neighbour() -> None:
    # "-" keeps no letter or digit: empty, like None and "".
    assert relations([["x", None, "-", "y"]]) == Counter({("x", "y", "right"): 1})
    assert relations([["h"], [None], [""], ["v"]]) == Counter({("h", "v", "below"): 1})


def test_relations_of_ragged_rows_and_spans() -> None:
    # A spanning header: its text at the top-left, the covered cell None.
    grid: list[list[str | None]] = [["Year", None], ["2012", "2013"], ["5"]]
    assert relations(grid) == Counter(
        {
            ("year", "2012", "below"): 1,
            ("2012", "2013", "right"): 1,
            ("2012", "5", "below"): 1,
        }
    )


def test_perfect_detection_scores_one() -> None:
    counts = score_document([TRUTH], [TRUTH])
    assert (counts.correct, counts.detected, counts.truth) == (4, 4, 4)
    assert counts.precision == counts.recall == counts.f1 == 1.0


def test_one_wrong_cell_breaks_its_two_relations() -> None:
    counts = score_document([[["a", "b"], ["1", "3"]]], [TRUTH])
    assert (counts.correct, counts.detected, counts.truth) == (2, 4, 4)
    assert counts.precision == 0.5
    assert counts.recall == 0.5
    assert counts.f1 == 0.5


def test_merged_columns_lose_recall_more_than_precision() -> None:
    # "a b" as one cell: (ab,1,B) and (1,2,R) detected; only (1,2,R) is true.
    counts = score_document([[["a b", None], ["1", "2"]]], [TRUTH])
    assert (counts.correct, counts.detected, counts.truth) == (1, 2, 4)
    assert counts.precision == 0.5
    assert counts.recall == 0.25
    assert math.isclose(counts.f1, 1 / 3)


def test_texts_compare_normalised() -> None:
    counts = score_document([[["A.", "B"], ["1", "(2)"]]], [TRUTH])
    assert counts.f1 == 1.0


def test_nothing_detected_scores_zero() -> None:
    counts = score_document([], [TRUTH])
    assert (counts.correct, counts.detected, counts.truth) == (0, 0, 4)
    assert counts.precision == counts.recall == counts.f1 == 0.0


def test_relations_pool_over_a_documents_tables_as_a_multiset() -> None:
    # The truth has (x,y,R) twice (two tables); one detected copy matches one of them.
    truth = [[["x", "y"]], [["x", "y"]]]
    counts = score_document([[["x", "y"], ["x", "y"]]], truth)
    # detected: (x,y,R) x2, (x,x,B), (y,y,B) -> 2 of 4 correct, 2 of 2 found
    assert (counts.correct, counts.detected, counts.truth) == (2, 4, 2)
    assert counts.precision == 0.5
    assert counts.recall == 1.0
    assert math.isclose(counts.f1, 2 / 3)
    # An extra detected copy of a relation the truth has once is not correct twice.
    once = score_document([[["x", "y"]], [["x", "y"]]], [[["x", "y"]]])
    assert (once.correct, once.detected, once.truth) == (1, 2, 1)


def test_summary_mean_is_per_document_and_micro_sums_counts() -> None:
    docs = [Counts(correct=4, detected=4, truth=4), Counts(correct=0, detected=0, truth=12)]
    summary = summarise(docs)
    assert summary.documents == 2
    assert summary.mean_f1 == 0.5
    assert (summary.micro.correct, summary.micro.detected, summary.micro.truth) == (4, 4, 16)
    assert summary.micro.precision == 1.0
    assert summary.micro.recall == 0.25
    assert summary.micro.f1 == 0.4


ICDAR_XML = b"""<?xml version="1.0" encoding="UTF-8"?>
<document filename="x.pdf">
  <table id="1">
    <region col-increment="0" id="1" page="1" row-increment="0">
      <cell id="1" start-col="1" start-row="0" end-col="2"><content>Year</content></cell>
      <cell id="2" start-col="0" start-row="1"><content>Item</content></cell>
      <cell id="3" start-col="1" start-row="1"><content>2012</content></cell>
      <cell id="4" start-col="2" start-row="1"><content>2013</content></cell>
    </region>
    <region col-increment="0" id="2" page="2" row-increment="2">
      <cell id="5" start-col="0" start-row="0"><content>Tax</content></cell>
      <cell id="6" start-col="2" start-row="0"><content>7</content></cell>
    </region>
  </table>
  <table id="2">
    <region col-increment="0" id="1" page="3" row-increment="0">
      <cell id="1" start-col="0" start-row="0"><content>only</content></cell>
    </region>
  </table>
</document>
"""


def test_icdar_truth_lays_out_spans_and_regions() -> None:
    assert icdar_truth(ICDAR_XML) == [
        [[None, "Year", None], ["Item", "2012", "2013"], ["Tax", None, "7"]],
        [["only"]],
    ]


def test_pubtabnet_html_grid_with_spans_and_inline_tags() -> None:
    structure = [
        "<thead>", "<tr>", "<td", ' rowspan="2"', ">", "</td>", "<td", ' colspan="2"', ">",
        "</td>", "</tr>", "<tr>", "<td>", "</td>", "<td>", "</td>", "</tr>", "</thead>",
        "<tbody>", "<tr>", "<td>", "</td>", "<td>", "</td>", "<td>", "</td>", "</tr>",
        "</tbody>",
    ]  # fmt: skip
    cells: list[dict[str, object]] = [
        {"tokens": ["<b>", "G", "e", "n", "e", "</b>"]},
        {"tokens": ["<b>", "D", "o", "s", "e", "</b>"]},
        {"tokens": ["m", "g"]},
        {"tokens": ["<i>", "n", "</i>"]},
        {"tokens": ["A", "<sup>", "a", "</sup>"]},
        {"tokens": ["1", "<", "2"]},
        {"tokens": []},
    ]
    assert html_grid(structure, cells) == [
        ["Gene", "Dose", None],
        [None, "mg", "n"],
        ["Aa", "1<2", ""],
    ]


def test_a_real_ground_truth_scores_one_against_itself() -> None:
    xml = corpora_dir() / "icdar2013-eu" / "eu-002-str.xml"
    if not xml.exists():
        pytest.skip(f"{xml} is not here (shared corpora)")
    truth = icdar_truth(Path(xml).read_bytes())
    assert truth
    counts = score_document(truth, truth)
    assert counts.truth > 20
    assert counts.f1 == 1.0


def test_peer_html_becomes_a_grid_with_spans_at_top_left() -> None:
    # rapid-table answers HTML; its spans are laid out like the ground truth's.
    html = (
        "<html><body><table>"
        '<tr><td rowspan="2">Gene</td><td colspan="2"><b>Dose</b></td></tr>'
        "<tr><td>mg</td><td>n</td></tr>"
        "<tr><td>A</td><td> </td><td>3</td></tr>"
        "</table></body></html>"
    )
    assert html_tables(html) == [
        [["Gene", "Dose", None], [None, "mg", "n"], ["A", None, "3"]],
    ]


def test_the_scan_of_a_pdf_is_deterministic() -> None:
    pdf = corpora_dir() / "icdar2013-eu" / "eu-002.pdf"
    if not pdf.exists():
        pytest.skip(f"{pdf} is not here (shared corpora)")
    from PIL import Image

    first, pages = scan_tiff(pdf, seed=2)
    again, _ = scan_tiff(pdf, seed=2)
    other, _ = scan_tiff(pdf, seed=3)
    assert pages == 1
    assert first == again  # same seed: the same bytes, so a cached corpus is the corpus
    assert first != other  # the noise does depend on the seed
    with Image.open(io.BytesIO(first)) as image:
        assert image.format == "TIFF"
        assert image.mode == "L"
        # An A4 page at 200 dpi is 1654 x 2339 px; turned 0.5 degrees the canvas grows.
        assert 1654 < image.width < 1700
        assert 2339 < image.height < 2370


def test_the_bench_scores_relay_on_one_pdf() -> None:
    # The whole path on one document: corpus, relay's extraction host, scorer, goals-free.
    if not (corpora_dir() / "icdar2013-eu" / "eu-001.pdf").exists():
        pytest.skip("the shared corpora are not here")
    from bench.tables import run

    outcome = run(corpus=["pdf"], engines=["relay"], limit=1)
    relay = outcome.data["corpora"]["pdf"]["engines"]["relay"]
    assert relay["documents"] == 1
    assert relay["pages"] == 3
    assert relay["relations"]["truth"] == 489  # eu-001's ground truth, laid out
    (doc,) = relay["per_document"]
    assert doc["name"] == "eu-001"
    assert doc["seconds"] > 0
    assert doc["error"] is not None or doc["tables"] > 0
    assert outcome.data["relay_settings"]["mode"] == "sandbox"
    assert any(text.startswith("== pdf: 1 documents") for text in outcome.tables)
