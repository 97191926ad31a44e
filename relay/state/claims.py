"""The workers' side of document state: claims of documents (or slices of them) with their
leases, renewals, outcomes and requeues (``Store``), for the processing worker, the
detector's sweeper and the CLI. The API's side, uploads and reads, is ``relay.state.store``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import NoScriptError

from relay.redis import keyspace
from relay.redis.clients import is_cluster
from relay.state.blobs import BlobStore, drop, in_redis
from relay.state.scripts import Scripts, fields
from relay.state.store import BatchRef
from relay.timefmt import now_ms

log = logging.getLogger("relay.state.claims")


@dataclass(frozen=True)
class Slice:
    """Which slice of a document read across workers a claim is (``relay.state.slices``)."""

    index: int  # 1 to count, in page order
    count: int  # the document's slices
    pages: str  # its pages, canonical text ("5-8": relay.extract.pages.PageRanges)
    kind: str  # "pdf" or "image"

    def member(self, doc_id: str) -> str:
        """Its entry in the fair queue and its member in ``leases``."""
        return keyspace.slice_member(doc_id, self.index)


@dataclass(frozen=True)
class Claim:
    """What a worker needs after claiming a document, or a slice of one (``slice``)."""

    doc_id: str
    batch: BatchRef
    token: str
    fields: list[str]
    filename: str
    content_type: str
    blob_kind: str
    claims: int
    # Bytes finishing it frees from the account's pending total, as claimed (claim_next.lua).
    freeable: int = 0
    # The pages its hand-out asked for (canonical text, relay.extract.pages; "" for all).
    pages: str = ""
    # Trace contexts (W3C traceparent, '' when none was kept: relay.tracing): the document's
    # (its upload's) and the batch's when claimed (the process call that handed it out).
    trace: str = ""
    batch_trace: str = ""
    slice: Slice | None = None  # the claim is of this slice of the document


@dataclass(frozen=True)
class Outcome:
    """A claimed document's outcome for ``Store.finish_many``: the result (the JSON of
    ``{"line_items": [...], "tables": [...]}``) or the error (code, message), and when it
    ended (ms since the epoch)."""

    claim: Claim
    result: bytes | None
    error: tuple[str, str] | None
    at: int


# Entries claim_next.lua may drop in one call (documents claimed by name meanwhile) before it
# answers "nothing claimed, call again": bounds the script's run time.
CLAIM_SKIP_LIMIT = 100


def _claim(doc_id: str, ref: BatchRef, token: str, c: dict[str, Any]) -> Claim:
    """A Claim from claim_doc's table (_fair.lua), decoded from the script's JSON."""
    return Claim(
        doc_id=doc_id,
        batch=ref,
        token=token,
        fields=list(json.loads(c["fields"])),
        filename=c["filename"],
        content_type=c["content_type"],
        blob_kind=c["blob"],
        claims=int(c["claims"]),
        freeable=int(c.get("freeable", 0)),
        pages=str(c.get("pages") or ""),
        trace=str(c.get("trace") or ""),
        batch_trace=str(c.get("batch_trace") or ""),
        slice=Slice(int(c["slice"]), int(c["slices"]), c["slice_pages"], c["kind"])
        if "slice" in c
        else None,
    )


def _doc_keys(ref: BatchRef, doc_id: str) -> dict[str, str]:
    s = ref.shard
    return {
        "doc": keyspace.doc(s, doc_id),
        "batch": ref.key,
        "started": keyspace.batch_started(s, ref.account, ref.name),
        "leases": keyspace.leases(s),
        "outbox": keyspace.outbox(s),
        "items": keyspace.doc_items(s, doc_id),
        "blob": keyspace.blob(s, doc_id),
        "pending_bytes": keyspace.account_pending_bytes(s, ref.account),
    }


class Store:
    """The workers' and sweepers' view: claim, renew, finish, requeue."""

    def __init__(
        self,
        client: redis.Redis,
        blobs: BlobStore,
        clock: Callable[[], int] = now_ms,
        *,
        keep_sources: bool = True,
    ) -> None:
        self.redis = client
        self.scripts = Scripts(client)
        self.blobs = blobs
        self.clock = clock  # ms since the epoch; tests pass their own
        # RELAY_KEEP_SOURCES: a finished document's bytes stay until its batch goes
        # (relay.state.sources), else they go when it finishes.
        self.keep_sources = keep_sources
        # Bytes read ahead for a turn's claims (prefetch), by document id.
        self._prefetched: dict[str, bytes | None] = {}

    def claim(self, ref: BatchRef, doc_id: str, token: str, lease_ms: int) -> Claim | None:
        k = _doc_keys(ref, doc_id)
        reply = self.scripts(
            "claim",
            [k["doc"], k["batch"], k["started"], k["leases"]],
            [doc_id, self.clock(), lease_ms, token],
        )
        claimed = fields(reply)
        return _claim(doc_id, ref, token, claimed) if claimed["claimed"] else None

    def claim_next(self, shard: int, token: str, lease_ms: int) -> tuple[Claim | None, bool]:
        """Claim the shard's next document in fair order (``claim_next.lua``). Returns the
        claim (None when nothing was claimed) and whether documents still wait in the shard."""
        claims, more = self.claim_turn(shard, token, lease_ms, documents=1, max_bytes=0)
        return (claims[0] if claims else None), more

    def claim_turn(
        self, shard: int, token: str, lease_ms: int, *, documents: int, max_bytes: int
    ) -> tuple[list[Claim], bool]:
        """Claim the shard's next turn in fair order (``claim_next.lua``): the next account's
        first waiting document and, behind it in the same batch, more while they are small
        (at most ``documents``, together within ``max_bytes`` past the first). Returns the
        claims (none when nothing was claimed) and whether documents still wait in the
        shard."""
        reply = self.scripts(
            "claim_next",
            [keyspace.leases(shard)],
            [
                keyspace.shard_prefix(shard),
                self.clock(),
                lease_ms,
                token,
                CLAIM_SKIP_LIMIT,
                documents,
                max_bytes,
            ],
        )
        c = fields(reply[0])
        more = int(c["more"]) == 1
        if not c.get("claims"):
            return [], more
        ref = BatchRef(c["account"], c["batch"], shard)
        shared = {"fields": c["fields"], "batch_trace": c.get("trace")}
        claims = [_claim(d["id"], ref, token, {**d, **shared}) for d in c["claims"]]
        # The bytes held in Redis came with the claim (read_blob takes them once).
        held = [cl for cl in claims if in_redis(cl.blob_kind)]
        for cl, value in zip(held, reply[1:], strict=True):
            self._prefetched[cl.doc_id] = None if value is None else bytes(value)
        return claims, more

    def waiting_shards(self) -> list[int]:
        """The shards with documents waiting in their fair queue: one ``MGET`` of the
        shards' waiting counters (``keyspace.waiting``, kept by the same scripts as the fair
        queue, absent at 0); on a Cluster, whose keys of several slots no one command may
        name, one pipelined ``EXISTS`` per shard."""
        counters = [keyspace.waiting(s) for s in keyspace.all_shards()]
        if not is_cluster(self.redis):
            return [s for s, n in enumerate(self.redis.mget(counters)) if n and int(n) > 0]
        with self.redis.pipeline(transaction=False) as pipe:
            for key in counters:
                pipe.exists(key)
            found = pipe.execute()
        return [s for s, there in enumerate(found) if there]

    def documents_wait(self) -> bool:
        """Whether whole documents, not only slices of documents read across workers, wait
        in some shard's fair queue (``keyspace.waiting_slices``): one ``MGET`` (on a Cluster,
        a pipelined ``GET`` per key)."""
        shards = list(keyspace.all_shards())
        keys = [keyspace.waiting(s) for s in shards] + [keyspace.waiting_slices(s) for s in shards]
        if is_cluster(self.redis):
            with self.redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.get(key)
                values = pipe.execute()
        else:
            values = self.redis.mget(keys)
        counts = [int(v or 0) for v in values]
        return any(w > n for w, n in zip(counts[: len(shards)], counts[len(shards) :], strict=True))

    def read_blob(self, claim: Claim) -> bytes | None:
        """The claimed document's bytes: read ahead by ``prefetch`` (taken once), else
        read now; None when they are gone. BlobStoreUnavailable when they are outside Redis
        and their store does not answer (:meth:`wait_for_blob`)."""
        if claim.doc_id in self._prefetched:
            return self._prefetched.pop(claim.doc_id)
        return self.blobs.read(self.redis, claim.batch.shard, claim.doc_id, claim.blob_kind)

    def prefetch(self, claims: Sequence[Claim]) -> None:
        """Read the bytes of a turn's claims held in Redis with one ``MGET`` (one batch, so
        one slot), for ``read_blob`` (a turn is small: ``RELAY_CLAIM_BYTES``). Claims made
        by ``claim_turn`` came with their bytes: nothing is read for them."""
        held = [c for c in claims if in_redis(c.blob_kind) and c.doc_id not in self._prefetched]
        if len(held) < 2:
            return
        values = self.redis.mget([keyspace.blob(c.batch.shard, c.doc_id) for c in held])
        for c, value in zip(held, values, strict=True):
            self._prefetched[c.doc_id] = None if value is None else bytes(value)

    def forget(self, claims: Sequence[Claim]) -> None:
        """Drop what ``prefetch`` read for claims that were not read (their turn ended)."""
        for c in claims:
            self._prefetched.pop(c.doc_id, None)

    def renew(self, claim: Claim, lease_ms: int) -> bool:
        if claim.slice is not None:
            s = claim.batch.shard
            reply = self.scripts(
                "renew_slice",
                [keyspace.doc_slices(s, claim.doc_id), keyspace.leases(s)],
                [claim.doc_id, claim.slice.index, claim.token, self.clock() + lease_ms],
            )
            return int(reply) == 1
        k = _doc_keys(claim.batch, claim.doc_id)
        reply = self.scripts(
            "renew", [k["doc"], k["leases"]], [claim.doc_id, claim.token, self.clock() + lease_ms]
        )
        return int(reply) == 1

    def finish(
        self,
        claim: Claim,
        *,
        line_items: list[dict[str, Any]] | None = None,
        tables: list[dict[str, Any]] | None = None,
        result: bytes | None = None,
        error: tuple[str, str] | None,
    ) -> tuple[bool, int]:
        """Store the outcome. Returns (stored, completion_seq or 0); not stored when the
        lease was lost meanwhile (another worker owns the document now). The result comes
        as ``line_items`` and ``tables``, or already serialised as ``result`` (the JSON of
        ``{"line_items": [...], "tables": [...]}`` the bounded extraction returns)."""
        if result is None and line_items is not None:
            value = {"line_items": line_items, "tables": tables or []}
            result = json.dumps(value, separators=(",", ":")).encode()
        stored, seq = self.finish_many([Outcome(claim, result, error, self.clock())])
        return stored[0], seq

    def finish_many(self, outcomes: Sequence[Outcome]) -> tuple[list[bool], int]:
        """Store the outcomes of documents of one batch in one script (``finish.lua``).
        Returns whether each was stored (not when its lease was lost) and the batch's
        completion_seq when they completed it, else 0."""
        ref = outcomes[0].claim.batch
        s = ref.shard
        script_keys = [
            ref.key,
            keyspace.leases(s),
            keyspace.outbox(s),
            keyspace.account_pending_bytes(s, ref.account),
            keyspace.blob_deletions(s),
        ]
        args: list[Any] = ["1" if self.keep_sources else "0"]
        for o in outcomes:
            if o.claim.batch != ref:
                raise ValueError("finish_many: documents of one batch")
            doc_id = o.claim.doc_id
            script_keys += [
                keyspace.doc(s, doc_id),
                keyspace.doc_items(s, doc_id),
                keyspace.blob(s, doc_id),
            ]
            code, message = o.error if o.error is not None else ("", "")
            args += [
                doc_id,
                o.claim.token,
                o.at,
                "failed" if o.error is not None else "succeeded",
                o.result if o.result is not None else "",
                code,
                message,
            ]
        reply = fields(self._finish(ref.account, outcomes, script_keys, args))
        stored = [bool(x) for x in reply["stored"]]
        drop(self.redis, self.blobs, s, reply.get("outside", []))
        return stored, int(reply["seq"])

    def _finish(
        self, account: str, outcomes: Sequence[Outcome], script_keys: list[str], args: list[Any]
    ) -> Any:
        """Run ``finish.lua`` and take the bytes it frees off the account's total (another
        slot). The bytes the claims said they would free are taken off in the same round
        trip (the script and a ``DECRBY``, pipelined); a difference (a lease lost meanwhile,
        a claim by name that did not say) is settled after it, as are a refused script and a
        Redis without the script. On a Cluster: the script, then the ``DECRBY``."""
        expected = sum(o.claim.freeable for o in outcomes)
        total = keyspace.account_pending_total(account)
        taken = 0
        if expected and not is_cluster(self.redis):
            with self.redis.pipeline(transaction=False) as pipe:
                self.scripts.evalsha(pipe, "finish", script_keys, args)
                pipe.decrby(total, expected)
                raw, left = pipe.execute(raise_on_error=False)
            if not isinstance(left, Exception):
                taken = expected
            if isinstance(raw, NoScriptError):
                raw = None
            elif isinstance(raw, Exception):
                self._settle(total, 0, taken, left)
                raise raw
        else:
            raw, left = None, None
        if raw is None:
            raw = self.scripts("finish", script_keys, args)
        self._settle(total, int(fields(raw)["freed"]), taken, left)
        return raw

    def _settle(self, total: str, freed: int, taken: int, left: Any) -> None:
        """The account's total after a finish: ``freed`` bytes off it, ``taken`` of them
        already (``left``: the total then); the key goes at 0 or below (``release_total``)."""
        if freed != taken:
            left = self.redis.decrby(total, freed - taken)
        if freed and isinstance(left, int) and left <= 0:
            self.redis.delete(total)

    def release_total(self, account: str, freed: int) -> None:
        """Take bytes a script freed off the account's total (``AsyncStore``'s docstring);
        the key goes at 0. An upload reserving between the two commands loses its
        reservation from the total: it comes back at the next recount or the next time the
        total reaches 0 (a total below 0 is deleted too)."""
        total = keyspace.account_pending_total(account)
        if self.redis.decrby(total, freed) <= 0:
            self.redis.delete(total)

    def expired_leases(self, shard: int, limit: int = 500) -> list[str]:
        ids = self.redis.zrangebyscore(
            keyspace.leases(shard), "-inf", self.clock(), start=0, num=limit
        )
        return [i.decode() for i in ids]

    def doc_batch(self, shard: int, doc_id: str) -> BatchRef | None:
        account, batch = self.redis.hmget(keyspace.doc(shard, doc_id), ["account", "batch"])
        if account is None or batch is None:
            return None
        return BatchRef(account.decode(), batch.decode(), shard)

    def drop_lease(self, shard: int, member: str) -> bool:
        """Drop the expired lease (``member``: a document's id, or a slice of one:
        ``keyspace.slice_member``) of a document that is gone (its batch purged); False when
        the document is there or its lease was renewed meanwhile."""
        doc_id, _ = keyspace.slice_of(member)
        dropped = self.scripts(
            "drop_lease",
            [keyspace.leases(shard), keyspace.doc(shard, doc_id)],
            [member, self.clock()],
        )
        return int(dropped) == 1

    def requeue(self, ref: BatchRef, doc_id: str, max_claims: int) -> str:
        """Return an expired lease's document to the fair queue (at the front of its batch's
        list), or fail it with worker_lost."""
        k = _doc_keys(ref, doc_id)
        reply = self.scripts(
            "requeue",
            [
                k["doc"],
                k["batch"],
                k["started"],
                k["leases"],
                k["outbox"],
                k["blob"],
                k["pending_bytes"],
                keyspace.blob_deletions(ref.shard),
            ],
            [
                doc_id,
                self.clock(),
                max_claims,
                keyspace.shard_prefix(ref.shard),
                ref.account,
                ref.name,
                "1" if self.keep_sources else "0",
            ],
        )
        result = fields(reply)
        if result["freed"]:
            self.release_total(ref.account, result["freed"])
        if result.get("outside"):
            drop(self.redis, self.blobs, ref.shard, [result["outside"]])
        return str(result["outcome"])

    def wait_for_blob(self, claim: Claim, *, wait_ms: int, pause_ms: int = 30_000) -> str:
        """Give the claim back while the blob store does not answer (``wait_blob.lua``): the
        document (or the slice) waits, its claim uncounted, and is claimed again after a
        pause (1 s, then as long as it has waited, at most ``pause_ms``). Returns ``waits``,
        ``expired`` (it has waited ``wait_ms`` already: the caller fails it) or ``lost``
        (the claim is another's now)."""
        s = claim.batch.shard
        reply = fields(
            self.scripts(
                "wait_blob",
                [
                    keyspace.doc(s, claim.doc_id),
                    keyspace.leases(s),
                    keyspace.doc_slices(s, claim.doc_id),
                ],
                [
                    claim.doc_id,
                    claim.token,
                    self.clock(),
                    pause_ms,
                    wait_ms,
                    str(claim.slice.index) if claim.slice is not None else "",
                ],
            )
        )
        return str(reply["outcome"])
