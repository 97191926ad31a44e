-- Add one queued document to a batch, creating the batch on its first upload.
-- KEYS: 1 batch, 2 batch_docs, 3 batch_pending (batches created before `handed` only),
--       4 doc, 5 account_batches, 6 blob,
--       7 account_pending_bytes (this shard's counter of the account), 8 batch_uploads
-- ARGV: 1 account, 2 batch name, 3 doc id, 4 filename, 5 content_type, 6 size, 7 now (ms),
--       8 blob bytes, 9 '1' when the bytes go to KEYS[6] (Redis blob store) else '0',
--       10 blob reference (directory store path, or ''), 11 bytes to charge to KEYS[7]
--       (0: nothing held in Redis), 12 what KEYS[7] may reach after this upload: the
--       account's quota minus its other shards' counters (-1: no check here; the caller
--       reserved the bytes on the account's total, keys.account_pending_total, first),
--       13 the upload's idempotency key ('' for none),
--       14 the upload's trace context, a W3C traceparent ('' when tracing is off): kept as the
--       document's `trace` and, when this upload creates the batch, as the batch's
-- Derived from KEYS[1] (same hash tag): the shard's retention index `finished`.
-- Returns JSON (cjson): {created = true, batch_created = true|false}; or the refusal
-- 'deleted' when the batch was deleted, 'quota' when the charge would take KEYS[7] past
-- ARGV[12], 'replayed' when the batch already has a document made with key ARGV[13] (its id
-- is in KEYS[8]) (nothing is written then).
local batch = redis.call('HMGET', KEYS[1], 'created_at', 'deleted_at', 'completed_at', 'total',
                        'queued', 'handed')
if batch[2] and batch[2] ~= '' then
  return refuse('deleted')
end
if ARGV[13] ~= '' and redis.call('HEXISTS', KEYS[8], ARGV[13]) == 1 then
  return refuse('replayed')
end
local charge = tonumber(ARGV[11])
local allowance = tonumber(ARGV[12])
if charge > 0 and allowance >= 0 then
  if tonumber(redis.call('GET', KEYS[7]) or '0') + charge > allowance then
    return refuse('quota')
  end
end
-- 'counted' = 1: the charge is also on the account's total, which whatever releases it
-- (release_charge) reports back to its caller to take off.
redis.call('HSET', KEYS[4], 'id', ARGV[3], 'account', ARGV[1], 'batch', ARGV[2],
           'filename', ARGV[4], 'content_type', ARGV[5], 'size', ARGV[6], 'status', 'queued',
           'created_at', ARGV[7], 'started_at', '', 'completed_at', '', 'claims', 0,
           'blob', ARGV[10], 'charged', charge, 'counted', 1)
if ARGV[14] ~= '' then
  redis.call('HSET', KEYS[4], 'trace', ARGV[14])
end
if ARGV[9] == '1' then
  redis.call('SET', KEYS[6], ARGV[8])
end
if ARGV[13] ~= '' then
  redis.call('HSET', KEYS[8], ARGV[13], ARGV[3])
end
if charge > 0 then
  redis.call('INCRBY', KEYS[7], charge)
end
redis.call('RPUSH', KEYS[2], ARGV[3])
-- The documents not yet handed out are KEYS[2] from the batch's `handed` on (process.lua);
-- a batch created before `handed` existed keeps its list of them in KEYS[3].
if batch[1] and not batch[6] then
  redis.call('RPUSH', KEYS[3], ARGV[3])
end
-- The batch's counters are read above and written here with the rest (one HSET).
if not batch[1] then
  redis.call('HSET', KEYS[1], 'account', ARGV[1], 'name', ARGV[2], 'created_at', ARGV[7],
             'started_at', '', 'completed_at', '', 'last_completed_at', '0', 'deleted_at', '',
             'completion_seq', 0, 'total', 1, 'queued', 1, 'processing', 0, 'succeeded', 0,
             'failed', 0, 'canceled', 0, 'fields', '[]', 'handed', 0)
  if ARGV[14] ~= '' then
    redis.call('HSET', KEYS[1], 'trace', ARGV[14])
  end
  redis.call('ZADD', KEYS[5], ARGV[7], ARGV[2])
elseif batch[3] and batch[3] ~= '' then
  -- An upload into a finished batch makes it not done again until the new document
  -- finishes (and takes it out of the retention index until it completes again).
  redis.call('HSET', KEYS[1], 'total', tonumber(batch[4] or '0') + 1,
             'queued', tonumber(batch[5] or '0') + 1, 'completed_at', '')
  redis.call('ZREM', key_finished(batch_prefix(KEYS[1], ARGV[1], ARGV[2])),
             finished_member(ARGV[1], ARGV[2]))
else
  redis.call('HSET', KEYS[1], 'total', tonumber(batch[4] or '0') + 1,
             'queued', tonumber(batch[5] or '0') + 1)
end
return cjson.encode({created = true, batch_created = not batch[1]})
