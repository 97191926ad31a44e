-- Claim up to N due deliveries of one shard for one attempt each: each gets a lease token
-- and its score in `due` moves to the lease expiry, so a worker lost mid-attempt leaves it
-- due again once the lease runs out.
-- KEYS: 1 due
-- ARGV: 1 now (ms), 2 lease (ms), 3 max count, 4 lease token,
--       5 the shard's key prefix (deliveries and webhooks are derived from it)
-- Returns: a JSON array (cjson), one object per claimed delivery: id, account, batch, url,
--   body, number (this attempt's), round_attempts (attempts in this round), created_at,
--   seq, completed_ms (the batch's completed_at), trace (its trace context, when kept); '[]'
--   when none was claimed. Stored values
--   go out as the strings they are (cjson would print a large number in 14 digits).
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
local out = {}
local expiry = tonumber(ARGV[1]) + tonumber(ARGV[2])
for _, id in ipairs(ids) do
  local dk = key_delivery(ARGV[5], id)
  local d = redis.call('HMGET', dk, 'status', 'account', 'batch', 'body', 'round_start',
                       'created_at', 'seq', 'completed_at', 'attempt_count', 'trace')
  if d[1] ~= 'pending' then
    redis.call('ZREM', KEYS[1], id)
  else
    local wk = key_webhook(ARGV[5], d[2], d[3])
    local w = redis.call('HMGET', wk, 'url', 'disabled', 'verification', 'verify_id')
    if w[1] and w[2] ~= '1' and w[3] == 'pending' and w[4] ~= id then
      -- Endpoint verification pending: nothing but the challenge is sent; parked until it
      -- ends (release_parked in _lib.lua: due when verified, canceled when it failed).
      redis.call('ZREM', KEYS[1], id)
      redis.call('SADD', key_batch_parked(ARGV[5], d[2], d[3]), id)
    elseif not w[1] or w[2] == '1' then
      redis.call('HSET', dk, 'status', 'canceled', 'next_attempt_at', '', 'lease', '',
                 'updated_at', ARGV[1])
      redis.call('ZREM', KEYS[1], id)
      index_delivery(ARGV[5], id, 'pending', 'canceled')  -- the delivery indexes
    else
      local done = tonumber(d[9] or redis.call('LLEN', key_delivery_attempts(ARGV[5], id)))
      redis.call('HSET', dk, 'lease', ARGV[4], 'url', w[1])
      redis.call('ZADD', KEYS[1], expiry, id)
      out[#out + 1] = {
        id = id, account = d[2], batch = d[3], url = w[1], body = d[4],
        number = tostring(done + 1), round_attempts = tostring(done - tonumber(d[5] or '0')),
        created_at = d[6], seq = d[7], completed_ms = d[8] or '0', trace = d[10] or nil,
      }
    end
  end
end
if #out == 0 then
  return '[]'  -- cjson would encode an empty table as {}
end
return cjson.encode(out)
