-- Hand every queued document not yet handed out to the workers (idempotent): they join the
-- batch's list in the shard's fair queue (_fair.lua), where workers take them.
-- KEYS: 1 batch, 2 batch_pending
-- ARGV: 1 fields (JSON list), 2 now (ms), 3 '1' to store the fields, 4 the shard's key prefix
--       (the fair queue's keys derive from it), 5 account, 6 batch name
-- Returns: the handed document ids, or the refusal 'deleted' / 'missing'.
local b = redis.call('HMGET', KEYS[1], 'created_at', 'deleted_at')
if not b[1] then
  return refuse('missing')
end
if b[2] and b[2] ~= '' then
  return refuse('deleted')
end
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'fields', ARGV[1])
end
local ids = redis.call('LRANGE', KEYS[2], 0, -1)
redis.call('DEL', KEYS[2])
fair_push(ARGV[4], ARGV[5], ARGV[6], ids, false)
return ids
