"""The scripts' replies: a JSON object read by name, or a single value (``relay.scripts``)."""

from __future__ import annotations

import re
from importlib import resources

from relay.scripts import NAMES, fields

POSITIONAL = {
    "ratelimit",  # three integers on the status path, documented (docs/decisions.md)
    "claim_next",  # its JSON object, then the turn's bytes (binary), documented (scripts.py)
}
# `return {` with something in the braces: a Lua table answered as a list of positions.
_TABLE_REPLY = re.compile(r"^\s*return\s*\{\s*[^}\s]", re.MULTILINE)


def _text(name: str) -> str:
    return (resources.files("relay") / "lua" / f"{name}.lua").read_text()


def test_no_script_answers_a_list_read_by_position() -> None:
    offenders = [n for n in NAMES if n not in POSITIONAL and _TABLE_REPLY.search(_text(n))]
    assert offenders == []
    # The check sees what it is for, and the exception is still one.
    assert _TABLE_REPLY.search("local x = 1\nreturn {created, seq}\n")
    assert _TABLE_REPLY.search(_text("ratelimit"))


def test_a_reply_is_read_by_name() -> None:
    assert fields(b'{"found":1,"canceled":["doc_a"]}') == {"found": 1, "canceled": ["doc_a"]}
    assert fields('{"outcome":"done"}').get("dir_docs", []) == []
