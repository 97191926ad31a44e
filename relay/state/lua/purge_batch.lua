-- Purge a finished batch past its retention, in bounded steps (relay.state.retention).
-- KEYS: 1 finished, 2 purging, 3 due, 4 leases, 5 shard_deliveries,
--       and to start a purge (absent to continue one):
--       6 batch, 7 batch_docs, 8 batch_pending, 9 batch_started, 10 webhook,
--       11 delivery_by_seq, 12 batch_deliveries, 13 account_batches, 14 batch_uploads
-- ARGV: 1 the shard's key prefix (documents, deliveries and the purge's lists derive from it),
--       2 the purge's token, 3 now (ms), 4 step size (documents + deliveries deleted per call),
--       5 account, 6 batch name (both '' to continue the purge of token ARGV[2]),
--       7 retention (ms)
-- Returns: a JSON object (cjson): outcome ('gone' | 'open' | 'young' | 'pending' | 'more' |
--   'done') and, when any, outside: the deleted documents whose bytes are outside Redis (the
--   blob directory, S3), as the members recorded in the shard's blob_deletions (drop_outside:
--   the caller deletes them; absent when none: cjson would encode an empty list as {})
--
-- Start: check and detach in one step, so a batch reopened after it was picked is never
-- purged: it must exist, be complete for at least the retention and have no pending
-- delivery, nor a completion still waiting in the outbox for its delivery (else it is re-scored in `finished` for when it may be due, or dropped from it
-- when reopened). Then the batch's own small keys go, and its document and delivery lists are
-- renamed to the purge's token: from here the batch is gone (reads 404, its name is free),
-- and each call deletes at most ARGV[4] of what it held.
local p, token, now, step = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local docs_key, dlv_key = key_purge_docs(p, token), key_purge_deliveries(p, token)

-- How long past its retention a batch waits for the delivery of a completion still in the
-- outbox (the detector makes it within seconds; this only bounds a wait for one never made).
local OUTBOX_GRACE_MS = 3600000

local function pending_delivery(webhook_key, deliveries_key, by_seq_key, seq, overdue,
                                 document_events)
  local w = redis.call('HMGET', webhook_key, 'url', 'disabled', 'pending')
  if w[1] and w[2] ~= '1' and overdue < OUTBOX_GRACE_MS and
     redis.call('HEXISTS', by_seq_key, seq) == 0 then
    return ''  -- the completion is still in the outbox: its delivery is yet to be made
  end
  local pointed = w[3]
  if pointed and pointed ~= '' and
     redis.call('HGET', key_delivery(p, pointed), 'status') == 'pending' then
    return pointed
  end
  -- A manual retry of an older delivery can leave the newer one pending unpointed: look at
  -- the newest ones too (a batch has one delivery per completion, and one per document
  -- event when asked for: those are checked below; 64 bounds the look).
  for _, id in ipairs(redis.call('ZREVRANGE', deliveries_key, 0, 63)) do
    if redis.call('HGET', key_delivery(p, id), 'status') == 'pending' then
      return id
    end
  end
  -- A document event's delivery pending beyond those (score 0 in batch_document_events), or
  -- a document event raised and still in the outbox (the same grace as a completion's).
  local doc = redis.call('ZRANGE', document_events, 0, 0, 'WITHSCORES')
  if doc[1] and (tonumber(doc[2]) == 0 or overdue < OUTBOX_GRACE_MS) then
    return ''
  end
  return nil
end

if ARGV[5] ~= '' then
  local member = finished_member(ARGV[5], ARGV[6])
  local b = redis.call('HMGET', KEYS[6], 'created_at', 'completed_at', 'completion_seq')
  if not b[1] then
    redis.call('ZREM', KEYS[1], member)
    return cjson.encode({outcome = 'gone'})
  end
  if not b[2] or b[2] == '' then
    redis.call('ZREM', KEYS[1], member)  -- reopened: back in when it completes again
    return cjson.encode({outcome = 'open'})
  end
  local retention = tonumber(ARGV[7])
  local completed = tonumber(b[2])
  if completed + retention > now then
    redis.call('ZADD', KEYS[1], completed, member)
    return cjson.encode({outcome = 'young'})
  end
  local document_events = key_batch_document_events(p, ARGV[5], ARGV[6])
  local pending = pending_delivery(KEYS[10], KEYS[12], KEYS[11], b[3] or '0',
                                   now - completed - retention, document_events)
  if pending then
    -- Look again when its next attempt (or its lease) is due, at least a second from now.
    local due_at = now
    if pending ~= '' then
      due_at = tonumber(redis.call('ZSCORE', KEYS[3], pending) or now)
    end
    redis.call('ZADD', KEYS[1], math.max(due_at, now + 1000) - retention, member)
    return cjson.encode({outcome = 'pending'})
  end
  -- A batch that fits in this step is only deleted from: that works with Redis full too
  -- (maxmemory refuses only writes that may need memory). A bigger one is recorded as under
  -- way first, so with Redis full the call fails here having changed nothing.
  if redis.call('LLEN', KEYS[7]) + redis.call('ZCARD', KEYS[12]) > step then
    redis.call('ZADD', KEYS[2], now, token)
  end
  redis.call('ZREM', KEYS[1], member)
  redis.call('ZREM', KEYS[13], ARGV[6])
  redis.call('UNLINK', KEYS[6], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[14],
             document_events)
  if redis.call('EXISTS', KEYS[7]) == 1 then
    redis.call('RENAME', KEYS[7], docs_key)
  end
  if redis.call('EXISTS', KEYS[12]) == 1 then
    redis.call('RENAME', KEYS[12], dlv_key)
  end
end

-- One bounded step: documents first, then deliveries.
local outcome, outside = 'more', {}
local deletions = key_blob_deletions(p)
local ids = redis.call('LRANGE', docs_key, 0, step - 1)
for _, id in ipairs(ids) do
  outside[#outside + 1] = drop_outside(deletions, redis.call('HGET', key_doc(p, id), 'blob'), id,
                                       now)
  redis.call('UNLINK', key_doc(p, id), key_doc_items(p, id), key_blob(p, id))
  redis.call('ZREM', KEYS[4], id)
end
if #ids > 0 then
  redis.call('LTRIM', docs_key, #ids, -1)
end
local left = step - #ids
if left > 0 then
  local dlvs = redis.call('ZRANGE', dlv_key, 0, left - 1)
  for _, id in ipairs(dlvs) do
    index_delivery(p, id, redis.call('HGET', key_delivery(p, id), 'status'), '')  -- indexes
    redis.call('UNLINK', key_delivery(p, id), key_delivery_attempts(p, id))
    redis.call('ZREM', KEYS[3], id)
    redis.call('ZREM', KEYS[5], id)
  end
  if #dlvs > 0 then
    redis.call('ZREMRANGEBYRANK', dlv_key, 0, #dlvs - 1)
  end
end
if redis.call('EXISTS', docs_key, dlv_key) == 0 then
  redis.call('ZREM', KEYS[2], token)
  outcome = 'done'
end
if #outside == 0 then
  outside = nil
end
return cjson.encode({outcome = outcome, outside = outside})
