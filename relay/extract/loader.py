"""Loading the configured extractor and running it under the plug-in contract.

``load_extractor("package.module:callable")`` imports the module and returns the callable
(a dotted attribute path such as ``module:Class.method`` works too); anything that cannot
work is an ``ExtractorConfigError`` at start, not a failure of every document later.

An extractor returns either

* its rows, a list of dicts (the v1 contract): they are the document's ``line_items``, and
  its ``tables`` is ``[]`` (the extractor reported none); or
* ``{"line_items": [...], "tables": [...]}``: the rows, and the tables found, each
  ``{"page": N, "rows": [[cell, ...], ...], "confidence": [[...]] | null}`` as in
  ``relay.extract.result.Table`` (page a positive integer; every row a list of strings or
  ``null``, all of one length; ``confidence`` absent, ``null`` or of the same shape, each
  value ``null`` or a number from 0 to 1). ``tables`` may be left out. A table may also
  carry its geometry as relay's own tables do: ``bbox`` (``[x0, y0, x1, y1]``, fractions
  of the page, ``x0 < x1``, ``y0 < y1``, or ``null``) and ``cells`` (``[{"row", "col",
  "row_span", "col_span", "bbox"}, ...]``, spans 1 when left out, one per anchor in
  row-major order covering the grid exactly, positions covered beyond an anchor ``null`` in
  ``rows``: ``geometry.tiling_problem``); left out or ``null``, the table has no box and
  each position is a cell of its own.

The default extractor returns an :class:`relay.extract.tables.Extraction` (the same two).

``call_extractor`` is the only place an extractor is called; it raises ``ExtractionError``
for every failure and returns an ``Extraction``. ``run_extractor`` wraps it for in-process
use and never raises for a document's sake; it returns ``(rows, None)`` (the
``line_items``) or ``(None, (code, message))``:

* ``ExtractionError(code, message)`` -> that code and message;
* ``MemoryError`` -> ``extraction_memory``;
* any other ``Exception`` -> ``extraction_error`` with ``"TypeName: text"``;
* a result of neither shape (rows that are not dicts with string keys, a malformed table),
  or that ``json.dumps`` cannot serialise as strict JSON -> ``extraction_error`` with
  ``"extractor returned ..."``.

Messages are cut to 500 characters and codes to 64: they are stored and sent in webhooks.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Mapping
from typing import Protocol, cast

from relay.extract import geometry
from relay.extract.errors import ExtractionError, ExtractorConfigError, SplitPages, shorten
from relay.extract.result import Box, Cell, Table
from relay.extract.tables import Extraction

__all__ = ["Extractor", "call_extractor", "load_extractor", "run_extractor", "table_from_json"]

MAX_MESSAGE = 500
MAX_CODE = 64
_SPEC_SHAPE = "expected 'package.module:callable'"

Rows = list[dict[str, object]]
Result = Rows | Mapping[str, object] | Extraction


class Extractor(Protocol):
    """An extractor: document bytes and what is known about them in, rows (and tables) out.

    ``content`` is positional-only so that a plug-in may name its first parameter freely.
    """

    def __call__(
        self, content: bytes, /, *, filename: str, content_type: str, fields: list[str]
    ) -> Result: ...


def _import(spec: str, module_name: str) -> object:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        if module_name == missing or module_name.startswith(f"{missing}."):
            raise ExtractorConfigError(
                f"extractor {spec!r}: no module named {module_name!r}"
            ) from exc
        # The module exists but one of its own imports does not: name the real culprit.
        message = f"extractor {spec!r}: importing {module_name!r} failed: no module {missing!r}"
        raise ExtractorConfigError(message) from exc
    except Exception as exc:  # a broken plug-in must stop start-up with a readable reason
        reason = shorten(f"{type(exc).__name__}: {exc}", 200)
        raise ExtractorConfigError(
            f"extractor {spec!r}: importing {module_name!r} failed: {reason}"
        ) from exc


def load_extractor(spec: str) -> Extractor:
    """The callable that ``spec`` (``package.module:callable``) names.

    Raises ``ExtractorConfigError`` when the spec is malformed, the module cannot be
    imported, the attribute does not exist, or it is not callable. The signature is not checked: a
    mismatch shows as an ``extraction_error`` on the first document.
    """
    module_name, colon, attr_path = spec.strip().partition(":")
    parts = attr_path.split(".")
    names_ok = all(name.isidentifier() for name in [*module_name.split("."), *parts])
    if not colon or not names_ok:
        raise ExtractorConfigError(f"extractor {spec!r}: {_SPEC_SHAPE}")
    target = _import(spec, module_name)
    for depth, name in enumerate(parts, start=1):
        try:
            target = getattr(target, name)
        except AttributeError:
            where = ".".join([module_name, *parts[: depth - 1]])
            raise ExtractorConfigError(
                f"extractor {spec!r}: {where!r} has no attribute {name!r}"
            ) from None
    if not callable(target):
        kind = type(target).__name__
        raise ExtractorConfigError(f"extractor {spec!r}: {attr_path!r} is a {kind}, not a callable")
    return cast(Extractor, target)


def _shape_problem(result: object) -> str | None:
    """Why ``result`` is not a list of dicts with string keys, or ``None``."""
    if not isinstance(result, list):
        return f"extractor returned {type(result).__name__}, expected a list of dicts"
    for index, row in enumerate(result):
        if not isinstance(row, dict):
            kind = type(row).__name__
            return f"extractor returned a list whose item {index} is {kind}, expected a dict"
        # json.dumps would quietly turn 1 into "1" and fail on a tuple key: refuse both.
        if not all(isinstance(key, str) for key in row):
            return f"extractor returned a row (item {index}) with a key that is not a string"
    return None


def _grid_problem(grid: object, cell_ok: type | tuple[type, ...], what: str) -> str | None:
    if not isinstance(grid, list) or not all(isinstance(row, list) for row in grid):
        return f"{what} is not a list of lists"
    if len({len(row) for row in grid}) > 1:
        return f"{what} has rows of different lengths"
    for row in grid:
        for cell in row:
            if cell is not None and (isinstance(cell, bool) or not isinstance(cell, cell_ok)):
                return f"{what} has a cell that is {type(cell).__name__}"
    return None


def _table(index: int, value: object) -> Table | str:
    """The plug-in's ``tables[index]`` as a ``Table``, or why it is not one."""
    what = f"extractor returned a table (item {index})"
    if not isinstance(value, dict):
        return f"{what} that is {type(value).__name__}, expected an object"
    page, rows, confidence = value.get("page"), value.get("rows"), value.get("confidence")
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        return f"{what} whose page is not a positive integer"
    problem = _grid_problem(rows, str, f"{what} whose rows")
    if problem is None and confidence is not None:
        problem = _grid_problem(confidence, (int, float), f"{what} whose confidence")
        shape = [len(row) for row in cast(list[list[object]], rows)]
        if problem is None and [len(row) for row in confidence] != shape:
            problem = f"{what} whose confidence does not have the shape of its rows"
        scores = [c for row in confidence for c in row if c is not None]
        if problem is None and not all(math.isfinite(c) and 0 <= c <= 1 for c in scores):
            problem = f"{what} with a confidence outside 0-1"
    if problem is not None:
        return problem
    grid = cast(list[list[str | None]], rows)
    bbox = value.get("bbox")
    box = _box(bbox)
    if bbox is not None and box is None:
        return f"{what} whose bbox is not [x0, y0, x1, y1] within 0-1 with x0 < x1, y0 < y1"
    cells = _cells(value.get("cells"), grid)
    if isinstance(cells, str):
        return f"{what} whose {cells}"
    return Table(page, grid, confidence, box, cells)


def table_from_json(value: object) -> Table:
    """A table in the shape of the contract (as ``Table.stored_json`` writes it: a slice's
    stored tables, read back to be joined), checked as a plug-in's is; ``extraction_error``
    when it is not one."""
    table = _table(0, value)
    if isinstance(table, str):
        raise ExtractionError("extraction_error", shorten(table, MAX_MESSAGE))
    return table


def _box(value: object) -> Box | None:
    """``value`` as a box (``relay.extract.result``), or ``None`` when it is not one."""
    if not isinstance(value, list) or len(value) != 4:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        return None
    x0, y0, x1, y1 = (float(v) for v in value)
    if not all(math.isfinite(v) and 0 <= v <= 1 for v in (x0, y0, x1, y1)):
        return None
    return (x0, y0, x1, y1) if x0 < x1 and y0 < y1 else None


def _count(value: object, default: int | None) -> int | None:
    if value is None:
        return default
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _cells(value: object, rows: list[list[str | None]]) -> tuple[Cell, ...] | str | None:
    """A plug-in table's ``cells`` (module docstring), or what is wrong with them."""
    if value is None:
        return None
    if not isinstance(value, list):
        return "cells is not a list"
    cells: list[Cell] = []
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            return f"cell {index} is not an object"
        row, col = _count(item.get("row"), None), _count(item.get("col"), None)
        spans = _count(item.get("row_span"), 1), _count(item.get("col_span"), 1)
        if row is None or col is None or spans[0] is None or spans[1] is None:
            return f"cell {index} has a row, col or span that is not an integer"
        box = _box(item.get("bbox"))
        if item.get("bbox") is not None and box is None:
            return f"cell {index} has a bbox that is not [x0, y0, x1, y1] within 0-1"
        cells.append(Cell(row, col, spans[0], spans[1], box))
    problem = geometry.tiling_problem(cells, rows)
    return f"cells do not fit its rows: {problem}" if problem is not None else tuple(cells)


def _extraction(result: object) -> Extraction | str:
    """``result`` (either shape of the module docstring) as an ``Extraction``, or why it
    breaks the contract."""
    if isinstance(result, Extraction):
        return result
    if not isinstance(result, dict):
        problem = _shape_problem(result)
        return problem if problem is not None else Extraction(cast(Rows, result), [])
    if "line_items" not in result:
        return 'extractor returned a dict without "line_items", expected a list of dicts'
    rows, tables = result["line_items"], result.get("tables", [])
    problem = _shape_problem(rows)
    if problem is not None:
        return problem.replace("extractor returned", 'extractor returned "line_items" as', 1)
    if not isinstance(tables, list):
        return f'extractor returned "tables" as {type(tables).__name__}, expected a list'
    found: list[Table] = []
    for index, value in enumerate(tables):
        table = _table(index, value)
        if isinstance(table, str):
            return table
        found.append(table)
    return Extraction(cast(Rows, rows), found)


def _problem_with(result: object) -> str | None:
    """Why ``result`` breaks the contract's return type, or ``None`` if it does not."""
    problem = _shape_problem(result)
    if problem is not None:
        return problem
    try:
        json.dumps(result, allow_nan=False, default=None)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"extractor returned rows that are not JSON-serialisable: {exc}"
    return None


def call_extractor(
    extractor: Extractor,
    content: bytes,
    *,
    filename: str,
    content_type: str,
    fields: list[str],
) -> Extraction:
    """Call ``extractor``; its rows and tables, checked for shape (not yet for JSON: the
    caller serialises them), or ``ExtractionError`` for every failure (module docstring).

    ``MemoryError`` is ``extraction_memory``: the extraction needed more than it may use.
    """
    try:
        # A copy of fields: a plug-in that mutates it must not change the batch's settings.
        result = extractor(
            content, filename=filename, content_type=content_type, fields=list(fields)
        )
    except SplitPages:  # not a failure: the caller asked for it (relay.extract.bounds)
        raise
    except ExtractionError as exc:
        code = shorten(str(exc.code), MAX_CODE) or "extraction_error"
        raise ExtractionError(code, shorten(str(exc.message), MAX_MESSAGE)) from None
    except MemoryError:
        raise ExtractionError(
            "extraction_memory", "the document needs more memory than extraction may use"
        ) from None
    except Exception as exc:  # the contract: any other failure is the document's, not ours
        message = shorten(f"{type(exc).__name__}: {exc}", MAX_MESSAGE)
        raise ExtractionError("extraction_error", message) from None
    extraction = _extraction(result)
    if isinstance(extraction, str):
        raise ExtractionError("extraction_error", shorten(extraction, MAX_MESSAGE))
    return extraction


def run_extractor(
    extractor: Extractor,
    content: bytes,
    *,
    filename: str,
    content_type: str,
    fields: list[str],
) -> tuple[Rows | None, tuple[str, str] | None]:
    """Call ``extractor`` and map every outcome to its rows or a failure (module docstring)."""
    try:
        extraction = call_extractor(
            extractor, content, filename=filename, content_type=content_type, fields=fields
        )
    except ExtractionError as exc:
        return None, (exc.code, exc.message)
    problem = _problem_with(extraction.line_items)  # tables were checked cell by cell
    if problem is not None:
        return None, ("extraction_error", shorten(problem, MAX_MESSAGE))
    return extraction.line_items, None
