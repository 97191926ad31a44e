-- Make new signing material current; the old one keeps signing until the grace ends.
-- Refused while the previous rotation's grace runs: the material that was current before it
-- may still be all a receiver holds, and a second rotation would stop signing with it.
-- KEYS: 1 signing
-- ARGV: 1 new material (encrypted), 2 now (ms), 3 grace end (ms)
-- Returns: 1, or the refusal 'rotating' while a previous material signs (previous_until > now).
local s = redis.call('HMGET', KEYS[1], 'current', 'previous', 'previous_until')
if s[2] and tonumber(s[3] or '0') > tonumber(ARGV[2]) then
  return refuse('rotating')
end
if s[1] then
  redis.call('HSET', KEYS[1], 'previous', s[1], 'previous_until', ARGV[3])
end
redis.call('HSET', KEYS[1], 'current', ARGV[1], 'rotated_at', ARGV[2])
return 1
