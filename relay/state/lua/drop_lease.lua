-- The lease sweeper drops the expired lease of a document that is gone (its batch purged):
-- there is nothing to requeue, and the lease would otherwise be found again every sweep.
-- KEYS: 1 leases, 2 doc
-- ARGV: 1 doc id, 2 now (ms)
-- Returns: 1 when dropped; 0 when the document is there (requeue.lua's case), the lease was
-- renewed meanwhile or is gone already.
local d = redis.call('HMGET', KEYS[2], 'account', 'batch')
if d[1] and d[2] then
  return 0
end
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if expiry and tonumber(expiry) > tonumber(ARGV[2]) then
  return 0
end
return redis.call('ZREM', KEYS[1], ARGV[1])
