-- Make new signing material current; the old one keeps signing until the grace ends.
-- KEYS: 1 signing
-- ARGV: 1 new material (encrypted), 2 now (ms), 3 grace end (ms)
-- Returns: 1
local current = redis.call('HGET', KEYS[1], 'current')
if current then
  redis.call('HSET', KEYS[1], 'previous', current, 'previous_until', ARGV[3])
end
redis.call('HSET', KEYS[1], 'current', ARGV[1], 'rotated_at', ARGV[2])
return 1
