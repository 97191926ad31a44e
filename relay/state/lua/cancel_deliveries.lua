-- Remove a batch's webhook: its pending delivery becomes canceled, and the batch raises no
-- more document events (its `doc_events` goes; the pending ones are canceled when claimed).
-- KEYS: 1 webhook, 2 due
-- ARGV: 1 now (ms), 2 the shard's key prefix (the pending delivery), 3 account, 4 batch
--       name (its deliveries parked by a pending verification are canceled too)
-- Returns: 1 when a webhook was removed, 0 when there was none.
local w = redis.call('HMGET', KEYS[1], 'url', 'pending')
if not w[1] then
  return 0
end
cancel_pending(ARGV[2], KEYS[2], w[2], ARGV[1])
release_parked(ARGV[2], KEYS[2], ARGV[3], ARGV[4], ARGV[1], true)
redis.call('DEL', KEYS[1])
redis.call('HDEL', key_batch(ARGV[2], ARGV[3], ARGV[4]), 'doc_events')
return 1
