-- Shared helpers, prepended to every script by relay/state/scripts.py.

-- Keys a script derives from ids it reads (a batch's documents, a shard's due deliveries, a
-- delivery's batch) cannot be known before the script runs, so they cannot come in KEYS: the
-- script builds them over `p`, the shard's key prefix (relay.redis.keyspace.shard_prefix,
-- passed in ARGV), so every derived key carries the script's hash tag. The functions that
-- build them (key_doc(p, doc_id), key_delivery(p, delivery_id), ..., and the set members
-- slice_member and finished_member) are written by relay/state/scripts.py from those of
-- relay/redis/keyspace.py and come before these helpers. No script builds a key any other way.

-- A fair-queue entry or `leases` member back as (document id, slice number); nil for a
-- document's id (keyspace.slice_of).
local function parse_slice(entry) return string.match(entry, '^(.+)#(%d+)$') end
-- A document read in slices has ended: the leases of its slices go, with the record of them.
-- Entries of its slices still in the fair queue are dropped when a claim comes to them.
local function drop_slices(slices_key, leases_key, id)
  local n = tonumber(redis.call('HGET', slices_key, 'n') or '0')
  local members = {}
  for k = 1, n do
    members[k] = slice_member(id, k)
  end
  for i = 1, #members, 1000 do  -- unpack() has a stack limit
    redis.call('ZREM', leases_key, unpack(members, i, math.min(i + 999, #members)))
  end
  redis.call('DEL', slices_key)
end
-- The shard prefix back from a delivery key (keys.delivery = p .. 'delivery:' .. id).
local function delivery_prefix(delivery_key, id)
  return string.sub(delivery_key, 1, #delivery_key - #('delivery:' .. id))
end
-- Document events (docs/decisions.md, "Document events") ----------------------------------

-- The batch's batch.completed delivery held back for its document events (claim_deliveries.lua
-- marks it `waiting_since`) becomes due now: the last of them has settled. Returns whether
-- one did.
local function release_waiting(p, account, batch, now)
  local pending = redis.call('HGET', key_webhook(p, account, batch), 'pending')
  if not pending or pending == '' then
    return false
  end
  local dk = key_delivery(p, pending)
  local d = redis.call('HMGET', dk, 'status', 'waiting_since')
  if d[1] ~= 'pending' or not d[2] or d[2] == '' then
    return false
  end
  redis.call('HSET', dk, 'next_attempt_at', now)
  redis.call('ZADD', key_due(p), now, pending)
  return true
end
-- A document event of the batch has settled (its delivery left `pending`, or none is made
-- for it): out of batch_document_events; the last one out releases the batch.completed
-- delivery waiting for them (with `now`; a purge passes none). Returns whether it did.
local function settle_document_event(p, account, batch, doc, now)
  local key = key_batch_document_events(p, account, batch)
  if redis.call('ZREM', key, doc) == 0 or not now then
    return false
  end
  if redis.call('EXISTS', key) == 1 then
    return false
  end
  return release_waiting(p, account, batch, now)
end
-- Whether the batch's batch.completed delivery, waiting since `since` (ms), still waits for
-- the batch's document events (claim_deliveries.lua): while any is unsettled. One whose
-- delivery is pending (score 0) holds it until that delivery ends; one raised but without
-- a delivery yet (scored by when it was raised: its outbox entry not handled, normally
-- within a second) holds it at most `bound` ms (RELAY_DOCUMENT_EVENTS_WAIT) from its first
-- wait, then is dropped: an entry lost unhandled (trimmed unread) would never settle.
local function waits_for_documents(p, account, batch, since, now, bound)
  local key = key_batch_document_events(p, account, batch)
  if redis.call('EXISTS', key) == 0 then
    return false
  end
  if now - since < bound or #redis.call('ZRANGEBYSCORE', key, 0, 0, 'LIMIT', 0, 1) > 0 then
    return true
  end
  redis.call('DEL', key)
  return false
end
-- Keep a delivery's index entries true when its status goes `from` -> `to` (O(1) each):
-- `from` '' for a new delivery (also enters the account's index), `to` '' for a purged one
-- (also leaves it). Call it in the script that changes the status, with the old status.
-- `known`: {account, created_at, batch, doc} when the caller has them (it just read or
-- wrote the delivery). A document event's delivery (its `doc` set) also keeps its batch's
-- batch_document_events true: in it while pending, settled when it leaves pending
-- (settle_document_event, released with `now`). Returns whether that released the batch's
-- waiting batch.completed delivery (the caller wakes its shard).
local function index_delivery(p, id, from, to, known, now)
  local d = known or redis.call('HMGET', key_delivery(p, id), 'account', 'created_at', 'batch',
                                'doc')
  local account, created = d[1], d[2]
  if not account then
    return false
  end
  if from and from ~= '' then
    redis.call('ZREM', key_status_deliveries(p, from), id)
    redis.call('ZREM', key_account_status_deliveries(p, account, from), id)
  else
    redis.call('ZADD', key_account_deliveries(p, account), created, id)
  end
  if to and to ~= '' then
    redis.call('ZADD', key_status_deliveries(p, to), created, id)
    redis.call('ZADD', key_account_status_deliveries(p, account, to), created, id)
  else
    redis.call('ZREM', key_account_deliveries(p, account), id)
  end
  local doc = d[4]
  if not doc or doc == '' or from == to then
    return false
  end
  if to == 'pending' then
    -- Score 0: its delivery exists and is pending (waits_for_documents).
    redis.call('ZADD', key_batch_document_events(p, account, d[3]), 0, doc)
  elseif from == 'pending' then
    return settle_document_event(p, account, d[3], doc, now)
  end
  return false
end

-- Cancel a webhook's pending delivery (the webhook removed or disabled): canceled, out of
-- the due set, moved in the delivery indexes. `w_pending` is the webhook's `pending` id.
local function cancel_pending(p, due_key, w_pending, now)
  if not w_pending or w_pending == '' then
    return
  end
  local dk = key_delivery(p, w_pending)
  if redis.call('HGET', dk, 'status') == 'pending' then
    redis.call('HSET', dk, 'status', 'canceled', 'next_attempt_at', '', 'lease', '',
               'updated_at', now)
    redis.call('ZREM', due_key, w_pending)
    index_delivery(p, w_pending, 'pending', 'canceled', nil, now)
  end
end
-- Endpoint verification: the deliveries parked while it was pending (claim_deliveries.lua)
-- become due now (verified) or canceled (failed, the webhook removed or disabled).
local function release_parked(p, due_key, account, name, now, cancel)
  local parked = key_batch_parked(p, account, name)
  for _, id in ipairs(redis.call('SMEMBERS', parked)) do
    local dk = key_delivery(p, id)
    if redis.call('HGET', dk, 'status') == 'pending' then
      if cancel then
        redis.call('HSET', dk, 'status', 'canceled', 'next_attempt_at', '', 'lease', '',
                   'updated_at', now)
        redis.call('ZREM', due_key, id)
        index_delivery(p, id, 'pending', 'canceled', nil, now)
      else
        redis.call('HSET', dk, 'next_attempt_at', now)
        redis.call('ZADD', due_key, now, id)
      end
    end
  end
  redis.call('DEL', parked)
end
-- Whether registering `url` with verify (and the event types `events`, space-separated;
-- nil or '' for batch.completed alone) repeats the webhook's verification in progress: the
-- same URL and types, enabled, its verification pending and the challenge's delivery
-- (`verify_id`) still pending, to that URL. Such a registration starts nothing: no second
-- challenge, no superseded one left behind (verification_pending.lua, register_hook).
local function repeats_verification(wk, p, url, events)
  local w = redis.call('HMGET', wk, 'url', 'disabled', 'verification', 'verify_id', 'events')
  local had = (w[5] and w[5] ~= '') and w[5] or 'batch.completed'
  local asked = (events and events ~= '') and events or 'batch.completed'
  if w[1] ~= url or w[2] == '1' or w[3] ~= 'pending' or not w[4] or w[4] == '' or
     had ~= asked then
    return false
  end
  local d = redis.call('HMGET', key_delivery(p, w[4]), 'status', 'url')
  return d[1] == 'pending' and d[2] == url
end
-- Register or replace a webhook's URL (register_webhook.lua, register_operational_webhook.lua):
-- enabled again and not failing; with `verify` '1', pending its endpoint verification (the
-- caller creates the challenge's delivery), else not verified any more and the deliveries
-- parked for a verification released. `events`: the event types asked for (a batch's
-- webhook; nil for the operational one). Returns 1 when the webhook was created, else 0; -1
-- (nothing written) when it repeats the verification in progress (repeats_verification).
local function register_hook(wk, due_key, p, account, name, url, now, verify, challenge, events)
  if verify == '1' and repeats_verification(wk, p, url, events) then
    return -1
  end
  local was = redis.call('HGET', wk, 'verification')
  local created = redis.call('HSETNX', wk, 'created_at', now)
  redis.call('HSET', wk, 'url', url, 'updated_at', now, 'disabled', '0',
             'disabled_reason', '', 'failing_since', '')
  redis.call('HSETNX', wk, 'pending', '')
  if verify == '1' then
    redis.call('HSET', wk, 'verification', 'pending', 'challenge', challenge, 'verified_at', '')
  else
    redis.call('HSET', wk, 'verification', '', 'challenge', '', 'verify_id', '')
    if was == 'pending' then
      release_parked(p, due_key, account, name, now, false)
    end
  end
  return created
end
-- The shard prefix back from a batch key (keys.batch = p .. 'batch:' .. account .. ':' .. name),
-- for scripts that get the batch in KEYS but no prefix in ARGV.
local function batch_prefix(batch_key, account, name)
  return string.sub(batch_key, 1, #batch_key - #('batch:' .. account .. ':' .. name))
end

-- A refusal the caller maps to a domain error (relay.state.scripts.refusal reads it back exactly).
local function refuse(reason)
  return redis.error_reply('REFUSED ' .. reason)
end

-- Announce a batch's completion `seq` (its completed_at and completion_seq already written):
-- the retention index, and one outbox entry (the completion event the detector turns into a
-- delivery). Returns seq.
local function announce_completion(batch_key, outbox_key, account, name, seq, completed_at)
  -- Retention counts from this completion (relay.state.retention purges the batch later).
  redis.call('ZADD', key_finished(batch_prefix(batch_key, account, name)), completed_at,
             finished_member(account, name))
  -- The entry carries the batch as it is at this completion: the notification's body must
  -- describe this completion even if the batch is reopened before the detector reads it.
  local flat = redis.call('HGETALL', batch_key)
  local snapshot = {}
  for i = 1, #flat, 2 do
    snapshot[flat[i]] = flat[i + 1]
  end
  local entry = redis.call('XADD', outbox_key, 'MAXLEN', '~', '100000', '*',
                          'account', account, 'batch', name, 'seq', seq,
                          'snapshot', cjson.encode(snapshot))
  -- The entry names the completion's event (relay.redis.keyspace.event_id): a webhook registered
  -- later delivers it with the same id.
  redis.call('HSET', batch_key, 'completion_entry', entry)
  return seq
end

-- Close the batch when its last open document has reached a terminal status:
-- completed_at = the latest document completion, completion_seq += 1, and one outbox entry
-- (announce_completion). O(1): counters, no scan.
local function complete_if_done(batch_key, outbox_key)
  local c = redis.call('HMGET', batch_key, 'queued', 'processing', 'total', 'completed_at',
                       'last_completed_at', 'account', 'name')
  local open = tonumber(c[1] or '0') + tonumber(c[2] or '0')
  if open ~= 0 or tonumber(c[3] or '0') == 0 or (c[4] and c[4] ~= '') then
    return 0
  end
  local seq = redis.call('HINCRBY', batch_key, 'completion_seq', 1)
  redis.call('HSET', batch_key, 'completed_at', c[5])
  return announce_completion(batch_key, outbox_key, c[6], c[7], seq, c[5])
end

-- The document events of documents that just ended (`ended`: {key, id} each, their status
-- and completed_at written), for a batch whose webhook asks for them (the batch's
-- `doc_events`: the statuses wanted, register_webhook.lua): one outbox entry each, with a
-- snapshot of the document as it ended (the event's body is made from it) and the batch's
-- metadata, ahead of the batch's completion entry; each also in batch_document_events, so the
-- batch's batch.completed delivery waits for their deliveries (claim_deliveries.lua). One
-- HGETALL, one XADD and one ZADD per event; nothing when the batch asks for none.
local function raise_document_events(b, batch_key, outbox_key, ended, now)
  local owed = key_batch_document_events(batch_prefix(batch_key, b.account, b.name), b.account,
                                         b.name)
  local wanted = ' ' .. b.doc_events .. ' '
  for _, e in ipairs(ended) do
    local flat = redis.call('HGETALL', e.key)
    local doc = {}
    for i = 1, #flat, 2 do
      doc[flat[i]] = flat[i + 1]
    end
    if doc.status and string.find(wanted, ' ' .. doc.status .. ' ', 1, true) then
      redis.call('XADD', outbox_key, 'MAXLEN', '~', '100000', '*', 'account', b.account,
                 'batch', b.name, 'doc', e.id, 'type', 'document.' .. doc.status,
                 'snapshot', cjson.encode(doc), 'batch_metadata', b.metadata or '')
      redis.call('ZADD', owed, now, e.id)
    end
  end
end

-- Processing documents of the batch ended, `succeeded` and `failed` of them, the last at
-- `now`: the batch's counters and last completion time (note_completion), and its completion
-- when they were the last open documents (complete_if_done), read and written at once: two
-- commands unless the batch completes (then four: the batch read once, its snapshot built
-- here rather than read again, and the counters and completion_entry written in one HSET).
-- `ended` ({key, id} per document) raises their document events first when the batch asks
-- for them (raise_document_events). Returns the completion_seq, or 0.
local function end_documents(batch_key, outbox_key, succeeded, failed, now, ended)
  local flat = redis.call('HGETALL', batch_key)
  local b = {}
  for i = 1, #flat, 2 do
    b[flat[i]] = flat[i + 1]
  end
  local processing = tonumber(b.processing or '0') - succeeded - failed
  local last = b.last_completed_at or '0'
  if tonumber(now) > tonumber(last) then
    last = now
  end
  local counts = {processing = tostring(processing),
                  succeeded = tostring(tonumber(b.succeeded or '0') + succeeded),
                  failed = tostring(tonumber(b.failed or '0') + failed),
                  last_completed_at = tostring(last)}
  local open = tonumber(b.queued or '0') + processing
  local set = {}
  if b.doc_events and b.doc_events ~= '' then
    raise_document_events(b, batch_key, outbox_key, ended, now)
  end
  if open ~= 0 or tonumber(b.total or '0') == 0 or (b.completed_at and b.completed_at ~= '') then
    for k, v in pairs(counts) do
      set[#set + 1] = k
      set[#set + 1] = v
    end
    redis.call('HSET', batch_key, unpack(set))
    return 0
  end
  local seq = tonumber(b.completion_seq or '0') + 1
  counts.completion_seq = tostring(seq)
  counts.completed_at = counts.last_completed_at
  -- The snapshot is the batch as announce_completion would read it after these writes
  -- (before its completion_entry is written).
  for k, v in pairs(counts) do
    b[k] = v
    set[#set + 1] = k
    set[#set + 1] = v
  end
  redis.call('ZADD', key_finished(batch_prefix(batch_key, b.account, b.name)), last,
             finished_member(b.account, b.name))
  local entry = redis.call('XADD', outbox_key, 'MAXLEN', '~', '100000', '*',
                          'account', b.account, 'batch', b.name, 'seq', seq,
                          'snapshot', cjson.encode(b))
  set[#set + 1] = 'completion_entry'
  set[#set + 1] = entry
  redis.call('HSET', batch_key, unpack(set))
  return seq
end

-- Record a document's completion time on the batch (the batch's completed_at is the latest).
local function note_completion(batch_key, now)
  local last = tonumber(redis.call('HGET', batch_key, 'last_completed_at') or '0')
  if tonumber(now) > last then
    redis.call('HSET', batch_key, 'last_completed_at', now)
  end
end

-- Keep the batch's started_at equal to the earliest started_at of its documents.
local function refresh_started(batch_key, started_key)
  local first = redis.call('ZRANGE', started_key, 0, 0, 'WITHSCORES')
  if first[2] then
    redis.call('HSET', batch_key, 'started_at', first[2])
  else
    redis.call('HSET', batch_key, 'started_at', '')
  end
end

-- Pending-bytes quota (relay.state.store): an upload whose bytes stay in Redis is charged to its
-- account's counter in the batch's shard (keys.account_pending_bytes), and the document
-- records how much in its 'charged' field. Whatever removes the blob (finish, cancel,
-- worker_lost) calls this in the same script, so the shard counters never drift. The
-- caller has read the document's 'charged' and 'counted' fields and writes 'charged' 0
-- in the same HSET that ends the document (idempotent: a second call finds nothing
-- charged). The counter key is deleted at 0.
-- Returns the bytes the caller must take off the account's total
-- (keys.account_pending_total, on another slot): the charge when the upload put it there
-- ('counted' = '1'; documents uploaded before that total existed have no 'counted').
local function release_known(pending_key, charged, counted)
  local n = tonumber(charged or '0') or 0
  if n <= 0 then
    return 0
  end
  if redis.call('DECRBY', pending_key, n) <= 0 then
    redis.call('DEL', pending_key)
  end
  if counted == '1' then
    return n
  end
  return 0
end

-- release_known for a caller that has not read the document's charge: reads it and
-- zeroes it.
local function release_charge(doc_key, pending_key)
  local c = redis.call('HMGET', doc_key, 'charged', 'counted')
  if (tonumber(c[1] or '0') or 0) <= 0 then
    return 0
  end
  redis.call('HSET', doc_key, 'charged', 0)
  return release_known(pending_key, c[1], c[2])
end

-- Whether a document's bytes are in Redis (its `blob` field: 'redis', or none at all for a
-- document older than the field) rather than in the blob directory or S3.
local function held_in_redis(kind)
  return not kind or kind == '' or kind == 'redis'
end

-- Drop a document's bytes outside Redis (its `blob` field `kind`: 'dir', 's3'): no script can
-- delete them, so they are recorded in the shard's list of deletions to do
-- (keys.blob_deletions, member keys.blob_deletion) in the same step, scored by `now`; the
-- caller deletes them and takes them off, the sweeper any it could not (relay.state.blobs).
-- Returns the member, nil for bytes in Redis (the script deletes those itself).
local function drop_outside(deletions_key, kind, id, now)
  if held_in_redis(kind) then
    return nil
  end
  local member = blob_deletion(kind, id)
  redis.call('ZADD', deletions_key, now, member)
  return member
end

-- Operational events (docs/decisions.md, "Auto-disable and operational events") -------------

-- OPERATIONAL_BATCH, the reserved pseudo-batch that holds an account's operational webhook
-- and its deliveries, is written with the key functions from relay.redis.keyspace.

-- Append an operational event (kind 'webhook.disabled' | 'delivery.failed') to the shard's
-- outbox; the detector turns it into a delivery to the account's operational webhook. The
-- operational webhook's own deliveries make no events (no loops). `fields` are name, value
-- pairs of the event's data.
local function emit_event(outbox_key, kind, account, batch, now, fields)
  if batch == OPERATIONAL_BATCH then
    return
  end
  redis.call('XADD', outbox_key, 'MAXLEN', '~', '100000', '*', 'kind', kind,
             'account', account, 'batch', batch, 'at', now, unpack(fields))
end
