"""Safe text (``relay.text``) and the places foreign text enters: request bodies, uploads.

The API cases run the real app on uvicorn with a real Redis (``tests.support.api_fixtures``).
"""

from __future__ import annotations

import json

import pytest

from relay.state.job_queues import PROCESSING
from relay.text import for_terminal, holds_lone_surrogate, scrub_surrogates, without_controls
from tests.support.api_fixtures import V1, Api, api_factory_fixture, api_fixture  # noqa: F401


def test_scrub_replaces_only_lone_surrogates() -> None:
    valid = "café 😀 日本"
    assert scrub_surrogates(valid) is valid
    assert scrub_surrogates("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    assert scrub_surrogates("a\ud800b").encode() == "a\ufffdb".encode()


def test_lone_surrogates_are_found_in_keys_values_and_nesting() -> None:
    assert not holds_lone_surrogate({"fields": [{"name": "é😀"}]})
    for bad in ({"\ud800": 1}, [1, [{"a": "x\udc00"}]], "\ud83d"):
        assert holds_lone_surrogate(bad)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),
        ("ok\r\nnext", "ok\\r\\nnext"),
        ("\x9b31m", "\\x9b31m"),  # the one-byte CSI
        ("abc\u202edcba", "abc\\u202edcba"),  # a bidi override
        ("\x07\x00\x7f", "\\x07\\x00\\x7f"),
        ("x\ud800", "x\\ud800"),
        ("café 😀 日本 tab-less", "café 😀 日本 tab-less"),
    ],
)
def test_for_terminal_escapes_what_a_terminal_would_interpret(raw: str, shown: str) -> None:
    assert for_terminal(raw) == shown
    assert for_terminal(raw).isprintable()


# -- the API ---------------------------------------------------------------------------------


def test_a_lone_surrogate_in_process_fields_is_a_422_not_a_reset(api: Api) -> None:
    api.upload_ok("acme", "b1")
    body = b'{"fields": [{"name": "\\ud800"}]}'
    r = api.client.post(
        f"{V1}/batches/b1/process",
        headers={**api.auth("acme"), "Content-Type": "application/json"},
        content=body,
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["type"] == "validation_error"
    assert "surrogate" in r.json()["error"]["message"]
    # Nothing was handed out; a valid non-ASCII field name still works.
    assert api.redis.llen(f"rq:queue:{PROCESSING}") == 0
    ok = api.client.post(
        f"{V1}/batches/b1/process", headers=api.auth("acme"), json={"fields": [{"name": "é😀"}]}
    )
    assert ok.status_code == 202, ok.text
    assert api.redis.llen(f"rq:queue:{PROCESSING}") == 1


def test_a_lone_surrogate_in_a_webhook_body_is_a_422(api: Api) -> None:
    api.upload_ok("acme", "b1")
    r = api.client.put(
        f"{V1}/batches/b1/webhook",
        headers={**api.auth("acme"), "Content-Type": "application/json"},
        content=b'{"url": "https://example.com/\\udc00"}',
    )
    assert r.status_code == 422, r.text


def _multipart(filename: bytes, content: bytes) -> tuple[bytes, str]:
    boundary = "relay-test-boundary"
    body = (
        b"--relay-test-boundary\r\n"
        b'Content-Disposition: form-data; name="batch_name"\r\n\r\nb1\r\n'
        b"--relay-test-boundary\r\n"
        b'Content-Disposition: form-data; name="file"; filename="' + filename + b'"\r\n'
        b"Content-Type: text/csv\r\n\r\n" + content + b"\r\n--relay-test-boundary--\r\n"
    )
    return body, f"multipart/form-data; boundary={boundary}"


@pytest.mark.parametrize("filename", [b"\xff\xfe.csv", b"\xed\xa0\x80.csv", b"a\x1b[2J.csv"])
def test_an_upload_whose_filename_is_not_valid_utf8_never_causes_a_500(
    api: Api, filename: bytes
) -> None:
    body, content_type = _multipart(filename, b"sku\nA\n")
    r = api.client.post(
        f"{V1}/documents",
        headers={**api.auth("acme"), "Content-Type": content_type},
        content=body,
    )
    assert r.status_code in (201, 400, 422), r.text
    if r.status_code == 201:
        doc = r.json()
        json.dumps(doc["filename"]).encode()  # it made it through JSON and back
        got = api.client.get(f"{V1}/documents/{doc['id']}", headers=api.auth("acme"))
        assert got.status_code == 200
        listed = api.client.get(f"{V1}/batches/b1/results", headers=api.auth("acme"))
        assert listed.status_code == 200


def test_without_controls_keeps_every_printable_character_but_the_invisible_ones() -> None:
    removed = (
        [chr(c) for c in range(0x20)]
        + [chr(c) for c in range(0x7F, 0xA0)]
        + ["\u2028", "\u2029", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u180e"]
        + ["\u200e", "\u200f", "\u061c", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e"]
        + ["\u2066", "\u2067", "\u2068", "\u2069"]
    )
    for char in removed:
        assert without_controls(f"a{char}b") == "ab", hex(ord(char))
    kept = "Straße naïve счёт 請求書 עברית العربية 😀 e\u0301 a-b_c.d (1)"
    assert without_controls(kept) == kept
    assert without_controls("plain.csv") == "plain.csv"
