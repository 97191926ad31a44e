-- Extend a document lease while its worker is still extracting.
-- KEYS: 1 doc, 2 leases
-- ARGV: 1 doc id, 2 lease token, 3 new expiry (ms)
-- Returns: 1 when renewed, 0 when the lease is no longer this worker's.
local d = redis.call('HMGET', KEYS[1], 'status', 'lease')
if d[1] ~= 'processing' or d[2] ~= ARGV[2] then
  return 0
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1
