-- Hand a claimed delivery back unattempted: due again at a given time, lease cleared. A
-- sender does this when the delivery's destination already has its share of attempts in
-- flight; no attempt is recorded, because none was made.
-- KEYS: 1 delivery, 2 due
-- ARGV: 1 id, 2 lease token, 3 due again at (ms)
-- Returns: 1 when released, 0 when the lease was no longer ours (nothing changes).
local d = redis.call('HMGET', KEYS[1], 'status', 'lease')
if d[1] ~= 'pending' or d[2] ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'lease', '', 'next_attempt_at', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1
