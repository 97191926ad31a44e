"""The scripts' replies: a JSON object read by name, or a single value (``relay.scripts``)."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from relay.scripts import NAMES, _definitions, _used, fields, source

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


def test_a_lean_script_starts_with_the_helpers_it_uses_and_no_others(redis: Any) -> None:
    assert source("ratelimit") == _text("ratelimit")  # uses none
    upload = source("upload")
    assert upload.endswith(_text("upload"))
    defined = set(re.findall(r"^local function (\w+)", upload, re.MULTILINE))
    # Used by upload.lua directly (refuse, key_finished, batch_prefix, finished_member), and
    # nothing it does not use, however its comments name them (release_charge).
    assert defined == {"refuse", "key_finished", "batch_prefix", "finished_member"}
    # A helper used only through another one comes with it, before it.
    lib = _used("return key_blob('p', 'x')", _definitions(_text("_lib")))
    assert lib.index("local function key_doc") < lib.index("local function key_blob")
    assert redis.eval(lib + "return key_blob('p:', 'x')", 0) == b"p:doc:x:blob"
    # Every other script starts with the whole library, as before.
    assert source("renew").startswith(_text("_lib") + "\n" + _text("_fair"))
