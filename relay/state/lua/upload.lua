-- Add one or more queued documents to a batch (the files of one upload request), creating
-- the batch on its first upload: all of them or, refused, none.
-- KEYS: 1 batch, 2 batch_docs, 3 batch_pending (batches created before `handed` only),
--       4 account_batches, 5 account_pending_bytes (this shard's counter of the account),
--       6 batch_uploads; then two a document, in order: 5 + 2i its doc hash, 6 + 2i its blob
-- ARGV: 1 account, 2 batch name, 3 now (ms), 4 documents (n >= 1), 5 '1' when the bytes go
--       to the blob keys (Redis blob store) else '0', 6 bytes to charge to KEYS[5], all the
--       documents' (0: nothing held in Redis), 7 what KEYS[5] may reach after this upload:
--       the account's quota minus its other shards' counters (-1: no check here; the caller
--       reserved the bytes on the account's total, keyspace.account_pending_total, first),
--       8 the upload's idempotency key ('' for none), 9 what to record under it (the
--       request's fingerprint and document ids: relay.state.uploads), 10 the batch's
--       metadata (canonical JSON, relay.state.metadata; '' for none), 11 the count b of
--       what follows, and b values: the batch's hash as this upload creates it, field and
--       value pairs (relay.state.model.Batch.new_fields: the one place they are named;
--       written only when the batch does not exist yet), then per document, in order: its
--       id, its bytes ('' when not in Redis), the count c of what follows, and c values: its
--       hash's field and value pairs (relay.state.model.Document.new_fields, likewise)
-- Derived from KEYS[1] (same hash tag): the shard's retention index `finished`.
-- Returns JSON (cjson): {created = true, batch_created = true|false}; or the refusal
-- 'deleted' when the batch was deleted, 'quota' when the charge would take KEYS[5] past
-- ARGV[7], 'replayed' when the batch already has an upload made with key ARGV[8] (recorded
-- in KEYS[6]), 'metadata_conflict' when ARGV[10] is not the batch's metadata (nothing is
-- written then).
local batch = redis.call('HMGET', KEYS[1], 'created_at', 'deleted_at', 'completed_at', 'total',
                        'queued', 'handed', 'metadata')
if batch[2] and batch[2] ~= '' then
  return refuse('deleted')
end
if ARGV[8] ~= '' and redis.call('HEXISTS', KEYS[6], ARGV[8]) == 1 then
  return refuse('replayed')
end
-- A batch's metadata is set once, by the first upload that gives one; later ones may give
-- the same (canonical forms compare as strings) or none.
local has_metadata = batch[7] and batch[7] ~= ''
if ARGV[10] ~= '' and has_metadata and batch[7] ~= ARGV[10] then
  return refuse('metadata_conflict')
end
local charge = tonumber(ARGV[6])
local allowance = tonumber(ARGV[7])
if charge > 0 and allowance >= 0 then
  if tonumber(redis.call('GET', KEYS[5]) or '0') + charge > allowance then
    return refuse('quota')
  end
end
local n = tonumber(ARGV[4])
local ids = {}
local new_batch_from, new_batch_to = 12, 11 + tonumber(ARGV[11])
local at = new_batch_to + 1
for i = 1, n do
  local count = tonumber(ARGV[at + 2])
  ids[i] = ARGV[at]
  redis.call('HSET', KEYS[5 + 2 * i], unpack(ARGV, at + 3, at + 2 + count))
  if ARGV[5] == '1' then
    redis.call('SET', KEYS[6 + 2 * i], ARGV[at + 1])
  end
  at = at + 3 + count
end
if ARGV[8] ~= '' then
  redis.call('HSET', KEYS[6], ARGV[8], ARGV[9])
end
if charge > 0 then
  redis.call('INCRBY', KEYS[5], charge)
end
redis.call('RPUSH', KEYS[2], unpack(ids))
-- The documents not yet handed out are KEYS[2] from the batch's `handed` on (process.lua);
-- a batch created before `handed` existed keeps its list of them in KEYS[3].
if batch[1] and not batch[6] then
  redis.call('RPUSH', KEYS[3], unpack(ids))
end
-- The batch's counters are read above and written here with the rest (one HSET), its
-- metadata too when this upload is the first to give one.
local set
if not batch[1] then
  set = {unpack(ARGV, new_batch_from, new_batch_to)}
  redis.call('ZADD', KEYS[4], ARGV[3], ARGV[2])
elseif batch[3] and batch[3] ~= '' then
  -- An upload into a finished batch makes it not done again until the new documents
  -- finish (and takes it out of the retention index until it completes again).
  set = {'total', tonumber(batch[4] or '0') + n, 'queued', tonumber(batch[5] or '0') + n,
         'completed_at', ''}
  redis.call('ZREM', key_finished(batch_prefix(KEYS[1], ARGV[1], ARGV[2])),
             finished_member(ARGV[1], ARGV[2]))
else
  set = {'total', tonumber(batch[4] or '0') + n, 'queued', tonumber(batch[5] or '0') + n}
end
if ARGV[10] ~= '' and not has_metadata then
  set[#set + 1] = 'metadata'
  set[#set + 1] = ARGV[10]
end
redis.call('HSET', KEYS[1], unpack(set))
return cjson.encode({created = true, batch_created = not batch[1]})
