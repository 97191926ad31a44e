"""Every Redis key relay uses, one function each.

Naming: ``relay:`` then, for state that scripts touch together, a hash tag ``{rN}`` naming one
of the shards. A batch, its documents, their blobs, its webhook and deliveries all live
in the batch's shard, together with the shard-wide indexes (leases, the fair queue of
handed-out documents, due deliveries, the outbox) that the same scripts update. So every script
touches keys of a single slot and the state can move to Redis Cluster. Ids carry their shard
after the prefix, one hex digit below 16 (``doc_3…``, ``msg_3…``) and three from 16
(``doc_02a…``), so a key follows from an id without a lookup.

How many shards: ``RELAY_SHARDS`` (16 by default), raised, never lowered. A deployment keeps
in Redis every count it has used (``relay.redis.shards``) and each process installs them here
(:func:`use`, a :class:`ShardMap`): a new batch goes to its shard under the newest count in
force, a batch is looked for in its shard under each count (:func:`batch_shards`, data
written under 16 shards stays where it is), and the per-shard loops walk :func:`all_shards`,
every shard any count has used.

Account-wide records (API keys, rate-limit windows, signing material) are not touched by
scripts together with batch state and carry no shard tag.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

DEFAULT_SHARDS = 16  # RELAY_SHARDS's default: what every deployment started with
MIN_SHARDS = 16  # ids written before RELAY_SHARDS existed name shards 0-15
MAX_SHARDS = 256  # ids hold up to 4096 (three hex digits); docs/decisions.md: why 256
PREFIX = "relay"

_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"
# An id: its kind, the shard (hex: one digit below 16, three from 16; the length tells which),
# 20 characters of _ID_ALPHABET (100 bits).
_ID_SHARD, _ID_TOKEN = "(?:[0-9a-f]|[0-9a-f]{3})", "[a-z2-7]{20}"
_ID_RE = re.compile(rf"(doc|msg)_({_ID_SHARD})({_ID_TOKEN})")


def id_pattern(kind: str) -> str:
    """The anchored pattern of a well-formed ``kind`` id (``doc``, ``msg``), the one the
    API's schemas and checks use: ``_ID_RE``'s, for that kind."""
    return f"^{kind}_{_ID_SHARD}{_ID_TOKEN}$"


@dataclass(frozen=True)
class ShardMap:
    """The shard counts a deployment has used, each with the time (ms) from which new
    batches take it (the first count: 0). Counts only rise (``relay.redis.shards`` refuses a
    lower one), so every shard that may hold data is below the largest."""

    counts: tuple[tuple[int, int], ...] = ((DEFAULT_SHARDS, 0),)  # (count, from ms), rising

    @property
    def total(self) -> int:
        """Shards that may hold data: ``range(total)`` covers every count used."""
        return max(c for c, _ in self.counts)

    @property
    def first(self) -> int:
        """The count the deployment started with: the reserved pseudo-batches' shards."""
        return min(c for c, _ in self.counts)

    def current(self, now_ms: int) -> int:
        """The count new batches take at ``now_ms``."""
        return max((c for c, since in self.counts if since <= now_ms), default=self.first)


_map = ShardMap()


def use(shards: ShardMap) -> None:
    """Install the deployment's shard counts in this process (``relay.redis.shards``)."""
    global _map
    _map = shards


def shard_map() -> ShardMap:
    return _map


def all_shards() -> range:
    """Every shard that may hold data: what the per-shard loops walk."""
    return range(_map.total)


def _hash(account: str, batch_name: str) -> int:
    return zlib.crc32(f"{account}\x00{batch_name}".encode())


def shard_for_batch(account: str, batch_name: str) -> int:
    """The shard of a batch created now: stable, spread evenly, computable by any process.
    A batch created under an earlier count stays where it was: :func:`batch_shards`."""
    return _hash(account, batch_name) % _map.current(int(time.time() * 1000))


def batch_shards(account: str, batch_name: str) -> list[int]:
    """Where a batch of this name may live: its shard under each count used, the earliest
    count first, without repeats (one shard while the deployment has used one count)."""
    h = _hash(account, batch_name)
    return list(dict.fromkeys(h % c for c, _ in _map.counts))


def home_shard(account: str, reserved: str) -> int:
    """The shard of an account's reserved pseudo-batch (its event feeds, its operational
    webhook): under the first count, so raising the count never moves them."""
    return _hash(account, reserved) % _map.first


def tag(shard: int) -> str:
    return f"{{r{shard}}}"


def _shard_digits(shard: int) -> str:
    return f"{shard:x}" if shard < 16 else f"{shard:03x}"


def new_id(kind: str, shard: int) -> str:
    """``doc_`` or ``msg_`` + the shard (hex: one digit below 16, three from 16) + 100
    random bits."""
    token = "".join(secrets.choice(_ID_ALPHABET) for _ in range(20))
    return f"{kind}_{_shard_digits(shard)}{token}"


def shard_of_id(kind: str, ident: str) -> int | None:
    """The shard encoded in an id, or None when the id is not well formed."""
    m = _ID_RE.fullmatch(ident)
    if m is None or m.group(1) != kind:
        return None
    return int(m.group(2), 16)


_F = TypeVar("_F", bound=Callable[..., str])

# The key functions the Lua scripts call too, by name (``relay.state.scripts`` writes each as
# a Lua function from the Python one, so a key is defined once: here).
IN_SCRIPTS: dict[str, Callable[..., str]] = {}


def in_scripts(fn: _F) -> _F:
    """Register a key (or set member) function the scripts derive keys with."""
    IN_SCRIPTS[fn.__name__] = fn
    return fn


def shard_prefix(shard: int) -> str:
    """The common prefix of a shard's keys, passed to the scripts that derive keys from ids
    they read (a batch's documents, a shard's due deliveries): those keys cannot be known
    before the script runs, so they cannot come in KEYS. The scripts build them from this
    prefix with the functions registered by :func:`in_scripts` (``key_doc``, ...)."""
    return f"{PREFIX}:{tag(shard)}:"


# -- batch state (shard-tagged) ---------------------------------------------------------


@in_scripts
def batch(shard: int, account: str, name: str) -> str:
    """Hash: the batch record and its per-status counters."""
    return f"{PREFIX}:{tag(shard)}:batch:{account}:{name}"


def batch_docs(shard: int, account: str, name: str) -> str:
    """List: every document id of the batch in upload order (results pagination)."""
    return batch(shard, account, name) + ":docs"


def batch_uploads(shard: int, account: str, name: str) -> str:
    """Hash: an upload's ``Idempotency-Key`` -> the document it made, for the batch's uploads
    that carried one (a retry with the same key answers that document, makes no other).
    Purged with the batch."""
    return batch(shard, account, name) + ":uploads"


def batch_pending(shard: int, account: str, name: str) -> str:
    """List: queued documents not yet handed to the workers."""
    return batch(shard, account, name) + ":pending"


@in_scripts
def batch_started(shard: int, account: str, name: str) -> str:
    """Sorted set: documents that have a ``started_at`` (score), for the batch minimum."""
    return batch(shard, account, name) + ":started"


def account_batches(shard: int, account: str) -> str:
    """Sorted set: the account's batches in this shard, scored by creation time."""
    return f"{PREFIX}:{tag(shard)}:account:{account}:batches"


def account_pending_bytes(shard: int, account: str) -> str:
    """String (integer): bytes of the account's uploads held in Redis in this shard and not
    yet processed or canceled (the pending-bytes quota; ``relay.state.store``). Absent when 0."""
    return f"{PREFIX}:{tag(shard)}:account:{account}:pending_bytes"


def account_pending_total(account: str) -> str:
    """String (integer): bytes of the account's uploads held in Redis, all shards together
    (the pending-bytes quota's O(1) counter; ``relay.state.store.AsyncStore``). Not shard-tagged:
    no script touches it; an upload reserves its bytes here before its script runs and what
    frees them takes them off after. The per-shard ``account_pending_bytes`` stay the exact
    record it falls back on."""
    return f"{PREFIX}:account:{account}:pending_total"


@in_scripts
def doc(shard: int, doc_id: str) -> str:
    """Hash: one document record."""
    return f"{PREFIX}:{tag(shard)}:doc:{doc_id}"


@in_scripts
def doc_items(shard: int, doc_id: str) -> str:
    """String: the document's result as JSON, ``{"line_items": [...], "tables": [...]}``
    (succeeded documents only; a bare list of line items when stored before tables)."""
    return doc(shard, doc_id) + ":items"


@in_scripts
def doc_slices(shard: int, doc_id: str) -> str:
    """Hash: the slices of a document read across workers (``relay.state.slices``): ``n``
    (how many), ``kind`` (``pdf`` | ``image``), ``done`` (how many are), ``bytes`` (their
    stored results' size); per slice ``k`` (1 to n): ``k`` (its pages, ``"5-8"``),
    ``k:pages`` (how many), ``k:state`` (``queued`` | ``processing`` | ``done``),
    ``k:lease``, ``k:claims``, ``k:tables`` (its result, once done). Deleted when the
    document ends."""
    return doc(shard, doc_id) + ":slices"


SLICE_MARK = "#"  # no document id holds it (``_ID_RE``)


@in_scripts
def slice_member(doc_id: str, index: int) -> str:
    """Slice ``index`` of a document: its entry in the fair queue (``batch_ready``) and its
    member in ``leases``, beside the documents' ids."""
    return f"{doc_id}{SLICE_MARK}{index}"


def slice_of(member: str) -> tuple[str, int | None]:
    """A ``leases`` member or fair-queue entry as (document id, slice number or None)."""
    doc_id, mark, index = member.partition(SLICE_MARK)
    return (doc_id, int(index)) if mark and index.isdigit() else (member, None)


@in_scripts
def blob(shard: int, doc_id: str) -> str:
    """String: the uploaded bytes while the document waits and, kept for its page images
    (``RELAY_KEEP_SOURCES``), until its batch is deleted or purged (Redis blob store)."""
    return doc(shard, doc_id) + ":blob"


@in_scripts
def blob_deletions(shard: int) -> str:
    """Sorted set: documents of the shard whose bytes outside Redis (the blob directory, S3)
    must be deleted (``blob_deletion`` members), scored by when a script dropped them (ms).
    The script records them with the change that drops them; its caller deletes them and takes
    them off, the retention sweeper any left (a caller lost, the store down:
    ``relay.state.blobs``)."""
    return f"{PREFIX}:{tag(shard)}:blob_deletions"


@in_scripts
def blob_deletion(kind: str, doc_id: str) -> str:
    """A member of ``blob_deletions``: the store (``dir``, ``s3``) and the document's id (ids
    hold no ``:``, so the first one splits it back: ``blob_deletion_of``)."""
    return f"{kind}:{doc_id}"


def blob_deletion_of(member: str) -> tuple[str, str]:
    """A ``blob_deletions`` member as (store, document id)."""
    kind, _, doc_id = member.partition(":")
    return kind, doc_id


def leases(shard: int) -> str:
    """Sorted set: documents being processed, scored by lease expiry (ms); a slice of a
    document read across workers is there as ``slice_member``."""
    return f"{PREFIX}:{tag(shard)}:leases"


@in_scripts
def batch_ready(shard: int, account: str, name: str) -> str:
    """List: the batch's documents handed to the workers and not yet claimed, in order, and
    slices of its documents read across workers (``slice_member``, at the front).
    Non-empty exactly while the batch is in its account's ``fair_account`` list."""
    return batch(shard, account, name) + ":ready"


@in_scripts
def fair_account(shard: int, account: str) -> str:
    """List: the account's batches in this shard with documents waiting in ``batch_ready``,
    first handed first (an account's batches are served FIFO). Non-empty exactly while the
    account is in the shard's ``fair_ring``."""
    return f"{PREFIX}:{tag(shard)}:fair:{account}"


@in_scripts
def fair_ring(shard: int) -> str:
    """List: the accounts with documents waiting in this shard, served round-robin (the
    claim rotates the head to the tail), so one account's backlog never queues another's."""
    return f"{PREFIX}:{tag(shard)}:fair"


@in_scripts
def waiting(shard: int) -> str:
    """Integer: how many documents (and slices of documents) wait in the shard's fair queue
    (the ``queued`` gauge)."""
    return f"{PREFIX}:{tag(shard)}:waiting"


@in_scripts
def waiting_slices(shard: int) -> str:
    """Integer: how many of the entries ``waiting`` counts are slices (absent at 0): whole
    documents wait exactly when ``waiting`` is the larger (``Store.documents_wait``)."""
    return f"{PREFIX}:{tag(shard)}:waiting:slices"


def delivery_wakeups() -> str:
    """List (in RQ's Redis) of shard numbers: shards whose deliveries became due, for the
    delivery engines that listen (``BLPOP``, ``relay.delivery.engine``). Not shard-tagged,
    like ``process_wake``; at most ``relay.state.job_queues.WAKEUPS_LEN`` items, a TTL."""
    return f"{PREFIX}:delivery:bell"


def process_wake() -> str:
    """String with a TTL: a processing job is waiting in the queue (no second one). Not
    shard-tagged: a processing job serves every shard and no script touches this key."""
    return f"{PREFIX}:processing:wake"


def processing_wakeups() -> str:
    """List (in RQ's Redis) of shard numbers: shards whose documents were handed out, for
    the processing jobs that linger after their work (``relay.runtime.processing``). Like
    ``delivery_wakeups``: not shard-tagged, at most ``relay.state.job_queues.WAKEUPS_LEN`` items, a
    TTL."""
    return f"{PREFIX}:processing:bell"


def replica_waits(shard: int) -> str:
    """Integer: the marker the API writes before ``WAIT`` on a Cluster, in the slot of the
    shard it wrote to (``relay.redis.replicas``); one per shard, never removed."""
    return f"{PREFIX}:{tag(shard)}:waits"


def replica_wait_marker(key: str) -> str:
    """String: the marker written before ``WAIT`` on a Cluster after a write of ``key``, a
    key of no shard (an API key's record, an account's signing material): in ``key``'s own
    slot (its hash tag, or the whole name as the tag when it has none), so on the primary
    that took the write (``relay.redis.replicas``). It expires a minute after the wait."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    if end > start + 1:
        return f"{PREFIX}:{key[start : end + 1]}:waited"
    return f"{PREFIX}:waited:{{{key}}}"


def outbox(shard: int) -> str:
    """Stream: one entry per batch completion, per document event (when the batch's webhook
    asks for them) and per operational event, read by the detector's consumer group."""
    return f"{PREFIX}:{tag(shard)}:outbox"


OUTBOX_GROUP = "relay-detector"  # the detectors' consumer group on every outbox


# -- webhooks and deliveries (shard-tagged, same shard as the batch) ---------------------


OPERATIONAL_BATCH = "~ops"  # the stored name (keys of existing deployments) stays as it was
"""The reserved pseudo-batch of an account's operational webhook and its deliveries (events
about the account's webhooks): ``webhook(home_shard(account, OPERATIONAL_BATCH),
account, OPERATIONAL_BATCH)`` and the batch delivery keys below, so claiming, recording and
retrying work as for a batch. No batch can have this name (``relay.state.model.valid_batch_name``:
a letter or digit first); the scripts get it from here (``relay.state.scripts``)."""


@in_scripts
def webhook(shard: int, account: str, name: str) -> str:
    """Hash: the batch's callback registration."""
    return batch(shard, account, name) + ":webhook"


@in_scripts
def batch_deliveries(shard: int, account: str, name: str) -> str:
    """Sorted set: the batch's delivery ids scored by creation time."""
    return batch(shard, account, name) + ":deliveries"


@in_scripts
def batch_delivery_by_seq(shard: int, account: str, name: str) -> str:
    """Hash: completion_seq -> delivery id (one delivery per completion)."""
    return batch(shard, account, name) + ":delivery_by_seq"


@in_scripts
def batch_parked(shard: int, account: str, name: str) -> str:
    """Set: the batch's deliveries held back while its webhook's verification is pending
    (``claim_deliveries.lua`` parks them; verified: due now; failed or removed: canceled)."""
    return batch(shard, account, name) + ":parked"


@in_scripts
def batch_document_events(shard: int, account: str, name: str) -> str:
    """Sorted set: the batch's document events (``document.succeeded``, ``document.failed``)
    raised and not yet settled, by document id: added by the script that ends the document
    (``end_documents`` in ``_lib.lua``), scored by when (ms); scored 0 once the event's
    delivery exists and is pending; removed when that delivery leaves ``pending`` or no
    delivery is made for the event. While it holds any, the batch's ``batch.completed``
    delivery waits (``claim_deliveries.lua``, ``waits_for_documents``)."""
    return batch(shard, account, name) + ":document_events"


@in_scripts
def delivery(shard: int, delivery_id: str) -> str:
    """Hash: one delivery record."""
    return f"{PREFIX}:{tag(shard)}:delivery:{delivery_id}"


@in_scripts
def delivery_attempts(shard: int, delivery_id: str) -> str:
    """List: the delivery's attempts as JSON, oldest first."""
    return delivery(shard, delivery_id) + ":attempts"


@in_scripts
def due(shard: int) -> str:
    """Sorted set: pending deliveries scored by when they may be attempted (ms).

    A claimed delivery stays here with its score moved to the claim's lease expiry, so a
    worker lost mid-attempt leaves it due again: one index serves both due and leased.
    """
    return f"{PREFIX}:{tag(shard)}:due"


def wake(shard: int) -> str:
    """String with a TTL: a drain job for the shard is waiting in the queue (no second one)."""
    return f"{PREFIX}:{tag(shard)}:wake"


def shard_deliveries(shard: int) -> str:
    """Sorted set: every delivery of the shard by creation time (the operators' listing)."""
    return f"{PREFIX}:{tag(shard)}:deliveries"


@in_scripts
def account_deliveries(shard: int, account: str) -> str:
    """Sorted set: the account's deliveries in this shard by creation time (``search``)."""
    return f"{PREFIX}:{tag(shard)}:account:{account}:deliveries"


@in_scripts
def account_status_deliveries(shard: int, account: str, status: str) -> str:
    """Sorted set: the account's deliveries in this shard with one status, by creation
    time. The script that changes a delivery's status moves it (``index_delivery``)."""
    return account_deliveries(shard, account) + f":{status}"


@in_scripts
def status_deliveries(shard: int, status: str) -> str:
    """Sorted set: the shard's deliveries with one status, by creation time (operators)."""
    return f"{PREFIX}:{tag(shard)}:deliveries:{status}"


# -- retention (shard-tagged): what finished, and purges under way ------------------------


@in_scripts
def events(shard: int) -> str:
    """Sorted set: the shard's operational event deliveries (``OPERATIONAL_BATCH``) by creation
    time (ms), for their retention (``relay.state.retention.Retention.purge_events``)."""
    return f"{PREFIX}:{tag(shard)}:events"


@in_scripts
def finished(shard: int) -> str:
    """Sorted set: the shard's finished batches (``finished_member``), scored by the time
    from which their retention counts (ms): their completion, or later while a delivery of
    theirs is still pending. Written by the scripts that complete and reopen a batch."""
    return f"{PREFIX}:{tag(shard)}:finished"


@in_scripts
def finished_member(account: str, name: str) -> str:
    """A batch in ``finished``: account names hold no ``:`` (``relay.state.api_keys``), so the first
    ``:`` splits it back."""
    return f"{account}:{name}"


def purging(shard: int) -> str:
    """Sorted set: purges under way (a token each, scored by start time, ms): a batch too
    big for one bounded step leaves its documents and deliveries to the next steps."""
    return f"{PREFIX}:{tag(shard)}:purging"


@in_scripts
def purge_docs(shard: int, token: str) -> str:
    """List: the document ids a purge still has to delete (the batch's ``:docs``, renamed)."""
    return f"{PREFIX}:{tag(shard)}:purge:{token}:docs"


@in_scripts
def purge_deliveries(shard: int, token: str) -> str:
    """Sorted set: the delivery ids a purge still has to delete (``:deliveries``, renamed)."""
    return f"{PREFIX}:{tag(shard)}:purge:{token}:deliveries"


# -- the event feeds (shard-tagged: the account's events shard) ------------------------


EVENTS_BATCH = "~events"
"""The reserved pseudo-batch naming the shard of an account's event feeds
(``events_shard``): one key per feed, so one stream orders all of an account's events
whatever shard raised them (``relay.state.event_feed``)."""

FEED_BATCHES = "events"  # batch.completed: the account's feed (GET /events)
FEED_OPERATIONAL = "ops_events"  # webhook.disabled, delivery.failed (stored name kept)
FEEDS = (FEED_BATCHES, FEED_OPERATIONAL)


def events_shard(account: str) -> int:
    """The shard holding the account's event feeds."""
    return home_shard(account, EVENTS_BATCH)


def event_log(account: str, feed: str) -> str:
    """Stream: one feed of the account, in the order relay recorded its events; the entry
    ids are the feed's positions (``relay.state.event_feed``)."""
    return f"{PREFIX}:{tag(events_shard(account))}:account:{account}:{feed}"


def event_positions(account: str, feed: str) -> str:
    """Hash: event id -> its entry id in ``event_log`` (idempotent appends, ``after=``)."""
    return event_log(account, feed) + ":ids"


def event_logs(shard: int) -> str:
    """Sorted set: the shard's non-empty feeds (``<feed>:<account>``), scored by the time of
    their oldest entry (ms), for the retention sweeper."""
    return f"{PREFIX}:{tag(shard)}:event_logs"


def events_channel() -> str:
    """Pub/sub channel: ``<feed>:<account>`` is published when a feed gets an event (the
    API's long polls wake on it)."""
    return f"{PREFIX}:events"


# The 100 bits of an event id: the raising shard, the outbox entry's ms, its sequence number.
# Both shards below 16: 4 + 48 + 48 (the ids of every event raised before RELAY_SHARDS);
# otherwise the id's shard has three digits and the bits are 12 + 44 + 44 (ms until 2527).
_EVENT_BITS = {1: 48, 3: 44}  # digits of the home shard -> bits of the ms and of the seq


def event_id(home: int, raised: int, entry_id: str) -> str:
    """The id of the operational event of outbox entry ``entry_id`` of shard ``raised``: also
    the id of its deliveries (the ``webhook-id``), which live in shard ``home``. A ``msg_``
    id, the same for every detector that handles the entry, unique across shards. (A batch's
    completion has ``completion_id``.)"""
    ms, _, seq = entry_id.partition("-")
    digits = f"{home:x}" if home < 16 and raised < 16 else f"{home:03x}"
    bits = _EVENT_BITS[len(digits)]
    mask = (1 << bits) - 1
    value = (raised << (2 * bits)) | ((int(ms) & mask) << bits) | (int(seq or 0) & mask)
    return f"msg_{digits}{_token(value)}"


def _token(value: int) -> str:
    """100 bits as 20 characters of ``_ID_ALPHABET``, most significant first."""
    return "".join(_ID_ALPHABET[(value >> (5 * i)) & 31] for i in reversed(range(20)))


def completion_id(shard: int, account: str, name: str, created_at: int, seq: int) -> str:
    """The id of completion ``seq`` of the batch ``name`` created at ``created_at`` (ms): its
    event's id and its deliveries' ``webhook-id``. Derived from what identifies the
    completion, not from where it was recorded, so a completion lost with a failed-over
    primary and made again on the new one keeps its id (the receiver sees a replay, and the
    feed appends it once); a batch deleted and created again under the same name has another
    ``created_at``, so it never reuses an old id. 100 bits: the batch's shard, ``created_at``
    (what ``event_time`` reads back, never after the event) and a hash of the four; 4 + 48 +
    48 bits below shard 16, 12 + 44 + 44 from 16 (``_EVENT_BITS``)."""
    digits = _shard_digits(shard)
    bits = _EVENT_BITS[len(digits)]
    mask = (1 << bits) - 1
    digest = hashlib.blake2b(
        f"{account}\x00{name}\x00{created_at}\x00{seq}".encode(), digest_size=6
    ).digest()
    value = (shard << (2 * bits)) | ((created_at & mask) << bits) | (int.from_bytes(digest) & mask)
    return f"msg_{digits}{_token(value)}"


def fact_id(home: int, at: int, *identity: str) -> str:
    """The id of an operational event (``webhook.disabled``, ``delivery.failed``): its feed
    entry's id and its delivery's ``webhook-id``, that delivery living in shard ``home`` (the
    account's operational webhook's). Derived from what identifies the event (``identity``:
    the account, the kind, the webhook or delivery and its count), not from the outbox entry
    that carried it, so the event redone after a failover (the entry lost with the old
    primary, written again on the new one) keeps its id. ``at`` (ms) is a time never after
    the event, what ``event_time`` reads back (0: unknown). The layout of ``completion_id``."""
    digits = _shard_digits(home)
    bits = _EVENT_BITS[len(digits)]
    mask = (1 << bits) - 1
    digest = hashlib.blake2b("\x00".join(identity).encode(), digest_size=6).digest()
    value = (home << (2 * bits)) | ((at & mask) << bits) | (int.from_bytes(digest) & mask)
    return f"msg_{digits}{_token(value)}"


def document_event_id(
    shard: int, account: str, name: str, doc_id: str, created_at: int, type_: str
) -> str:
    """The id of a document event (``document.succeeded``, ``document.failed``): its feed
    entry's id and its delivery's ``webhook-id``, that delivery living in the batch's shard
    ``shard``. A document reaches a terminal status once, so the document and the type
    identify the event: the event redone after a failover (its finish lost with the old
    primary and made again on the new one) keeps its id. ``created_at`` is the document's
    upload time (ms), never after the event (what ``event_time`` reads back). The layout of
    ``completion_id``."""
    return fact_id(shard, created_at, account, name, doc_id, type_)


def event_time(ident: str) -> int | None:
    """When the event of an ``event_id`` was raised, or the batch of a ``completion_id`` was
    created (ms; never after the event was recorded), None for another kind of id."""
    m = _ID_RE.fullmatch(ident)
    if m is None or m.group(1) != "msg":
        return None
    value = 0
    for c in m.group(3):
        value = (value << 5) | _ID_ALPHABET.index(c)
    bits = _EVENT_BITS[len(m.group(2))]
    return (value >> bits) & ((1 << bits) - 1)


# -- account-wide records (no shard) -------------------------------------------------------


def api_key(prefix: str) -> str:
    """Hash: an API key's hash, account and timestamps, by its public prefix."""
    return f"{PREFIX}:apikey:{prefix}"


def api_keys() -> str:
    """Set: every API key prefix (``relay keys list``)."""
    return f"{PREFIX}:apikeys"


def console_session(sid: str) -> str:
    """String: the API key prefix of a live console session (expires with its cookie)."""
    return f"{PREFIX}:console:session:{sid}"


def console_key_sessions(prefix: str) -> str:
    """Set: the console session ids opened with one operator key (ended when it is revoked)."""
    return f"{PREFIX}:console:keysessions:{prefix}"


def rate_window(prefix: str) -> str:
    """Sorted set: the sliding window of one API key's status requests."""
    return f"{PREFIX}:ratelimit:{prefix}"


def account_rate_window(kind: str, account: str) -> str:
    """Sorted set: the sliding window of one account's writes of one kind (``uploads``,
    ``process``, ``retries``, ``verifications``, ``rotations``)."""
    return f"{PREFIX}:quota:{kind}:{account}"


def host_rate_window(kind: str, host: str) -> str:
    """Sorted set: the sliding window of one kind of outbound call to one callback host
    (``verifications``), whatever the account."""
    return f"{PREFIX}:hostquota:{kind}:{host}"


def auth_failure_window(address: str) -> str:
    """Sorted set: the sliding window of one client address's requests with a bad API key."""
    return f"{PREFIX}:authfail:{address}"


def signing(account: str) -> str:
    """Hash: the account's signing material, encrypted at rest."""
    return f"{PREFIX}:signing:{account}"


def accounts() -> str:
    """Set: every account name that owns a key."""
    return f"{PREFIX}:accounts"


def metrics() -> str:
    """Hash: the counters and histograms every process flushes (``relay.state.metrics``)."""
    return f"{PREFIX}:metrics"
