"""Foreign text made safe: for storage and JSON (lone surrogates) and for a terminal (controls).

Text reaches relay from clients (JSON bodies), from documents (the extractor's rows) and from
receivers (response excerpts). Python strings may hold *lone surrogates* (``"\\ud800"`` in JSON
decodes to one), which no UTF-8 encoder accepts: one in a stored row or an echoed value makes
every later response that carries it fail. And text shown to an operator may hold ANSI escape
sequences that clear or rewrite their screen.

* :func:`scrub_surrogates` replaces each lone surrogate with U+FFFD (valid text is returned
  as is, the same object);
* :func:`holds_lone_surrogate` finds one anywhere in a parsed JSON value (the API refuses
  such a body with a 422);
* :func:`for_terminal` escapes what a terminal would interpret (``\\x1b[2J`` prints as those
  seven characters);
* :func:`without_controls` removes what must not be part of a name at all (an upload's
  filename): controls, line and paragraph separators, invisible characters and bidi
  controls, which would break a line in a log or a header, hide part of the name, or show it
  in another order than it is stored (``invoice\\u202efdp.exe`` reads as ``invoiceexe.pdf``).
"""

from __future__ import annotations

import re

__all__ = [
    "for_terminal",
    "has_lone_surrogate",
    "holds_lone_surrogate",
    "scrub_surrogates",
    "without_controls",
]

# In a Python str every code point in this range is a lone surrogate: a valid pair from JSON
# (or UTF-16) decodes to one astral code point, never to two surrogates.
_SURROGATE = re.compile("[\ud800-\udfff]")
_REPLACEMENT = "\ufffd"


def has_lone_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def scrub_surrogates(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD; other characters untouched."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(_REPLACEMENT, text)


def holds_lone_surrogate(value: object) -> bool:
    """Whether a string or key anywhere in ``value`` (parsed JSON) holds a lone surrogate,
    which cannot be stored or sent back as UTF-8.

    Walks iteratively: the value's depth is bounded by the JSON parser, not by this function.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if has_lone_surrogate(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def for_terminal(text: str) -> str:
    """``text`` with every character that is not printable on its own escaped Python-style.

    Controls (C0, DEL, C1: ANSI escape sequences start with ``\\x1b`` or ``\\x9b``), format
    characters (bidi overrides that reorder what follows), line and paragraph separators,
    surrogates and unassigned code points are escaped; everything else, letters of any
    script and emoji included, is kept. The CLI passes every foreign string through this.
    """
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


# Removed from names by without_controls (one class, so one pass):
# - C0 controls and DEL, C1 controls (U+0080-U+009F: U+0085 NEL breaks lines, U+009B is CSI);
# - line and paragraph separators (U+2028, U+2029);
# - zero-width and invisible characters: U+200B-U+200D (space, non-joiner, joiner), U+2060
#   (word joiner) and the invisible operators U+2061-U+2064, U+FEFF (BOM, zero-width
#   no-break space), U+180E (Mongolian vowel separator);
# - bidi controls: U+200E, U+200F (LRM, RLM), U+061C (ALM), U+202A-U+202E (embeddings and
#   overrides), U+2066-U+2069 (isolates).
_NOT_IN_NAMES = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u2060-\u2064\ufeff\u180e"
    "\u061c\u202a-\u202e\u2066-\u2069]"
)


def without_controls(text: str) -> str:
    """``text`` with every control, line or paragraph separator, zero-width or invisible
    character and bidi control removed (the list above ``_NOT_IN_NAMES``); letters of any
    script, marks and emoji kept."""
    if text.isascii() and text.isprintable():
        return text
    return _NOT_IN_NAMES.sub("", text)
