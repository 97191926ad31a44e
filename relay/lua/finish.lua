-- A worker stores a document's outcome: processing -> succeeded | failed.
-- KEYS: 1 doc, 2 batch, 3 leases, 4 outbox, 5 doc_items, 6 blob, 7 account_pending_bytes
-- ARGV: 1 doc id, 2 lease token, 3 now (ms), 4 'succeeded' | 'failed', 5 result JSON,
--       6 error code, 7 error message
-- Returns JSON (cjson): {stored = true, seq = completion_seq or 0, freed = bytes the caller
-- takes off the account's total (release_known)} when stored; {stored = false, status} when
-- the lease was lost (the document was handed to another worker, or already ended) and the
-- outcome is dropped.
local d = redis.call('HMGET', KEYS[1], 'status', 'lease', 'charged', 'counted')
if d[1] ~= 'processing' or d[2] ~= ARGV[2] then
  return cjson.encode({stored = false, status = d[1] or 'missing'})
end
redis.call('HSET', KEYS[1], 'status', ARGV[4], 'completed_at', ARGV[3], 'lease', '',
           'error_code', ARGV[6], 'error_message', ARGV[7], 'blob', '', 'charged', 0)
if ARGV[4] == 'succeeded' then
  redis.call('SET', KEYS[5], ARGV[5])
end
local freed = release_known(KEYS[7], d[3], d[4])
redis.call('DEL', KEYS[6])
redis.call('ZREM', KEYS[3], ARGV[1])
local seq = end_document(KEYS[2], KEYS[4], ARGV[4], ARGV[3])
return cjson.encode({stored = true, seq = seq, freed = freed})
