-- Make a failed, canceled or succeeded delivery (or a pending one) due again now, with the
-- same webhook-id and a fresh retry schedule. A superseded delivery cannot be retried.
-- KEYS: 1 delivery, 2 due, 3 webhook, 4 delivery attempts
-- ARGV: 1 id, 2 now (ms)
-- Returns: 'ok' or a refusal: 'missing' | 'superseded' | 'no_webhook' | 'disabled'
local d = redis.call('HMGET', KEYS[1], 'status', 'doc')
if not d[1] then
  return refuse('missing')
end
if d[1] == 'superseded' then
  return refuse('superseded')
end
local w = redis.call('HMGET', KEYS[3], 'url', 'disabled')
if not w[1] then
  return refuse('no_webhook')
end
if w[2] == '1' then
  return refuse('disabled')
end
if d[1] ~= 'pending' then
  redis.call('HSET', KEYS[1], 'status', 'pending', 'lease', '',
             'round_start', redis.call('HGET', KEYS[1], 'attempt_count') or
                            redis.call('LLEN', KEYS[4]))
end
if d[1] ~= 'pending' then  -- the delivery indexes
  index_delivery(delivery_prefix(KEYS[1], ARGV[1]), ARGV[1], d[1], 'pending', nil, ARGV[2])
end
redis.call('HSET', KEYS[1], 'next_attempt_at', ARGV[2], 'updated_at', ARGV[2])
-- The webhook's `pending` is its batch.completed delivery: a document event's never is (a
-- completion would supersede it, and release_waiting looks there).
if not d[2] or d[2] == '' then
  redis.call('HSET', KEYS[3], 'pending', ARGV[1])
end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 'ok'
