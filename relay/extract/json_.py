"""JSON documents into rows.

Accepted shapes (anything else is ``invalid_json`` with a message naming the expected shape):

* a list of objects: ``[{"sku": "A1", "qty": 2}, ...]``
* an object holding such a list under ``line_items``: ``{"line_items": [...], ...}`` (other
  keys of the wrapper are ignored)

Values are kept as JSON gives them (numbers stay numbers, nested objects stay nested). An
empty list is ``empty_document``. ``NaN``, ``Infinity`` and numbers too large for a float,
which Python's parser accepts but strict JSON cannot carry, are rejected so that every row
can be re-serialised as strict JSON.
"""

from __future__ import annotations

import json
import math

from relay.extract.bounds import check_depth
from relay.extract.errors import ExtractionError, shorten

__all__ = ["EXPECTED_SHAPE", "extract_json", "parse_json", "rows_from_json"]

EXPECTED_SHAPE = 'expected a list of objects or {"line_items": [...]}'


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # 1e999 parses to inf, which strict JSON cannot carry
        raise ValueError(f"{literal} is too large a number")
    return value


def _kind(value: object) -> str:
    """The JSON name of a value's type, for messages a non-Python user understands."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def parse_json(text: str) -> object:
    """Parse ``text`` as strict JSON or raise ``invalid_json`` saying where it breaks, or
    ``too_deeply_nested`` past ``RELAY_EXTRACT_MAX_DEPTH`` levels (or the parser's own
    recursion limit)."""
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise ExtractionError("invalid_json", f"not valid JSON: {exc.msg} at {where}") from None
    except ValueError as exc:  # from _reject_constant or _finite_float
        raise ExtractionError("invalid_json", shorten(f"not valid JSON: {exc}", 200)) from None
    except RecursionError:
        message = "the JSON document nests deeper than the parser allows"
        raise ExtractionError("too_deeply_nested", message) from None
    check_depth(value)
    return value


def rows_from_json(value: object) -> list[dict[str, object]]:
    """The rows of a parsed document of one of the accepted shapes (module docstring)."""
    items: object = value
    where = "the document"
    if isinstance(value, dict):
        if "line_items" not in value:
            message = f'{EXPECTED_SHAPE}, got an object without "line_items"'
            raise ExtractionError("invalid_json", message)
        items = value["line_items"]
        where = '"line_items"'
    if not isinstance(items, list):
        raise ExtractionError("invalid_json", f"{EXPECTED_SHAPE}, {where} is {_kind(items)}")
    rows: list[dict[str, object]] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            message = f"{EXPECTED_SHAPE}, item {index + 1} is {_kind(item)}"
            raise ExtractionError("invalid_json", message)
        rows.append(item)
    if not rows:
        raise ExtractionError("empty_document", f"{where} holds an empty list")
    return rows


def extract_json(text: str) -> list[dict[str, object]]:
    """Parse ``text`` and return its rows (module docstring)."""
    return rows_from_json(parse_json(text))
