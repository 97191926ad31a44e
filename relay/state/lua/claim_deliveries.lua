-- Claim up to N due deliveries of one shard for one attempt each: each gets a lease token
-- and its score in `due` moves to the lease expiry, so a worker lost mid-attempt leaves it
-- due again once the lease runs out. A batch.completed delivery whose batch still has
-- document events unsettled (waits_for_documents in _lib.lua) is not claimed: it waits,
-- `waiting_since` set, looked at again after ARGV[7] ms, and due at once when the last of
-- them settles (release_waiting): a receiver gets a batch's document events before its
-- batch.completed.
-- KEYS: 1 due
-- ARGV: 1 now (ms), 2 lease (ms), 3 max count, 4 lease token,
--       5 the shard's key prefix (deliveries and webhooks are derived from it),
--       6 how long (ms) a document event without a delivery holds a batch.completed
--       delivery (RELAY_DOCUMENT_EVENTS_WAIT), 7 how often (ms) a waiting one is looked at
-- Returns: a JSON array (cjson), one object per claimed delivery: id, account, batch, url,
--   body, number (this attempt's), round_attempts (attempts in this round), created_at,
--   seq, completed_ms (the batch's completed_at), trace (its trace context, when kept); '[]'
--   when none was claimed. Stored values
--   go out as the strings they are (cjson would print a large number in 14 digits).
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
local out = {}
local now = tonumber(ARGV[1])
local expiry = now + tonumber(ARGV[2])
for _, id in ipairs(ids) do
  local dk = key_delivery(ARGV[5], id)
  local d = redis.call('HMGET', dk, 'status', 'account', 'batch', 'body', 'round_start',
                       'created_at', 'seq', 'completed_at', 'attempt_count', 'trace', 'type',
                       'waiting_since')
  if d[1] ~= 'pending' then
    redis.call('ZREM', KEYS[1], id)
  else
    local wk = key_webhook(ARGV[5], d[2], d[3])
    local w = redis.call('HMGET', wk, 'url', 'disabled', 'verification', 'verify_id', 'events')
    -- The delivery's type, when the webhook chooses by it (register_webhook.lua): a
    -- document event's, or a completion's (seq > 0); nil for an operational event or a
    -- challenge.
    local kind = d[11] or (tonumber(d[7] or '0') > 0 and 'batch.completed') or nil
    local types = (w[5] and w[5] ~= '') and w[5] or 'batch.completed'
    if w[1] and w[2] ~= '1' and w[3] == 'pending' and w[4] ~= id then
      -- Endpoint verification pending: nothing but the challenge is sent; parked until it
      -- ends (release_parked in _lib.lua: due when verified, canceled when it failed).
      redis.call('ZREM', KEYS[1], id)
      redis.call('SADD', key_batch_parked(ARGV[5], d[2], d[3]), id)
    elseif not w[1] or w[2] == '1' or
           (kind and not string.find(' ' .. types .. ' ', ' ' .. kind .. ' ', 1, true)) then
      -- The webhook is gone, disabled, or no longer asks for this type of event.
      redis.call('HSET', dk, 'status', 'canceled', 'next_attempt_at', '', 'lease', '',
                 'updated_at', ARGV[1])
      redis.call('ZREM', KEYS[1], id)
      index_delivery(ARGV[5], id, 'pending', 'canceled', nil, ARGV[1])  -- the indexes
    elseif kind == 'batch.completed' and
           waits_for_documents(ARGV[5], d[2], d[3], tonumber(d[12] or '') or now, now,
                               tonumber(ARGV[6])) then
      local again = now + tonumber(ARGV[7])
      if not d[12] or d[12] == '' then
        redis.call('HSET', dk, 'waiting_since', ARGV[1], 'next_attempt_at', again)
      else
        redis.call('HSET', dk, 'next_attempt_at', again)
      end
      redis.call('ZADD', KEYS[1], again, id)
    else
      local done = tonumber(d[9] or redis.call('LLEN', key_delivery_attempts(ARGV[5], id)))
      if d[12] and d[12] ~= '' then
        redis.call('HSET', dk, 'lease', ARGV[4], 'url', w[1], 'waiting_since', '')
      else
        redis.call('HSET', dk, 'lease', ARGV[4], 'url', w[1])
      end
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
