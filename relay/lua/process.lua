-- Hand every queued document not yet handed out to the workers (idempotent).
-- KEYS: 1 batch, 2 batch_pending, 3 ready
-- ARGV: 1 fields (JSON list), 2 now (ms), 3 '1' to store the fields
-- Returns: the handed document ids (moved to `ready`, where the sweeper finds any whose
-- RQ job was never enqueued), or the refusal 'deleted' / 'missing'.
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
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[3], ARGV[2], id)
end
return ids
