"""A stored table as the review page draws it (``relay.console.overlay``): boxes in percent of
the page, the grid with its spans, the confidence bands; whatever a plug-in's result holds
that is not geometry is dropped or clamped, never trusted."""

from __future__ import annotations

from typing import Any

from relay.console.overlay import MAX_ROWS, Box, band, box, table_view, table_views


def test_a_box_is_percent_of_the_page_clamped_to_it() -> None:
    assert box([0.1, 0.25, 0.5, 0.75]) == Box(10.0, 25.0, 40.0, 50.0)
    assert box([-0.5, 0.0, 1.5, 0.5]) == Box(0.0, 0.0, 100.0, 50.0)
    for bad in (None, [0.1, 0.2, 0.3], [0.5, 0.1, 0.2, 0.9], [0, 0, True, 1], "0,0,1,1", [0.1] * 4):
        assert box(bad) is None, bad
    assert box([0, 0, float("nan"), 1]) is None


def test_bands() -> None:
    assert [band(v) for v in (None, 0.95, 0.9, 0.89, 0.6, 0.59, 0.0)] == [
        "none",
        "high",
        "high",
        "mid",
        "mid",
        "low",
        "low",
    ]


def test_the_grid_keeps_the_spans_and_leaves_out_what_they_cover() -> None:
    table: dict[str, Any] = {
        "page": 2,
        "rows": [["Item", "Qty", "Price"], ["Total", None, "9"], ["a", "1", "2"]],
        "confidence": [[0.99, 0.5, 0.7], [0.95, None, 0.9], [None, None, None]],
        "bbox": [0.1, 0.1, 0.9, 0.4],
        "cells": [
            {"row": 0, "col": 0, "row_span": 1, "col_span": 1, "bbox": [0.1, 0.1, 0.4, 0.2]},
            {"row": 1, "col": 0, "row_span": 1, "col_span": 2, "bbox": [0.1, 0.2, 0.6, 0.3]},
            {"row": 1, "col": 2, "row_span": 1, "col_span": 1, "bbox": None},
        ],
    }
    view = table_view(3, table)
    assert view is not None and view.page == 2 and view.geometry and view.box is not None
    assert [[(c.row, c.col, c.col_span) for c in line] for line in view.grid] == [
        [(0, 0, 1), (0, 1, 1), (0, 2, 1)],
        [(1, 0, 2), (1, 2, 1)],
        [(2, 0, 1), (2, 1, 1), (2, 2, 1)],
    ]
    assert [c.key for c in view.boxes] == ["t3-r0-c0", "t3-r1-c0"]
    assert [c.band for c in view.grid[0]] == ["high", "low", "mid"]
    assert view.grid[1][0].label == "row 2, column 1: Total (confidence 0.95)"
    assert view.grid[2][0].label == "row 3, column 1: a (no score)"


def test_spans_that_run_past_the_grid_or_into_each_other_are_cut() -> None:
    table = {
        "page": 1,
        "rows": [["a", "b", "c"], ["d", "e", "f"]],
        "cells": [
            {"row": 0, "col": 1, "row_span": 5, "col_span": 1},  # past the last row
            {"row": 1, "col": 0, "row_span": 1, "col_span": 3},  # into (1, 1), held above
            {"row": 9, "col": 9},  # outside
            {"row": "0", "col": 0},  # not a position
        ],
    }
    view = table_view(1, table)
    assert view is not None
    assert [[(c.col, c.row_span, c.col_span) for c in line] for line in view.grid] == [
        [(0, 1, 1), (1, 2, 1), (2, 1, 1)],
        [(0, 1, 1), (2, 1, 1)],
    ]


def test_a_table_without_cells_has_no_geometry_and_long_tables_are_cut() -> None:
    rows = [[str(i), None] for i in range(MAX_ROWS + 5)]
    view = table_view(1, {"page": 1, "rows": rows, "confidence": None})
    assert view is not None and not view.geometry and view.boxes == []
    assert view.rows == MAX_ROWS + 5 and len(view.grid) == view.shown_rows == MAX_ROWS
    assert view.grid[0][1].text == "" and view.grid[0][0].confidence is None


def test_what_is_no_table_is_left_out() -> None:
    tables: list[Any] = [None, {"rows": "x"}, {"page": -1, "rows": [[1, 2.5]]}]
    views = table_views(tables)
    assert len(views) == 1 and views[0].number == 3 and views[0].page == 1
    assert [c.text for c in views[0].grid[0]] == ["1", "2.5"]
