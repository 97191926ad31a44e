"""The public JSON shapes: one declaration (``relay.state.model``'s ``...JSON``) makes both what
``to_json`` returns and the OpenAPI schema of it (``relay.shapes``)."""

from __future__ import annotations

import re
from typing import Annotated, Any, TypedDict

import jsonschema_rs
import pytest

from relay.api.openapi import document
from relay.api.responses import COMPONENTS as BODIES
from relay.api.webhooks import _signing_json
from relay.crypto import SigningMaterial
from relay.redis import keyspace
from relay.shapes import Ref, Schema, field_schema, object_schema, ref
from relay.state.delivery_search import Recovery
from relay.state.event_bodies import COMPONENTS as EVENTS
from relay.state.model import (
    COMPONENTS,
    DELIVERY_ID_PATTERN,
    DOCUMENT_ID_PATTERN,
    Attempt,
    Batch,
    Delivery,
    Document,
    Webhook,
)

NOW = 1_764_000_000_123


def _hash(**fields: object) -> dict[bytes, bytes]:
    """A Redis hash as redis-py returns it."""
    return {k.encode(): str(v).encode() for k, v in fields.items()}


def _records() -> list[tuple[str, Any]]:
    common = {"account": "acme", "batch": "b-1", "created_at": NOW}
    doc = Document.from_hash(
        _hash(
            **common,
            id=keyspace.new_id("doc", 3),
            filename="a.csv",
            content_type="text/csv",
            size=12,
            status="failed",
            started_at=NOW + 1,
            completed_at=NOW + 2,
            error_code="unreadable",
            error_message="no table",
        )
    )
    batch = Batch.from_hash(_hash(account="acme", name="b-1", created_at=NOW, queued=2))
    hook = Webhook.from_hash("b-1", _hash(url="https://example.com/h", created_at=1, updated_at=2))
    attempt = Attempt(1, NOW, 12.5, 503, "http_status", "busy")
    delivery = Delivery.from_hash(
        _hash(
            **common,
            id=keyspace.new_id("msg", 3),
            seq=1,
            url="https://example.com/h",
            status="pending",
            next_attempt_at=NOW + 5,
        ),
        [attempt.encode().encode()],
    )
    return [
        ("Document", doc),
        ("Batch", batch),
        ("Webhook", hook),
        ("Delivery", delivery),
        ("Recovery", Recovery(recovered=3, skipped=1)),
    ]


class _Signing:
    """The signing material's body, as GET /webhooks/signing answers it."""

    def __init__(self, *materials: SigningMaterial, until: int | None = None) -> None:
        self.materials, self.until = list(materials), until

    def to_json(self) -> Any:
        return _signing_json(self.materials, self.until)


_OLD, _NEW = SigningMaterial.generate(NOW), SigningMaterial.generate(NOW + 1)


@pytest.mark.parametrize(
    ("name", "record"),
    [
        *_records(),
        ("SigningMaterial", _Signing(_NEW)),
        ("SigningMaterial", _Signing(_NEW, _OLD, until=NOW + 9)),
    ],
)
def test_to_json_is_valid_against_the_schema_made_from_its_type(name: str, record: Any) -> None:
    spec = document()
    schema = {"$ref": f"#/components/schemas/{name}", "components": spec["components"]}
    jsonschema_rs.validator_for(schema).validate(record.to_json())
    # Every key of the type, and no other, is in the object (a field dropped from to_json,
    # or one added to it without its type, fails here or in mypy).
    shape = next(t for t, n in COMPONENTS.items() if n == name)
    assert set(record.to_json()) == set(object_schema(shape, COMPONENTS)["properties"])


def test_the_document_takes_the_records_events_and_bodies_objects_from_their_types() -> None:
    schemas = document()["components"]["schemas"]
    assert set(COMPONENTS.items()) <= set(EVENTS.items()) <= set(BODIES.items())
    for shape, name in BODIES.items():
        if isinstance(shape, type) and hasattr(shape, "__required_keys__"):
            assert schemas[name] == object_schema(shape, BODIES), name


def test_id_patterns_are_the_ones_ids_are_minted_and_read_with() -> None:
    for kind, pattern in (("doc", DOCUMENT_ID_PATTERN), ("msg", DELIVERY_ID_PATTERN)):
        minted = keyspace.new_id(kind, 15)
        assert re.fullmatch(pattern, minted)
        assert keyspace.shard_of_id(kind, minted) == 15
        assert not re.fullmatch(pattern, minted + "a")
        assert not re.fullmatch(pattern, minted.replace(kind, "xyz", 1))


class _Inner(TypedDict):
    a: int


class _Outer(TypedDict):
    inner: _Inner | None
    inline: _Inner | None
    named: Annotated[dict[str, int], Ref("Counts")]
    many: list[Annotated[str, Schema(maxLength=3)]]
    maybe: Annotated[float | None, Schema(minimum=0)]


def test_field_schemas() -> None:
    out = object_schema(_Outer, {_Inner: "Inner"})
    inline = object_schema(_Outer, {})["properties"]["inline"]
    assert out["required"] == ["inner", "inline", "named", "many", "maybe"]
    assert out["additionalProperties"] is False
    props = out["properties"]
    assert props["inner"] == {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/Inner"}]}
    assert inline == {"oneOf": [{"type": "null"}, object_schema(_Inner, {})]}
    assert props["named"] == {"$ref": "#/components/schemas/Counts"}
    assert props["many"] == {"type": "array", "items": {"type": "string", "maxLength": 3}}
    assert props["maybe"] == {"type": ["number", "null"], "minimum": 0}
    either = field_schema(_Inner | _Outer, {_Inner: "Inner", _Outer: "Outer"})
    assert either == {"oneOf": [{"$ref": "#/components/schemas/Inner"}, ref("Outer")]}
    with pytest.raises(TypeError):
        field_schema(int | str, {})
    with pytest.raises(TypeError):
        field_schema(_Inner | int, {})
    with pytest.raises(TypeError):
        field_schema(bytes, {})
