-- A worker claims a queued document: queued -> processing, started_at, a lease.
-- KEYS: 1 doc, 2 batch, 3 batch_started, 4 leases, 5 ready
-- ARGV: 1 doc id, 2 now (ms), 3 lease (ms), 4 lease token
-- Returns: {1, fields, filename, content_type, blob ref, claims} when claimed,
--          {0, status} when the document is not queued (another worker has it, or it ended).
local d = redis.call('HMGET', KEYS[1], 'status', 'filename', 'content_type', 'blob')
if not d[1] then
  redis.call('ZREM', KEYS[5], ARGV[1])
  return {0, 'missing'}
end
if d[1] ~= 'queued' then
  redis.call('ZREM', KEYS[5], ARGV[1])  -- a document that is not queued needs no hand-out
  return {0, d[1]}
end
local claims = redis.call('HINCRBY', KEYS[1], 'claims', 1)
redis.call('HSET', KEYS[1], 'status', 'processing', 'started_at', ARGV[2], 'lease', ARGV[4])
redis.call('ZADD', KEYS[4], tonumber(ARGV[2]) + tonumber(ARGV[3]), ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('HINCRBY', KEYS[2], 'queued', -1)
redis.call('HINCRBY', KEYS[2], 'processing', 1)
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
local started = redis.call('HGET', KEYS[2], 'started_at')
if not started or started == '' or tonumber(started) > tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[2], 'started_at', ARGV[2])
end
local fields = redis.call('HGET', KEYS[2], 'fields') or '[]'
return {1, fields, d[2], d[3], d[4], claims}
