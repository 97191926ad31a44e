"""JSON Schema from the types of the public JSON shapes, so that a shape is declared once.

Each record of ``relay.state.model`` types its ``to_json`` with a ``TypedDict`` (``BatchJSON``,
``DocumentJSON``, ...): mypy holds ``to_json`` to exactly those keys and value types, and
:func:`object_schema` turns the same ``TypedDict`` into the closed JSON Schema object of the
OpenAPI document (``relay.api.openapi_schemas``). What a type alone cannot say (a pattern,
a bound, a description, that a string is one of an enum's values) rides along in
``Annotated`` metadata: :class:`Schema` (keywords merged into the field's schema),
:class:`Ref` (the field is a named component) or a ``StrEnum`` class (one of its values).
A ``Literal`` is its values (``const`` for one). ``X | None`` adds ``"null"`` to a scalar's
type and is ``oneOf`` null or the schema for an object (inline or a component); a union of
``TypedDict``s is ``oneOf`` them.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from enum import StrEnum
from typing import (
    Annotated,
    Any,
    Literal,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)


class Schema:
    """JSON Schema keywords added to (or replacing) what a field's type gives."""

    def __init__(self, **keywords: Any) -> None:
        self.keywords = keywords


class Ref:
    """The field is the named component (``#/components/schemas/NAME``)."""

    def __init__(self, name: str) -> None:
        self.name = name


def components(*shapes: type) -> dict[type, str]:
    """The ``names`` of shapes that are components of their own: each its class's name, less
    a ``JSON`` suffix (``BatchJSON`` is ``Batch``)."""
    return {shape: shape.__name__.removesuffix("JSON") for shape in shapes}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def object_schema(shape: type, names: Mapping[type, str]) -> dict[str, Any]:
    """The closed object schema of a ``TypedDict``: every key listed, the required ones (all
    but ``NotRequired``) required, no other. ``names`` maps the types that are components
    (``TypedDict``s, enums) to their names: a field of one of them is a ``$ref``."""
    hints = get_type_hints(shape, include_extras=True)
    required: frozenset[str] = getattr(shape, "__required_keys__", frozenset())
    props = {key: field_schema(hint, names) for key, hint in hints.items()}
    return {
        "type": "object",
        "required": [key for key in props if key in required],
        "properties": props,
        "additionalProperties": False,
    }


def field_schema(hint: Any, names: Mapping[type, str]) -> dict[str, Any]:
    """The JSON Schema of one field's type (see the module's docstring)."""
    origin = get_origin(hint)
    if origin is Annotated:
        base, *meta = get_args(hint)
        out = field_schema(base, names)
        for m in meta:
            if isinstance(m, Ref):
                out = ref(m.name)
            elif isinstance(m, Schema):
                out = {**out, **m.keywords}
            elif isinstance(m, type) and issubclass(m, StrEnum):
                out = _enum(m, names)
        return out
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(hint) if a is not type(None)]
        if len(members) > 1 and all(is_typeddict(m) for m in get_args(hint)):
            return {"oneOf": [field_schema(m, names) for m in members]}  # one of the objects
        if len(members) != 1:
            raise TypeError(f"no JSON Schema for the union {hint!r}")
        inner = field_schema(members[0], names)
        if isinstance(inner.get("type"), str) and inner["type"] != "object":
            return {**inner, "type": [inner["type"], "null"]}
        return {"oneOf": [{"type": "null"}, inner]}
    if origin is Literal:
        values = get_args(hint)
        return {"const": values[0]} if len(values) == 1 else {"enum": list(values)}
    if origin is list:
        (item,) = get_args(hint)
        return {"type": "array", "items": field_schema(item, names)}
    if origin is dict:
        return {"type": "object"}
    if hint in names:
        return ref(names[hint])
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        return _enum(hint, names)
    if is_typeddict(hint):
        return object_schema(hint, names)
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    raise TypeError(f"no JSON Schema for {hint!r}")


def _enum(enum: type[StrEnum], names: Mapping[type, str]) -> dict[str, Any]:
    if enum in names:
        return ref(names[enum])
    return {"type": "string", "enum": [member.value for member in enum]}
