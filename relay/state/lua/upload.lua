-- Add one queued document to a batch, creating the batch on its first upload.
-- KEYS: 1 batch, 2 batch_docs, 3 batch_pending (batches created before `handed` only),
--       4 doc, 5 account_batches, 6 blob,
--       7 account_pending_bytes (this shard's counter of the account), 8 batch_uploads
-- ARGV: 1 account, 2 batch name, 3 doc id, 4 now (ms), 5 blob bytes, 6 '1' when the bytes
--       go to KEYS[6] (Redis blob store) else '0', 7 bytes to charge to KEYS[7] (0: nothing
--       held in Redis), 8 what KEYS[7] may reach after this upload: the account's quota
--       minus its other shards' counters (-1: no check here; the caller reserved the bytes
--       on the account's total, keyspace.account_pending_total, first), 9 the upload's
--       idempotency key ('' for none), 10 the batch's metadata (canonical JSON,
--       relay.state.metadata; '' for none), 11 the upload's trace context (a W3C
--       traceparent, '' when tracing is off): the batch's `trace` when this upload
--       creates it (the document's is among its fields), 12.. the new document's hash,
--       field and value pairs (relay.state.model.Document.new_fields: the one place
--       they are named)
-- Derived from KEYS[1] (same hash tag): the shard's retention index `finished`.
-- Returns JSON (cjson): {created = true, batch_created = true|false}; or the refusal
-- 'deleted' when the batch was deleted, 'quota' when the charge would take KEYS[7] past
-- ARGV[8], 'replayed' when the batch already has a document made with key ARGV[9] (its id
-- is in KEYS[8]), 'metadata_conflict' when ARGV[10] is not the batch's metadata (nothing is
-- written then).
local batch = redis.call('HMGET', KEYS[1], 'created_at', 'deleted_at', 'completed_at', 'total',
                        'queued', 'handed', 'metadata')
if batch[2] and batch[2] ~= '' then
  return refuse('deleted')
end
if ARGV[9] ~= '' and redis.call('HEXISTS', KEYS[8], ARGV[9]) == 1 then
  return refuse('replayed')
end
-- A batch's metadata is set once, by the first upload that gives one; later ones may give
-- the same (canonical forms compare as strings) or none.
local has_metadata = batch[7] and batch[7] ~= ''
if ARGV[10] ~= '' and has_metadata and batch[7] ~= ARGV[10] then
  return refuse('metadata_conflict')
end
local charge = tonumber(ARGV[7])
local allowance = tonumber(ARGV[8])
if charge > 0 and allowance >= 0 then
  if tonumber(redis.call('GET', KEYS[7]) or '0') + charge > allowance then
    return refuse('quota')
  end
end
redis.call('HSET', KEYS[4], unpack(ARGV, 12))
if ARGV[6] == '1' then
  redis.call('SET', KEYS[6], ARGV[5])
end
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[8], ARGV[9], ARGV[3])
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
-- The batch's counters are read above and written here with the rest (one HSET), its
-- metadata too when this upload is the first to give one.
local set
if not batch[1] then
  set = {'account', ARGV[1], 'name', ARGV[2], 'created_at', ARGV[4],
         'started_at', '', 'completed_at', '', 'last_completed_at', '0', 'deleted_at', '',
         'completion_seq', 0, 'total', 1, 'queued', 1, 'processing', 0, 'succeeded', 0,
         'failed', 0, 'canceled', 0, 'fields', '[]', 'handed', 0}
  if ARGV[11] ~= '' then
    set[#set + 1] = 'trace'
    set[#set + 1] = ARGV[11]
  end
  redis.call('ZADD', KEYS[5], ARGV[4], ARGV[2])
elseif batch[3] and batch[3] ~= '' then
  -- An upload into a finished batch makes it not done again until the new document
  -- finishes (and takes it out of the retention index until it completes again).
  set = {'total', tonumber(batch[4] or '0') + 1, 'queued', tonumber(batch[5] or '0') + 1,
         'completed_at', ''}
  redis.call('ZREM', key_finished(batch_prefix(KEYS[1], ARGV[1], ARGV[2])),
             finished_member(ARGV[1], ARGV[2]))
else
  set = {'total', tonumber(batch[4] or '0') + 1, 'queued', tonumber(batch[5] or '0') + 1}
end
if ARGV[10] ~= '' and not has_metadata then
  set[#set + 1] = 'metadata'
  set[#set + 1] = ARGV[10]
end
redis.call('HSET', KEYS[1], unpack(set))
return cjson.encode({created = true, batch_created = not batch[1]})
