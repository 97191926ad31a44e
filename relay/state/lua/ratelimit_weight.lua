-- Count a request that weighs more than one slot (an upload of several files: one slot a
-- file) in a sliding window, all or nothing: ARGV[3] more slots when that many are free,
-- else none. The window and its members are ratelimit.lua's (same key, same scores).
-- KEYS: 1 the window (sorted set of admitted requests scored by server time in ms)
-- ARGV: 1 window (ms), 2 limit, 3 slots wanted (>= 1), 4 a member prefix unique to this
--       request (the slots are recorded as <prefix>:1..<slots>)
-- Returns: {slots granted (0: refused, nothing recorded; else ARGV[3]), remaining after them,
--           ms until the oldest recorded slot leaves the window}; read by
--           relay.state.rate_limits.SlidingWindow.decide like ratelimit.lua's answer.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
local granted = 0
if count + want <= limit then
  local args = {}
  for i = 1, want do
    args[#args + 1] = now
    args[#args + 1] = ARGV[4] .. ':' .. i
  end
  redis.call('ZADD', KEYS[1], unpack(args))
  granted = want
  count = count + want
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl < window then
    redis.call('PEXPIRE', KEYS[1], window)
  end
end
local reset = window
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if oldest[2] then
  reset = tonumber(oldest[2]) + window - now
end
return {granted, math.max(limit - count, 0), reset}
