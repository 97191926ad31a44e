-- Disable a batch's webhook (with a reason) or enable it again (operators, the console).
-- Disabling cancels the pending delivery, as removing the webhook does; enabling makes no
-- delivery due (a retry or recovery does that).
-- KEYS: 1 webhook, 2 due
-- ARGV: 1 '1' disable | '0' enable, 2 reason (for disable), 3 now (ms),
--       4 the shard's key prefix (the pending delivery), 5 account, 6 batch name (its
--       deliveries parked by a pending verification are canceled too)
-- Returns: 1 when the webhook exists (now in the asked state), or the refusal 'missing'.
local w = redis.call('HMGET', KEYS[1], 'url', 'pending')
if not w[1] then
  return refuse('missing')
end
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'disabled', '1', 'disabled_reason', ARGV[2], 'updated_at', ARGV[3])
  if w[2] and w[2] ~= '' then
    cancel_pending(ARGV[4], KEYS[2], w[2], ARGV[3])
    redis.call('HSET', KEYS[1], 'pending', '')
  end
  release_parked(ARGV[4], KEYS[2], ARGV[5], ARGV[6], ARGV[3], true)
else
  redis.call('HSET', KEYS[1], 'disabled', '0', 'disabled_reason', '', 'updated_at', ARGV[3])
end
return 1
