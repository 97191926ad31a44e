-- Purge operational event deliveries created at or before the cutoff (relay.state.retention): each one
-- that is no longer pending goes with its attempts, its index entries and its idempotency
-- entry. They belong to no batch that finishes, so they age out on their own.
-- KEYS: 1 events, 2 due, 3 shard_deliveries
-- ARGV: 1 the shard's key prefix, 2 cutoff (ms; created at or before it), 3 at most this many
-- Returns: how many were purged.
local p = ARGV[1]
local n = 0
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2], 'LIMIT', 0,
                       tonumber(ARGV[3]))
for _, id in ipairs(ids) do
  local d = redis.call('HMGET', key_delivery(p, id), 'status', 'account', 'batch', 'event')
  if d[1] ~= 'pending' then
    if d[1] then
      redis.call('HDEL', key_batch_delivery_by_seq(p, d[2], d[3]), d[4] or '')
      redis.call('ZREM', key_batch_deliveries(p, d[2], d[3]), id)
      index_delivery(p, id, d[1], '')
      redis.call('UNLINK', key_delivery(p, id), key_delivery_attempts(p, id))
    end
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
    n = n + 1
  end
end
return n
