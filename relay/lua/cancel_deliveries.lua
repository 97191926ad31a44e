-- Remove a batch's webhook: its pending delivery becomes canceled.
-- KEYS: 1 webhook, 2 due
-- ARGV: 1 now (ms), 2 the shard's key prefix (the pending delivery)
-- Returns: 1 when a webhook was removed, 0 when there was none.
local w = redis.call('HMGET', KEYS[1], 'url', 'pending')
if not w[1] then
  return 0
end
if w[2] and w[2] ~= '' then
  local dk = key_delivery(ARGV[2], w[2])
  if redis.call('HGET', dk, 'status') == 'pending' then
    redis.call('HSET', dk, 'status', 'canceled', 'next_attempt_at', '', 'lease', '',
               'updated_at', ARGV[1])
    redis.call('ZREM', KEYS[2], w[2])
    index_delivery(ARGV[2], w[2], 'pending', 'canceled')  -- the delivery indexes
  end
end
redis.call('DEL', KEYS[1])
return 1
