-- Recovery: make one chunk of an index's failed (or canceled) deliveries created within
-- [since, until] due again now, each with its webhook-id and a fresh retry schedule (what
-- retry_delivery does for one). Those whose webhook is gone or disabled stay as they are
-- and are counted as skipped; they stay in the index, so the next call starts past them.
-- KEYS: 1 the index (deliveries:STATUS, or account:A:deliveries:STATUS), 2 due
-- ARGV: 1 the shard's key prefix, 2 now (ms), 3 since (ms), 4 until (ms), 5 chunk size,
--       6 offset (the skipped ones of earlier calls), 7 the status: 'failed' | 'canceled'
-- Returns: {recovered, skipped, 1 when more may match else 0}
local p, now, status = ARGV[1], ARGV[2], ARGV[7]
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[3], ARGV[4], 'LIMIT', ARGV[6], ARGV[5])
local recovered, skipped = 0, 0
for _, id in ipairs(ids) do
  local dk = key_delivery(p, id)
  local d = redis.call('HMGET', dk, 'status', 'account', 'batch', 'attempt_count')
  local wk = d[2] and key_webhook(p, d[2], d[3])
  local w = wk and redis.call('HMGET', wk, 'url', 'disabled') or {}
  if d[1] ~= status or not w[1] or w[2] == '1' then
    skipped = skipped + 1
  else
    index_delivery(p, id, status, 'pending')
    redis.call('HSET', dk, 'status', 'pending', 'lease', '',
               'round_start', d[4] or redis.call('LLEN', key_delivery_attempts(p, id)),
               'next_attempt_at', now, 'updated_at', now)
    redis.call('HSET', wk, 'pending', id)
    redis.call('ZADD', KEYS[2], now, id)
    recovered = recovered + 1
  end
end
local more = 0
if #ids == tonumber(ARGV[5]) then
  more = 1
end
return {recovered, skipped, more}
