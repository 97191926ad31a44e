"""The Lua scripts in ``relay/state/lua/``: loaded once, each prefixed with the helpers it uses.

Every state transition that touches more than one key is one of these scripts, so nothing
is half-written when a process dies. Each script's header comment lists its KEYS and ARGV.
Every script starts with the helpers it uses (:func:`source`): the key functions written
from ``relay.redis.keyspace``, the shared helpers of ``_lib.lua`` and the fair queue's of
``_fair.lua``.

A script that answers more than one value answers a JSON object (``cjson.encode`` of a
table with named fields), read with :func:`fields`: callers read a reply by name, never by
position. One that answers a single value (a count, 1/0) answers it bare. Two exceptions:
``ratelimit`` answers three integers, on every status request, where JSON costs more than
the rest of its decoding (docs/decisions.md); ``relay.state.rate_limits`` alone reads it
(and ``ratelimit_weight``'s answer, the same three). And
``claim_next`` answers its JSON object first, then the claimed documents' bytes, which are
binary and so cannot ride in the JSON (``Store.claim_turn`` alone reads it).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import ResponseError

from relay.redis import keyspace

NAMES = (
    "upload",
    "process",
    "claim",
    "claim_next",
    "renew",
    "finish",
    "requeue",
    "wait_blob",
    "split",
    "renew_slice",
    "slice_done",
    "finish_slice",
    "requeue_slice",
    "drop_lease",
    "delete_batch",
    "ratelimit",
    "ratelimit_weight",
    "create_delivery",
    "claim_deliveries",
    "record_attempt",
    "release_delivery",
    "cancel_deliveries",
    "retry_delivery",
    "register_webhook",
    "register_operational_webhook",
    "verification_pending",
    "set_webhook_disabled",
    "rotate_signing",
    "purge_batch",
    "purge_events",
    "delivery_page",
    "recover_deliveries",
    "append_event",
    "event_page",
    "trim_event_log",
)


_REFUSAL = re.compile(r"REFUSED ([a-z_]+)")


def refusal(exc: ResponseError) -> str | None:
    """The reason of a script's refusal (``refuse('missing')`` in ``_lib.lua``), matched
    exactly; None for any other error reply, which the caller re-raises."""
    m = _REFUSAL.fullmatch(str(exc))
    return m.group(1) if m else None


def fields(reply: bytes | str) -> dict[str, Any]:
    """A script's JSON object reply (``cjson.encode``), by field name. cjson leaves out a
    field whose value is nil and writes an empty list as ``{}``: scripts leave a list out
    when it is empty, and callers read it with ``.get(name, [])``."""
    out: dict[str, Any] = json.loads(reply)
    return out


_DEFINITION = re.compile(r"^local (?:function )?([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMENT = re.compile(r"--[^\n]*")


def _definitions(text: str) -> list[tuple[str, str]]:
    """The top-level definitions of a helpers file as (name, text), in order: each runs from
    its ``local`` line to the next one (the comment lines before a definition go with the one
    above: harmless)."""
    starts = list(_DEFINITION.finditer(text))
    return [
        (m.group(1), text[m.start() : starts[i + 1].start() if i + 1 < len(starts) else None])
        for i, m in enumerate(starts)
    ]


def _used(body: str, helpers: list[tuple[str, str]]) -> str:
    """The helpers ``body`` uses, directly or through each other, in their order."""
    defined = dict(helpers)
    wanted: set[str] = set()
    todo = [body]
    while todo:
        for name in _NAME.findall(_COMMENT.sub("", todo.pop())):
            if name in defined and name not in wanted:
                wanted.add(name)
                todo.append(defined[name])
    return "".join(text for name, text in helpers if name in wanted)


def lua_key_function(fn: Callable[..., str]) -> str:
    """A key function of ``relay.redis.keyspace`` written in Lua: called with a marker for
    each parameter, its result read back as the concatenation Lua performs. A shard's key
    (first parameter ``shard``) becomes ``key_<name>(p, ...)`` over the shard prefix ``p``;
    a set member keeps its name."""
    params = list(inspect.signature(fn).parameters)
    sharded = params[0] == "shard"
    names = params[1:] if sharded else params
    text = fn(0, *(f"\0{n}\0" for n in names)) if sharded else fn(*(f"\0{n}\0" for n in names))
    parts: list[str] = []
    if sharded:
        prefix = keyspace.shard_prefix(0)
        if not text.startswith(prefix):
            raise ValueError(f"{fn.__name__}: not a key of the shard")
        text, parts = text[len(prefix) :], ["p"]
    for i, piece in enumerate(text.split("\0")):
        if i % 2:
            parts.append(piece)
        elif piece:
            if "'" in piece or "\\" in piece:
                raise ValueError(f"{fn.__name__}: {piece!r} needs quoting")
            parts.append(f"'{piece}'")
    lua_name = f"key_{fn.__name__}" if sharded else fn.__name__
    args = ", ".join((["p"] if sharded else []) + names)
    return f"local function {lua_name}({args}) return {' .. '.join(parts)} end\n"


@cache
def all_helpers() -> list[tuple[str, str]]:
    """Every helper a script may use, as (name, text) in order: the key functions and the
    operational batch's name from ``relay.redis.keyspace``, then the definitions of
    ``_lib.lua`` and ``_fair.lua``."""
    lua = resources.files("relay.state") / "lua"
    keys = "".join(lua_key_function(fn) for fn in keyspace.IN_SCRIPTS.values())
    keys += f"local OPERATIONAL_BATCH = '{keyspace.OPERATIONAL_BATCH}'\n"
    texts = [keys] + [(lua / part).read_text() for part in ("_lib.lua", "_fair.lua")]
    return [d for text in texts for d in _definitions(text)]


@cache
def source(name: str) -> str:
    """The script's text as Redis runs it: the helpers it uses (directly or through each
    other), in their order, then the script.

    Only those: every helper is a closure made afresh on each run, so a whole library costs
    each run its allocations, and the Lua heap's garbage collection with them, whether used
    or not."""
    body = (resources.files("relay.state") / "lua" / f"{name}.lua").read_text()
    return _used(body, all_helpers()) + body


class Scripts:
    """The scripts registered on one synchronous client (``scripts.claim(keys, args)``)."""

    def __init__(self, client: redis.Redis) -> None:
        self._scripts = {name: client.register_script(source(name)) for name in NAMES}

    def __call__(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return self._scripts[name](keys=keys, args=args)

    def run(self, name: str, keys: list[str], args: list[Any], client: Any) -> Any:
        """Run on another client or a pipeline (the script is queued, not sent)."""
        return self._scripts[name](keys=keys, args=args, client=client)

    def evalsha(self, pipe: Any, name: str, keys: list[str], args: list[Any]) -> None:
        """Queue the script on a pipeline as a bare ``EVALSHA``: unlike :meth:`run`, the
        pipeline sends no ``SCRIPT EXISTS`` first (a round trip of its own). The caller
        handles a ``NoScriptError`` reply (a Redis restarted or failed over has no scripts),
        e.g. by running the calls again through ``__call__``, which loads the script."""
        pipe.evalsha(self._scripts[name].sha, len(keys), *keys, *args)


class AsyncScripts:
    """The scripts registered on one asyncio client."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._scripts = {name: client.register_script(source(name)) for name in NAMES}

    async def __call__(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return await self._scripts[name](keys=keys, args=args)

    def sha(self, name: str) -> str:
        """The script's SHA-1, for a raw ``EVALSHA`` in a pipeline."""
        sha: str = self._scripts[name].sha
        return sha

    def run(self, name: str, keys: list[str], args: list[Any], client: Any) -> Any:
        """Queue on a pipeline (returns the pipeline's awaitable, not the result)."""
        return self._scripts[name](keys=keys, args=args, client=client)
