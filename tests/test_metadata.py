"""relay.state.metadata: which objects are metadata, their canonical form, the bounds."""

from __future__ import annotations

import json

import pytest

from relay.exceptions import InvalidMetadata
from relay.state.metadata import canonical, decode, parse


def _parse(text: str, max_keys: int = 32, max_bytes: int = 2048) -> str:
    return parse(text, field="metadata", max_keys=max_keys, max_bytes=max_bytes)


def test_the_canonical_form_is_compact_sorted_utf8() -> None:
    form = _parse('{ "b": 1 , "a": "é", "c": null, "d": true, "e": 1.5, "f": 1E2 }')
    assert form == '{"a":"é","b":1,"c":null,"d":true,"e":1.5,"f":100.0}'
    # Key order and spacing do not matter: the same metadata, the same string.
    assert _parse('{"f":1E2,"e":1.5,"d":true,"c":null,"b":1,"a":"\\u00e9"}') == form
    assert decode(form) == {"a": "é", "b": 1, "c": None, "d": True, "e": 1.5, "f": 100.0}


def test_the_empty_object_is_no_metadata() -> None:
    assert _parse("{}") == "" == canonical({})
    assert decode("") == {}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "not valid JSON"),
        ("{", "not valid JSON"),
        ("[]", "must be a JSON object"),
        ('"x"', "must be a JSON object"),
        ("null", "must be a JSON object"),
        ('{"a": {"b": 1}}', "is an object"),
        ('{"a": [1]}', "is an array"),
        ('{"": 1}', "non-empty"),
        ('{"a": 1, "a": 2}', "given twice"),
        ('{"a": NaN}', "not valid JSON"),
        ('{"a": Infinity}', "not valid JSON"),
        ('{"a": 1e400}', "not a finite number"),
        ('{"a": "\\ud800"}', "unpaired surrogate"),
        ('{"\\udfff": 1}', "unpaired surrogate"),
        ('{"a": ' + "9" * 5000 + "}", "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
    ],
)
def test_anything_but_a_flat_object_is_refused_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(InvalidMetadata) as caught:
        _parse(text)
    assert says in caught.value.message
    assert caught.value.message.startswith("metadata")


def test_the_bounds_count_keys_and_the_canonical_bytes() -> None:
    four = json.dumps({f"k{i}": i for i in range(4)})
    assert _parse(four, max_keys=4)
    with pytest.raises(InvalidMetadata, match="has 5 keys; at most 4"):
        _parse(json.dumps({f"k{i}": i for i in range(5)}), max_keys=4)
    # Bytes of the canonical form (UTF-8, compact), not of the text sent: spacing is free,
    # a two-byte character counts two.
    exact = '{"a":"' + "x" * 92 + '"}'
    assert len(exact) == 100
    assert _parse(exact.replace(":", " :  "), max_bytes=100) == exact
    with pytest.raises(InvalidMetadata, match="is 101 bytes as compact JSON; at most 100"):
        _parse('{"a":"' + "x" * 91 + 'é"}', max_bytes=100)
