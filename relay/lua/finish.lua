-- A worker stores a document's outcome: processing -> succeeded | failed.
-- KEYS: 1 doc, 2 batch, 3 leases, 4 outbox, 5 doc_items, 6 blob, 7 account_pending_bytes
-- ARGV: 1 doc id, 2 lease token, 3 now (ms), 4 'succeeded' | 'failed', 5 result JSON,
--       6 error code, 7 error message
-- Returns: {1, completion_seq or 0} when stored; {0, status} when the lease was lost
-- (the document was handed to another worker, or already ended) and the outcome is dropped.
local d = redis.call('HMGET', KEYS[1], 'status', 'lease')
if d[1] ~= 'processing' or d[2] ~= ARGV[2] then
  return {0, d[1] or 'missing'}
end
redis.call('HSET', KEYS[1], 'status', ARGV[4], 'completed_at', ARGV[3], 'lease', '',
           'error_code', ARGV[6], 'error_message', ARGV[7], 'blob', '')
if ARGV[4] == 'succeeded' then
  redis.call('SET', KEYS[5], ARGV[5])
end
release_charge(KEYS[1], KEYS[7])
redis.call('DEL', KEYS[6])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[2], 'processing', -1)
redis.call('HINCRBY', KEYS[2], ARGV[4], 1)
note_completion(KEYS[2], ARGV[3])
return {1, complete_if_done(KEYS[2], KEYS[4])}
