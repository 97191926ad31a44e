-- Extend a slice's lease while its worker is still reading it (or joining the slices).
-- KEYS: 1 slices, 2 leases
-- ARGV: 1 doc id, 2 slice number, 3 lease token, 4 new expiry (ms)
-- Returns: 1 when renewed, 0 when the lease is no longer this worker's.
local k = ARGV[2]
local s = redis.call('HMGET', KEYS[1], k .. ':state', k .. ':lease')
if s[1] ~= 'processing' or s[2] ~= ARGV[3] then
  return 0
end
redis.call('ZADD', KEYS[2], ARGV[4], slice_member(ARGV[1], k))
return 1
