-- Delete a batch: queued documents -> canceled; processing ones finish (the slices of one
-- read across workers stay in the fair queue); no more uploads; the sources kept of finished
-- documents (finish.lua, RELAY_KEEP_SOURCES) are dropped.
-- KEYS: 1 batch, 2 batch_docs, 3 batch_pending, 4 fair_ring (its documents leave it), 5 outbox,
--       6 account_pending_bytes
-- ARGV: 1 now (ms), 2 the shard's key prefix (documents and blobs are derived from it)
-- Returns: a JSON object (cjson): found (1/0) and, when any, canceled: the ids of the
--   documents canceled now (absent when none: cjson would encode an empty list as {}),
--   freed: the bytes the caller takes off the account's total (release_charge), and, when
--   any, outside: the documents (canceled, or finished with a kept source) whose dropped bytes
--   are outside Redis, as the members recorded in the shard's blob_deletions (drop_outside:
--   the caller deletes them)
-- Documents' keys are derived from ARGV[2] (same hash tag as KEYS) because a batch may hold
-- any number of them; each cancellation is O(1).
local b = redis.call('HMGET', KEYS[1], 'created_at', 'deleted_at')
if not b[1] then
  return cjson.encode({found = 0})
end
if b[2] and b[2] ~= '' then
  return cjson.encode({found = 1})
end
redis.call('HSET', KEYS[1], 'deleted_at', ARGV[1])
redis.call('DEL', KEYS[3])
local who = redis.call('HMGET', KEYS[1], 'account', 'name')
local dropped = 0  -- slices among the entries the fair queue drops
for _, entry in ipairs(redis.call('LRANGE', key_batch_ready(ARGV[2], who[1], who[2]), 0, -1)) do
  if parse_slice(entry) then
    dropped = dropped + 1
  end
end
fair_drop_batch(ARGV[2], who[1], who[2])
fair_count_slices(ARGV[2], -dropped)
local canceled, outside, slices = {}, {}, {}
local deletions = key_blob_deletions(ARGV[2])
local freed = 0
local ids = redis.call('LRANGE', KEYS[2], 0, -1)
for _, id in ipairs(ids) do
  local dk = key_doc(ARGV[2], id)
  local d = redis.call('HMGET', dk, 'status', 'blob', 'page_count')
  if d[1] == 'processing' and d[3] then  -- read in slices: its waiting ones go back
    local sk = key_doc_slices(ARGV[2], id)
    for k = 1, tonumber(redis.call('HGET', sk, 'n') or '0') do
      if redis.call('HGET', sk, k .. ':state') == 'queued' then
        slices[#slices + 1] = slice_member(id, k)
      end
    end
  end
  if d[1] == 'queued' then
    redis.call('HSET', dk, 'status', 'canceled', 'completed_at', ARGV[1], 'blob', '')
    freed = freed + release_charge(dk, KEYS[6])
    redis.call('DEL', key_blob(ARGV[2], id))
    outside[#outside + 1] = drop_outside(deletions, d[2], id, ARGV[1])
    redis.call('HINCRBY', KEYS[1], 'queued', -1)
    redis.call('HINCRBY', KEYS[1], 'canceled', 1)
    canceled[#canceled + 1] = id
  elseif (d[1] == 'succeeded' or d[1] == 'failed') and d[2] and d[2] ~= '' then
    redis.call('HSET', dk, 'blob', '')
    redis.call('DEL', key_blob(ARGV[2], id))
    outside[#outside + 1] = drop_outside(deletions, d[2], id, ARGV[1])
  end
end
fair_push(ARGV[2], who[1], who[2], slices, false)
fair_count_slices(ARGV[2], #slices)
if #canceled > 0 then
  note_completion(KEYS[1], ARGV[1])
end
complete_if_done(KEYS[1], KEYS[5])
if #canceled == 0 then
  canceled = nil
end
if #outside == 0 then
  outside = nil
end
return cjson.encode({found = 1, canceled = canceled, freed = freed, outside = outside})
