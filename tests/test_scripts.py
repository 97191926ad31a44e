"""The scripts' replies: a JSON object read by name, or a single value (``relay.state.scripts``)."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from relay.state.scripts import _COMMENT, NAMES, _used, all_helpers, fields, source

POSITIONAL = {
    "ratelimit",  # three integers on the status path, documented (docs/decisions.md)
    "ratelimit_weight",  # ratelimit's three integers, read by the same decoder
    "claim_next",  # its JSON object, then the turn's bytes (binary), documented (scripts.py)
}
# `return {` with something in the braces: a Lua table answered as a list of positions.
_TABLE_REPLY = re.compile(r"^\s*return\s*\{\s*[^}\s]", re.MULTILINE)


def _text(name: str) -> str:
    return (resources.files("relay.state") / "lua" / f"{name}.lua").read_text()


def test_no_script_answers_a_list_read_by_position() -> None:
    offenders = [n for n in NAMES if n not in POSITIONAL and _TABLE_REPLY.search(_text(n))]
    assert offenders == []
    # The check sees what it is for, and the exception is still one.
    assert _TABLE_REPLY.search("local x = 1\nreturn {created, seq}\n")
    assert _TABLE_REPLY.search(_text("ratelimit"))


def test_a_reply_is_read_by_name() -> None:
    assert fields(b'{"found":1,"canceled":["doc_a"]}') == {"found": 1, "canceled": ["doc_a"]}
    assert fields('{"outcome":"done"}').get("outside", []) == []


def test_a_lean_script_starts_with_the_helpers_it_uses_and_no_others(redis: Any) -> None:
    assert source("ratelimit") == _text("ratelimit")  # uses none
    upload = source("upload")
    assert upload.endswith(_text("upload"))
    defined = set(re.findall(r"^local function (\w+)", upload, re.MULTILINE))
    # Used by upload.lua directly (refuse, key_finished, batch_prefix, finished_member), and
    # nothing it does not use, however its comments name them (release_charge).
    assert defined == {"refuse", "key_finished", "batch_prefix", "finished_member"}
    # A helper used only through another one comes with it, before it.
    lib = _used("return drop_slices('s', 'l', 'x')", all_helpers())
    assert lib.index("local function slice_member") < lib.index("local function drop_slices")
    keys = _used("return key_blob('p', 'x')", all_helpers())
    assert redis.eval(keys + "return key_blob('p:', 'x')", 0) == b"p:doc:x:blob"
    # Every script is lean: renew uses none of the library's forty-odd helpers, claim a few.
    assert source("renew") == _text("renew")
    assert source("claim").endswith(_text("claim"))
    assert len(source("claim")) < len(_text("_lib")) / 4


# Lua string literals, blanked for the check below (comments go by relay.state.scripts' pattern).
_LUA_STRING = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")
_LUA_BUILTINS = {
    *("tonumber", "tostring", "type", "pairs", "ipairs", "unpack", "error", "assert"),
    *("pcall", "select", "next", "setmetatable", "getmetatable", "rawget", "rawset"),
    *("function", "if", "and", "or", "not", "return", "elseif", "while", "until"),
}


def _unbound_calls(text: str) -> set[str]:
    """The names ``text`` calls as functions that it neither defines (a local, a parameter,
    a loop variable) nor gets from Lua or Redis (``redis.call`` and the like are fields of
    a library table, not names): what would be a global at run time, which Redis refuses."""
    text = _LUA_STRING.sub("''", _COMMENT.sub("", text))
    called = set(re.findall(r"(?<![.:\w])([A-Za-z_]\w*)\s*\(", text))
    bound = set(re.findall(r"\blocal\s+function\s+(\w+)", text))
    for names in [
        *re.findall(r"\blocal\s+([\w\s,]+?)\s*=", text),
        *re.findall(r"function\s*[\w.:]*\s*\(([^)]*)\)", text),
        *re.findall(r"\bfor\s+([\w\s,]+?)\s+in\b", text),
    ]:
        bound |= {n.strip() for n in names.split(",") if n.strip()}
    return called - bound - _LUA_BUILTINS


def test_every_script_brings_every_helper_it_calls() -> None:
    """Checked apart from :func:`relay.state.scripts.source`'s own reading of the helpers: a helper
    it left out would be a global at run time, an error on that path only."""
    assert {n: _unbound_calls(source(n)) for n in NAMES} == {n: set() for n in NAMES}
    # The check sees a missing helper: claim's body alone calls helpers it does not define.
    assert _unbound_calls(_text("claim")) != set()
