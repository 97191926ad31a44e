"""Metadata: the small JSON object a client attaches to a document or a batch.

A flat object (docs/decisions.md, "Metadata"): keys are non-empty strings, values are
strings, numbers, booleans or null, never objects or arrays. Flat, so that it reads the same
in every place it comes back (a CSV column, a log line, a receiver's lookup by key) and a
bound on its bytes is a bound on what it costs to store, send and parse: relay carries it,
it never looks inside. Bounded by ``RELAY_METADATA_MAX_KEYS`` keys and
``RELAY_METADATA_MAX_BYTES`` bytes of its canonical form.

The canonical form is what is stored and what comes back: compact JSON, keys sorted, UTF-8
(``canonical``). Two objects that differ only in key order or spacing are the same metadata,
which is how a batch's metadata sent again with a later upload is recognised as the same
(``upload.lua`` compares the canonical strings). The empty object is no metadata: stored as
nothing, answered as ``{}``.
"""

from __future__ import annotations

import json
import math
from typing import Annotated

from relay.exceptions import InvalidMetadata
from relay.shapes import Schema

# The defaults of RELAY_METADATA_MAX_KEYS and RELAY_METADATA_MAX_BYTES (relay.config), which
# the OpenAPI document states.
DEFAULT_MAX_KEYS = 32
DEFAULT_MAX_BYTES = 2048
# Most RELAY_METADATA_MAX_BYTES may be: the multipart parser keeps a form field's text within
# four times this (relay.api.documents.FIELD_BYTES), room for spacing and \\u escapes.
MOST_BYTES = 4096

Value = str | int | float | bool | None
MetadataJSON = Annotated[
    dict[str, Value],
    Schema(
        maxProperties=DEFAULT_MAX_KEYS,
        propertyNames={"minLength": 1},
        additionalProperties={"type": ["string", "number", "boolean", "null"]},
        description=(
            "The client's own data, returned as given ({} when none): a flat JSON object, "
            "keys non-empty strings, values strings, numbers, booleans or null (no nested "
            f"object or array), at most RELAY_METADATA_MAX_KEYS keys (default "
            f"{DEFAULT_MAX_KEYS}) and RELAY_METADATA_MAX_BYTES bytes (default "
            f"{DEFAULT_MAX_BYTES}) as compact UTF-8 JSON. Keys come back sorted, numbers in "
            "a canonical form (1E2 as 100.0)."
        ),
    ),
]


def canonical(value: dict[str, Value]) -> str:
    """The stored form: compact JSON, keys sorted, non-ASCII as itself; ``""`` for ``{}``."""
    if not value:
        return ""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def decode(stored: str) -> dict[str, Value]:
    """A stored canonical form back to the object (``{}`` for ``""``)."""
    if not stored:
        return {}
    value: dict[str, Value] = json.loads(stored)
    return value


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key[:64]!r} given twice")
        out[key] = value
    return out


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def parse(text: str, *, field: str, max_keys: int, max_bytes: int) -> str:
    """The canonical form of a metadata field's JSON text; InvalidMetadata (the message
    names ``field`` and says what is wrong) for anything but a flat object within the
    bounds."""
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_refuse_constant)
    except RecursionError:
        raise InvalidMetadata(f"{field} must be a flat JSON object (it nests too deeply)") from None
    except ValueError as exc:  # JSONDecodeError, a duplicate key, NaN, a huge integer
        raise InvalidMetadata(f"{field} is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(value, dict):
        raise InvalidMetadata(f"{field} must be a JSON object")
    if len(value) > max_keys:
        raise InvalidMetadata(f"{field} has {len(value)} keys; at most {max_keys} are allowed")
    for key, item in value.items():
        if not key:
            raise InvalidMetadata(f"{field} keys must be non-empty strings")
        if isinstance(item, dict | list):
            raise InvalidMetadata(
                f"{field}[{key[:64]!r}] is an {'object' if isinstance(item, dict) else 'array'}: "
                "values are strings, numbers, booleans or null (metadata is flat)"
            )
        if isinstance(item, float) and not math.isfinite(item):
            raise InvalidMetadata(f"{field}[{key[:64]!r}] is not a finite number")
    form = canonical(value)
    try:
        size = len(form.encode())
    except UnicodeEncodeError:
        raise InvalidMetadata(
            f"{field} holds an unpaired surrogate (\\ud800-\\udfff escape): text must be "
            "valid Unicode"
        ) from None
    if size > max_bytes:
        raise InvalidMetadata(
            f"{field} is {size} bytes as compact JSON; at most {max_bytes} are allowed"
        )
    return form
